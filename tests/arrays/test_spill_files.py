"""The arrays a finalize's workers hand its coordinator through the spill directory
(arrays/spill_files.py): they come back as written, a file that is not whole rows is an
error naming it, and a finalize needs no ``ast.literal_eval`` - which a stop landing inside
Python's AST conversion breaks for the rest of the process (CPython gh-106905: an
in-process finalize after a stopped one failed reading its workers' .npy files)."""

from __future__ import annotations

import ast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loader
from loader.arrays import spill_files
from loader.arrays.build_emit import SAMPLE_DTYPE
from loader.arrays.finalize import finalize
from loader.arrays.partition import DIR_DTYPE
from loader.arrays.scan import ENTRY_DTYPE
from loader.errors import WorkerError
from loader.model.chunk_index import index_columns
from loader.model.layouts import get_layout

DTYPES = [ENTRY_DTYPE, DIR_DTYPE, SAMPLE_DTYPE, np.dtype(index_columns(get_layout("scidb96")))]


@settings(max_examples=40, deadline=None)
@given(which=st.integers(0, len(DTYPES) - 1), n=st.integers(0, 300), seed=st.integers(0, 2**32 - 1))
def test_what_is_saved_is_loaded(tmp_path_factory, which, n, seed):
    dt = DTYPES[which]
    arr = np.frombuffer(np.random.default_rng(seed).bytes(n * dt.itemsize), dt)
    path = str(tmp_path_factory.mktemp("spill") / "a")
    spill_files.save(path, arr[::-1])  # not contiguous: saved in its order
    got = spill_files.load(path, dt)
    assert got.dtype == dt and got.tobytes() == arr[::-1].tobytes()


@pytest.mark.parametrize("cut", [1, 7, DIR_DTYPE.itemsize - 1, DIR_DTYPE.itemsize + 3])
def test_a_file_that_is_not_whole_rows_is_an_error_naming_it(tmp_path, cut):
    path = str(tmp_path / "run.dir")
    spill_files.save(path, np.zeros(4, DIR_DTYPE))
    with open(path, "r+b") as f:
        f.truncate(4 * DIR_DTYPE.itemsize - cut)
    with pytest.raises(WorkerError, match=f"{path}: .* not a whole number of {DIR_DTYPE.itemsize}-byte rows"):
        spill_files.load(path, DIR_DTYPE)


@pytest.mark.parametrize("strategy", ["direct", "spill"])
def test_a_finalize_reads_its_workers_files_without_literal_eval(tmp_path, monkeypatch, strategy):
    """With ``ast.literal_eval`` failing as gh-106905 leaves it, a small finalize (its
    workers are threads of this process) builds the same array as one without."""
    uri, ref = f"lmdb://{tmp_path}/ds", f"lmdb://{tmp_path}/ref"
    for u in (uri, ref):
        loader.load("gen://scidb96?n=20000", u, shards=2, workers=2, batch_records=1000)
    finalize(ref, dims="i0:10,i1:1000", workers=2, strategy=strategy)

    def broken(*a, **k):
        raise SystemError("AST constructor recursion depth mismatch (before=144, after=165)")

    monkeypatch.setattr(ast, "literal_eval", broken)
    finalize(uri, dims="i0:10,i1:1000", workers=2, strategy=strategy)
    monkeypatch.undo()
    with loader.open(uri) as a, loader.open(ref) as b:
        assert a.verify().ok
        assert a.read_box("grid").equals(b.read_box("grid"))
