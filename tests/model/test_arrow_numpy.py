"""model/arrow_numpy.py: numeric columns cross between numpy and Arrow exactly, zero-copy,
without importing pandas - and so do the commands that convert (a box query, an Arrow-format
load and read, export to Arrow/Parquet), each in a fresh process."""

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from loader.model.arrow_numpy import from_numpy, to_numpy

NUMERIC = st.sampled_from(["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8"])


@settings(deadline=None)  # the first call imports pyarrow's conversions
@given(hnp.arrays(NUMERIC, st.integers(0, 50)), st.integers(1, 3))
def test_numbers_cross_both_ways_as_pyarrow_converts_them(a, step):
    a = a[::step]  # strided views too
    arr = from_numpy(a)
    want = pa.array(a)
    assert arr.type == want.type and len(arr) == len(want) and arr.null_count == 0
    assert to_numpy(arr).tobytes() == to_numpy(want).tobytes()  # NaNs included
    back = to_numpy(arr)
    assert back.dtype == a.dtype and back.tobytes() == np.ascontiguousarray(a).tobytes()
    assert to_numpy(pa.chunked_array([arr, arr])).tobytes() == np.concatenate([a, a]).tobytes()


def test_other_columns_take_pyarrow_s_own_path():
    assert from_numpy(np.array([True, False])).type == pa.bool_()
    assert from_numpy(np.arange(3, dtype=">i4")).to_pylist() == [0, 1, 2]  # not native: converted
    assert from_numpy(np.arange(3, dtype="i4"), pa.int64()).type == pa.int64()
    assert to_numpy(pa.array([1, None, 3], pa.float64())).tolist()[::2] == [1.0, 3.0]
    assert to_numpy(pa.array([], pa.int32())).dtype == np.int32
    sliced = pa.array(np.arange(10, dtype="i8")).slice(3, 4)
    assert to_numpy(sliced).tolist() == [3, 4, 5, 6]


def test_reads_and_arrow_loads_do_not_import_pandas(tmp_path):
    pytest.importorskip("pandas")  # only then could pyarrow import it
    flat, arrow = f"lmdb://{tmp_path}/flat", f"lmdb://{tmp_path}/arrow"
    code = f"""
import sys, loader
from loader.arrays.finalize import finalize
loader.load("gen://scidb96?n=3000", {flat!r}, shards=2, workers=2, progress="none")
finalize({flat!r}, dims="i0:5,i1:500", workers=2, progress="none")
loader.load("gen://scidb96?n=3000", {arrow!r}, shards=2, workers=2, format="arrow", progress="none")
with loader.open({flat!r}) as ds:
    recs = ds.read_records()
    want = int(((recs["i0"] < 5) & (recs["i1"] >= 100) & (recs["i1"] < 300)).sum())
    assert ds.read_box(i0=(0, 5), i1=(100, 300)).num_rows == want > 0
    assert ds.to_arrow().num_rows == 3000
with loader.open({arrow!r}) as ds:
    assert len(ds.read_records(10, 20)) == 10
loader.export({flat!r}, {str(tmp_path / "x.parquet")!r}, format="parquet")
print('pandas' in sys.modules)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False", p.stderr
