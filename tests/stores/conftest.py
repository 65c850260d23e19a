"""Fixtures of the store tests: a fresh dataset description per test, for each backend."""

from __future__ import annotations

import shutil

import pytest

from .store_helpers import BACKENDS, make_spec


@pytest.fixture(params=list(BACKENDS))
def any_spec(request, tmp_path):
    """A dataset description of every backend in turn (mem:// removed afterwards)."""
    spec = make_spec(request.param, tmp_path)
    yield spec
    if spec.scheme == "mem":
        shutil.rmtree(spec.root, ignore_errors=True)


@pytest.fixture
def lmdb_spec(tmp_path):
    yield make_spec("lmdb", tmp_path)


@pytest.fixture
def mem_spec(tmp_path):
    spec = make_spec("mem", tmp_path)
    yield spec
    shutil.rmtree(spec.root, ignore_errors=True)
