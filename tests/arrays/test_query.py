"""Box queries: the Python API, --box parsing, the CLI output formats, readahead off."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import run_cli

import loader
from loader.arrays.finalize import finalize
from loader.arrays.query import parse_box
from loader.errors import NotFoundError, UsageError

N = 6000


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """scidb96 records 0..N-1 as the SciDB example's array with small chunks (i0:4, i1:500)."""
    uri = f"lmdb://{tmp_path_factory.mktemp('q')}/ds"
    loader.load(f"gen://scidb96?n={N}", uri, shards=3, workers=2, batch_records=700)
    finalize(uri, dims="i0:4,i1:500", workers=2)
    return uri


def expected(i0, i1):
    """Records j have i0 = j % 10, i1 = j: the box's cells in row-major order."""
    j = np.arange(N)
    m = (j % 10 >= i0[0]) & (j % 10 < i0[1]) & (j >= i1[0]) & (j < i1[1])
    sel = j[m]
    return sel[np.lexsort((sel, sel % 10))]


@pytest.mark.parametrize(
    "i0,i1",
    [
        ((0, 10), (0, N)),
        ((2, 5), (990, 1020)),
        ((3, 4), (1234, 1235)),
        ((0, 10), (499, 501)),
        ((1, 9), (-100, 2500)),
        ((7, 8), (0, N)),
        ((5, 5), (0, N)),
        ((0, 10), (N, N + 100)),
        ((-5, 0), (0, N)),
    ],
)
def test_read_box_matches_row_major_model(grid, i0, i1):
    with loader.open(grid) as ds:
        tb = ds.read_box(i0=i0, i1=i1)
    j = expected(i0, i1)
    assert tb.column_names == ["i0", "i1"] + [f"d{k}" for k in range(10)] + ["i2", "i3"]
    assert tb.column("i1").to_numpy().tolist() == j.tolist()
    assert tb.column("i0").to_numpy().tolist() == (j % 10).tolist()
    assert np.array_equal(tb.column("d3").to_numpy(), j.astype(np.float64) ** 2)
    assert np.array_equal(tb.column("i2").to_numpy(), (17 * j) % 100)


def test_attrs_open_ranges_and_slices(grid):
    with loader.open(grid) as ds:
        tb = ds.read_box(attrs=["d0", "i3"], i0=(None, 2), i1=slice(100, 130))
        assert tb.column_names == ["i0", "i1", "d0", "i3"]
        assert tb.column("i1").to_pylist() == [100, 110, 120, 101, 111, 121]
        assert ds.read_box(attrs="d9", i1=(5, 6)).column_names == ["i0", "i1", "d9"]
        with pytest.raises(UsageError, match="no attribute 'zz'"):
            ds.read_box(attrs=["zz"])
        with pytest.raises(UsageError, match="'i7' is not one of them"):
            ds.read_box(i7=(1, 2))
        with pytest.raises(UsageError, match=r"\(start, stop\)"):
            ds.read_box(i0=5)
        with pytest.raises(NotFoundError, match="no array 'nope'"):
            ds.read_box("nope")
        (a,) = ds.arrays()
        assert a["name"] == "grid" and a["cells"] == N and a["bounds"] == {"i0": [0, 9], "i1": [0, N - 1]}
        assert [d["chunk"] for d in a["dims"]] == [4, 500] and a["chunks"] == 3 * 12 and not a["stale"]


def test_query_reads_chunks_with_readahead_off(grid):
    with loader.open(grid) as ds:
        ds.read_box(i0=(0, 1), i1=(0, 10))
        st = next(iter(ds._shards.values()))
        assert st.env.flags()["readahead"] is False


def test_parse_box():
    assert parse_box("i0=2:5,i1=1000000:1001000") == {"i0": (2, 5), "i1": (1000000, 1001000)}
    assert parse_box(" i0 = -3:-1 , i1=:7") == {"i0": (-3, -1), "i1": (None, 7)}
    assert parse_box("i1=5:") == {"i1": (5, None)}
    for bad, msg in [
        ("", "empty"),
        ("i0=2", "DIM=START:STOP"),
        ("i0=a:b", "DIM=START:STOP"),
        ("i0=1:2,i0=3:4", "given twice"),
        ("i0=1:2;i1=3:4", "DIM=START:STOP"),
        ("=1:2", "DIM=START:STOP"),
        ("i0=1.5:2", "DIM=START:STOP"),
    ]:
        with pytest.raises(UsageError, match=msg):
            parse_box(bad)


@pytest.mark.parametrize(
    "box,msg",
    [
        ("i0=2", "not DIM=START:STOP"),
        ("i0=x:5", "not DIM=START:STOP"),
        ("i9=1:2", "'i9' is not one of them"),
        ("", "--box is empty"),
    ],
)
def test_cli_query_bad_box_exit_2(grid, box, msg):
    r = run_cli("query", grid, "--box", box)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], r.stderr


def test_cli_query_formats(grid, tmp_path):
    box = "i0=2:4,i1=990:1020"
    j = expected((2, 4), (990, 1020))
    r = run_cli("query", grid, "--box", box, "--attrs", "d0")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["i0", "i1", "d0"] and lines[-1] == f"({len(j)} cells)"
    r = run_cli("query", grid, "--box", box, "--attrs", "d0", "--format", "csv")
    assert r.stdout.splitlines()[0].replace('"', "") == "i0,i1,d0" and len(r.stdout.splitlines()) == len(j) + 1
    r = run_cli("query", grid, "--box", box, "--json")
    rows = json.loads(r.stdout)
    assert [x["i1"] for x in rows] == j.tolist() and set(rows[0]) >= {"i0", "i1", "d9"}
    for fmt, read in [
        ("arrow", lambda p: pa.ipc.open_file(p).read_all()),
        ("parquet", pq.read_table),
        ("npy", lambda p: pa.table({n: np.load(p)[n] for n in np.load(p).dtype.names})),
    ]:
        out = tmp_path / f"q.{fmt}"
        r = run_cli("query", grid, "--box", box, "--format", fmt, "--out", out)
        assert r.returncode == 0, r.stderr
        tb = read(str(out))
        assert tb.column("i1").to_pylist() == j.tolist() and tb.num_columns == 14
    r = run_cli("query", grid, "--box", box, "--format", "xml")
    assert r.returncode == 2 and "--format 'xml' is unknown" in r.stderr
    r = run_cli("query", grid, "--box", "i0=100:200")
    assert r.returncode == 0 and r.stdout.strip().endswith("(0 cells)")


def test_cli_query_without_array_exit_1(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100", uri, shards=1)
    r = run_cli("query", uri, "--box", "i0=0:1")
    assert r.returncode == 1 and "has no array 'grid'" in r.stderr
