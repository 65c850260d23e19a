"""arrays/records.py: whole-record views, per-field min/max in blocks, and exact preads."""

import os

import numpy as np
import pytest

from loader.arrays.records import field_min_max, pread_into, void_view
from loader.model.layouts import get_layout

DT = get_layout("scidb96").dtype


@pytest.mark.parametrize("n,block", [(1, 8192), (8192, 8192), (8193, 8192), (20000, 8192), (10, 3)])
def test_field_min_max_equals_numpy(n, block):
    rng = np.random.default_rng(n)
    recs = np.zeros(n, DT)
    for f in DT.names:
        recs[f] = rng.integers(-(10**6), 10**6, n) if DT[f].kind == "i" else rng.standard_normal(n)
    lo, hi = field_min_max(recs, list(DT.names), block)
    assert lo == [recs[f].min() for f in DT.names] and hi == [recs[f].max() for f in DT.names]


def test_void_view_moves_whole_records():
    recs = np.zeros(4, DT)
    recs["i0"] = [1, 2, 3, 4]
    recs["d9"] = [0.5, 1.5, 2.5, 3.5]
    out = np.empty(2, DT)
    np.take(void_view(recs), [3, 1], out=void_view(out))
    assert out["i0"].tolist() == [4, 2] and out["d9"].tolist() == [3.5, 1.5]
    assert void_view(recs).dtype.itemsize == DT.itemsize == 96


def test_pread_into_reads_exactly_or_says_where_it_ended(tmp_path):
    p = tmp_path / "run.rec"
    p.write_bytes(bytes(range(200)))
    fd = os.open(p, os.O_RDONLY)
    try:
        buf = bytearray(50)
        pread_into(fd, memoryview(buf), 100)
        assert bytes(buf) == bytes(range(100, 150))
        with pytest.raises(OSError, match="spill run ended early at byte 200"):
            pread_into(fd, memoryview(bytearray(60)), 180)
    finally:
        os.close(fd)
