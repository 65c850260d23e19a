"""`Dataset.to_dask_dataframe()` and `Dataset.to_dask_array()` (loader/read/dask_read.py) on
the threaded scheduler: equal to the non-Dask readers (read_records, the flat records) on
lmdb and rocksdb, capnp and arrow; boxes at and beyond the array's edges; an empty
dataset and array; a commit (append, compact, finalize rebuild, --replace) between
building a collection and computing it reads the snapshot it was built from or fails
with the "build it again" error, never data of two snapshots; the errors of bad
arguments; dask imported only by these methods. The same on a real LocalCluster:
tests/dask_engine/test_read.py."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loader
from loader.errors import DatasetReplacedError, SnapshotExpiredError, UsageError

DIMS = "i0:4,i1:300"  # a chunk grid with partial chunks at both ends of both dimensions
THREADS = dict(scheduler="threads")


def make_dataset(uri: str, fmt: str = "capnp") -> None:
    """3,000 records in two runs of uneven batches (5 x 400, 4 x 250) over 2 shards,
    finalized without merging the batches."""
    loader.load("gen://scidb96?n=2000&start=5", uri, shards=2, workers=1, batch_records=400, format=fmt)
    loader.load("gen://scidb96?n=1000&start=2005", uri, workers=1, batch_records=250)
    loader.finalize(uri, dims=DIMS, workers=1, compact=False)


def records_frame(recs: np.ndarray, first: int = 0) -> pd.DataFrame:
    """The non-Dask answer: read_records as pandas, indexed by record number."""
    return pd.DataFrame(recs, index=pd.Index(np.arange(first, first + len(recs)), name="record"))


def dense_from_records(recs: np.ndarray, attr: str, fill, box) -> np.ndarray:
    """The non-Dask answer for a box ((start0, stop0), (start1, stop1)), from the flat
    records (not from read_box): each record is one cell (duplicates: error)."""
    (s0, e0), (s1, e1) = box
    out = np.full((e0 - s0, e1 - s1), fill, recs.dtype[attr])
    r, c = recs["i0"].astype(np.int64), recs["i1"].astype(np.int64)
    inside = (r >= s0) & (r < e0) & (c >= s1) & (c < e1)
    out[r[inside] - s0, c[inside] - s1] = recs[attr][inside]
    return out


def default_box(ds) -> tuple:
    """The documented default: from the corner of the array's first chunk to its last cell."""
    a = ds.manifest.arrays["grid"]
    return tuple(
        ((lo // d["chunk"]) * d["chunk"], hi + 1)
        for d, (lo, hi) in zip(a["dims"], (a["bounds"]["i0"], a["bounds"]["i1"]), strict=True)
    )


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """store-format -> URI of a dataset made by `make_dataset` (made once for the module):
    each store and each format once (the tests of the Dask engine cross them all)."""
    root = tmp_path_factory.mktemp("dask-read")
    out = {}
    for store, fmt in (("lmdb", "capnp"), ("rocksdb", "arrow")):
        out[f"{store}-{fmt}"] = uri = f"{store}://{root}/{store}-{fmt}"
        make_dataset(uri, fmt)
    return out


# --- equal to the non-Dask readers ------------------------------------------------------------


@pytest.mark.parametrize("which", ["lmdb-capnp", "rocksdb-arrow"])
def test_dataframe_equals_read_records_whatever_the_partition_size(datasets, which):
    with loader.open(datasets[which]) as ds:
        want = records_frame(ds.read_records())
        arrow = ds.to_arrow().to_pandas()
        # partition_bytes -> partitions: whole batches, a new partition once the last reached the size
        sizes = {1: 9, 400 * 96: 7, 1000 * 96: 3, None: 1}
        for size, parts in sizes.items():
            df = ds.to_dask_dataframe(partition_bytes=size)
            assert df.npartitions == parts and df.known_divisions
            assert list(df.columns) == list(arrow.columns) and df.dtypes.equals(arrow.dtypes)
            got = df.compute(**THREADS)
            pd.testing.assert_frame_equal(got, want, check_index_type=False)
        df = ds.to_dask_dataframe(partition_bytes=1)
        pd.testing.assert_frame_equal(
            df.loc[1990:2260].compute(**THREADS), want.loc[1990:2260], check_index_type=False
        )  # divisions select partitions


@pytest.mark.parametrize("which", ["lmdb-capnp", "rocksdb-arrow"])
def test_array_equals_the_records_cell_by_cell(datasets, which):
    with loader.open(datasets[which]) as ds:
        recs = ds.read_records()
        box = default_box(ds)
        for attr, fill, chunks in (("d3", None, None), ("i2", -1, (8, 600)), ("d0", 0.5, (4, 900))):
            x = ds.to_dask_array("grid", attr=attr, fill=fill, chunks=chunks)
            assert x.shape == tuple(e - s for s, e in box) and x.dtype == recs.dtype[attr]
            assert x.chunksize == (chunks or (4, 300))
            want = dense_from_records(recs, attr, np.nan if fill is None else fill, box)
            np.testing.assert_array_equal(x.compute(**THREADS), want)


EDGE_BOXES = [
    ((9, 10), (3004, 3005)),  # the last cell's corner: one cell
    ((7, 14), (2950, 3400)),  # across the upper edges, beyond the last cell
    ((-5, 3), (-310, 20)),  # across the lower edges, negative coordinates
    ((100, 104), (0, 10)),  # entirely outside: all fill
    ((3, 3), (0, 10)),  # no rows
    ((0, 10), (299, 301)),  # exactly across a chunk border
]


@pytest.mark.parametrize("box", EDGE_BOXES)
def test_a_box_at_the_arrays_edges_equals_the_records(datasets, box):
    with loader.open(datasets["rocksdb-arrow"]) as ds:
        assert ds.manifest.arrays["grid"]["bounds"] == {"i0": [0, 9], "i1": [5, 3004]}
        x = ds.to_dask_array("grid", attr="i3", fill=0, box=dict(zip(("i0", "i1"), box, strict=True)))
        np.testing.assert_array_equal(x.compute(**THREADS), dense_from_records(ds.read_records(), "i3", 0, box))


@settings(max_examples=20, deadline=None)
@given(
    s0=st.integers(-6, 12),
    n0=st.integers(0, 9),
    s1=st.integers(-400, 3300),
    n1=st.integers(0, 700),
    k0=st.integers(1, 3),
    k1=st.integers(1, 3),
)
def test_any_box_and_block_size_equals_the_records(datasets, s0, n0, s1, n1, k0, k1):
    box = ((s0, s0 + n0), (s1, s1 + n1))
    with loader.open(datasets["lmdb-capnp"]) as ds:
        x = ds.to_dask_array("grid", attr="d9", chunks=(4 * k0, 300 * k1), box={"i0": box[0], "i1": box[1]})
        np.testing.assert_array_equal(x.compute(**THREADS), dense_from_records(ds.read_records(), "d9", np.nan, box))


@pytest.mark.parametrize("store", ["lmdb", "rocksdb", "mem"])
def test_an_empty_dataset_and_an_empty_array(store, tmp_path):
    uri = f"{store}://{tmp_path}/ds" if store != "mem" else f"mem://dask-read-{os.getpid()}"
    try:
        loader.load("gen://scidb96?n=0", uri, shards=2)
        loader.finalize(uri, dims=DIMS, workers=1)
        with loader.open(uri) as ds:
            df = ds.to_dask_dataframe()
            got = df.compute(**THREADS)
            assert len(got) == 0 and got.dtypes.equals(records_frame(ds.read_records()).dtypes)
            assert ds.to_dask_array("grid", attr="d0").compute(**THREADS).shape == (0, 0)
            box = {"i0": (0, 3), "i1": (5, 7)}
            np.testing.assert_array_equal(
                ds.to_dask_array("grid", attr="i2", fill=7, box=box).compute(**THREADS), np.full((3, 2), 7, np.int32)
            )
    finally:
        if store == "mem":
            import shutil

            shutil.rmtree(f"/dev/shm/bulkload/dask-read-{os.getpid()}", ignore_errors=True)


# --- a commit between building and computing --------------------------------------------------


def pins(uri):
    d = os.path.join(uri.split("://", 1)[1], ".readers")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


@pytest.mark.parametrize("store", ["lmdb", "rocksdb"])
def test_a_commit_between_build_and_compute_reads_the_snapshot_it_was_built_from(store, tmp_path):
    uri = f"{store}://{tmp_path}/ds"
    make_dataset(uri)
    with loader.open(uri) as ds:  # closed before the commits: the collections hold the snapshot
        recs = ds.read_records()
        df = ds.to_dask_dataframe(partition_bytes=1)
        x = ds.to_dask_array("grid", attr="d1")
        generation = ds.manifest.generation
    assert pins(uri) == [str(generation)]
    loader.load("gen://scidb96?n=700&start=9000", uri)  # appended
    loader.compact(uri, target_batch_records=1000, force=True, workers=1)  # batches merged (new keys)
    loader.finalize(uri, dims="i0:5,i1:1000", workers=1)  # array rebuilt (a new table)
    with loader.open(uri) as now:
        assert now.records == 3700 and now.manifest.garbage  # the old batches and build are still on disk
    pd.testing.assert_frame_equal(df.compute(**THREADS), records_frame(recs), check_index_type=False)
    np.testing.assert_array_equal(x.compute(**THREADS), dense_from_records(recs, "d1", np.nan, ((0, 10), (0, 3005))))
    del df, x
    gc.collect()
    assert pins(uri) == []  # gone with the collections: the next writer collects the garbage
    loader.compact(uri, force=True)
    with loader.open(uri) as now:
        assert not now.manifest.garbage and now.verify().ok
        pd.testing.assert_frame_equal(
            now.to_dask_dataframe().compute(**THREADS), records_frame(now.read_records()), check_index_type=False
        )


@pytest.mark.parametrize("store", ["lmdb", "rocksdb"])
def test_an_unpinned_collection_whose_data_was_collected_says_build_it_again(store, tmp_path):
    uri = f"{store}://{tmp_path}/ds"
    make_dataset(uri)
    with loader.open(uri, pin=False) as ds:  # a reader that does not hold its snapshot
        df = ds.to_dask_dataframe()
        x = ds.to_dask_array("grid", attr="d1")
    loader.compact(uri, target_batch_records=1000, force=True, workers=1)  # no pin: old batches deleted
    loader.finalize(uri, dims="i0:5,i1:1000", workers=1)  # and the old array build
    for collection in (df, x):
        with pytest.raises(
            SnapshotExpiredError,
            match="changed since this Dask collection was built from it "
            r"\(generation \d+, now \d+\).*build the collection again",
        ):
            collection.compute(**THREADS)


def test_a_replaced_dataset_says_replaced(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    make_dataset(uri)
    with loader.open(uri) as ds:
        df = ds.to_dask_dataframe()
        x = ds.to_dask_array("grid", attr="d1")
    loader.load("gen://scidb96?n=100", uri, replace=True)
    for collection in (df, x):
        with pytest.raises(DatasetReplacedError, match="was replaced") as e:
            collection.compute(**THREADS)
        assert type(e.value) is DatasetReplacedError


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, message",
    [
        (dict(attr=None), r"array 'grid' needs attr= one of d0, d1, .*, i3"),
        (dict(attr="nope"), r"array 'grid' has no attribute 'nope': one of d0"),
        (dict(attr="i0"), "has no attribute 'i0'"),  # a dimension is not an attribute
        (dict(attr="i2"), r"attribute 'i2' is int32, which has no empty value: give fill="),
        (dict(attr="i2", fill=2**31), r"fill=2147483648 is not a int32 value"),
        (dict(attr="i2", fill=1.5), r"fill=1.5 is not a int32 value"),
        (dict(attr="d0", fill="x"), r"fill='x' is not a float64 value"),
        (
            dict(attr="d0", chunks=(6, 300)),
            r"chunks=\(6, 300\): give two block sizes that are multiples of .*\(4, 300\)",
        ),
        (dict(attr="d0", chunks=(4,)), "multiples of array 'grid'"),
        (dict(attr="d0", box={"x": (0, 1)}), "has dimensions i0, i1, not x"),
        (dict(attr="d0", box={"i0": (5, 1)}), r"the range of 'i0' must be \(start, stop\) integers, start <= stop"),
        (dict(attr="d0", box={"i0": 3}), r"the range of 'i0' must be"),
        (dict(array="other", attr="d0"), "has no array 'other'; arrays: grid"),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(datasets, call, message):
    with loader.open(datasets["lmdb-capnp"]) as ds:
        with pytest.raises((UsageError, KeyError), match=message):
            ds.to_dask_array(**{"array": "grid", **call})
        for bad in (0, -1, 1.5, True, "1"):
            with pytest.raises(UsageError, match="partition_bytes must be a positive integer"):
                ds.to_dask_dataframe(partition_bytes=bad)


def test_documents_and_keep_arrays_are_refused(tmp_path):
    docs = f"lmdb://{tmp_path}/docs"
    loader.load("gen://docs?n=50", docs)
    with (
        loader.open(docs) as ds,
        pytest.raises(UsageError, match=r"to_dask_dataframe reads fixed-size records; .* holds documents"),
    ):
        ds.to_dask_dataframe()
    keep = f"lmdb://{tmp_path}/keep"
    loader.load("gen://scidb96?n=300", keep, shards=1)
    loader.load("gen://scidb96?n=300", keep, new_run=True)  # every cell twice
    loader.finalize(keep, dims=DIMS, duplicates="keep", workers=1)
    with (
        loader.open(keep) as ds,
        pytest.raises(UsageError, match=r"keeps duplicate cells .* read it with read_box or to_dask_dataframe"),
    ):
        ds.to_dask_array("grid", attr="d0")


def test_without_dask_reads_work_and_the_dask_methods_say_what_to_install(datasets):
    """dask is imported only by to_dask_*: with it missing, every other read works."""
    code = f"""
import sys
sys.modules["dask"] = None  # as if dask were not installed
import loader
from loader.errors import UsageError
with loader.open({datasets["rocksdb-arrow"]!r}) as ds:
    assert len(ds.read_records()) == 3000 and ds.to_arrow().num_rows == 3000
    assert ds.read_box("grid", i0=(0, 10)).num_rows == 3000 and ds.verify().ok
    for call in (ds.to_dask_dataframe, lambda: ds.to_dask_array("grid", attr="d0")):
        try:
            call()
        except UsageError as e:
            print(e)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 2, p.stdout
    assert (
        lines[0].startswith("to_dask_dataframe needs dask.dataframe (") and "pip install 'bulkload[dask]'" in lines[0]
    )
    assert lines[1].startswith("to_dask_array needs dask.array (") and lines[1].endswith("pip install 'bulkload[dask]'")
