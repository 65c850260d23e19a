"""Shared by the damaged-dataset tests: one small finalized dataset per backend (shards and
an array index, copied by each test before it damages it) and a digest of its data files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def finalized(tmp_path_factory) -> dict[str, Path]:
    """scheme -> the directory of a small finalized dataset (2 shards, 4 batches, one array)."""
    base = tmp_path_factory.mktemp("base")
    out = {}
    for scheme in ("lmdb", "rocksdb"):
        uri = f"{scheme}://{base}/{scheme}"
        run_cli("load", "gen://scidb96?n=2000", uri, "--shards", "2", "--batch-records", "500", "-q", check=True)
        run_cli("finalize", uri, "--dims", "i0:10,i1:1000", "-q", check=True)
        out[scheme] = base / scheme
    return out


def digest(root: Path) -> dict[str, str]:
    """sha256 of every shard and array file (lock files and RocksDB logs aside: an open may
    touch them)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not p.is_symlink()
        and p.parent != root
        and p.name not in ("lock.mdb", "writer.lock", "LOCK")
        and "LOG" not in p.name
    }
