"""In-memory Python data as a source (issue 13, item 1): numpy structured arrays, pandas
DataFrames, pyarrow Tables / RecordBatches / RecordBatchReaders, iterables of those or of
bytes. Byte-identical to the same records loaded from gen://scidb96; the layout inferred
from a dtype or checked against the one given; whole arrays never pickled to the workers;
bad data a one-line error naming the field / column / byte offset, with nothing committed."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib import recfunctions

import loader
from loader.bench.peers import installed
from loader.errors import ConversionError, GeneratorError, LayoutError, PartialRecordError, UsageError, WorkerError
from loader.model.layouts import TYPES, Field, Layout, dtype_mismatch, get_layout, layout_from_dtype
from loader.sources import shared
from loader.sources.generators import generate

SCIDB96 = get_layout("scidb96")
N = 30_000
RECORDS = generate("scidb96", 0, N)


def stored(uri) -> bytes:
    """Every record of a dataset (verified first), as bytes."""
    with loader.open(uri) as ds:
        assert ds.verify().ok
        n = ds.manifest.records
        return ds.read_records(0, n).tobytes() if n else b""


def runs_of(uri) -> list[dict]:
    with loader.open(uri) as ds:
        return [r.to_dict() for r in ds.manifest.runs if r.kind == "load"]


@pytest.fixture(params=["lmdb", "rocksdb", "mem"])
def dataset(request, tmp_path):
    """A fresh dataset URI of each backend (mem:// removed afterwards)."""
    if request.param != "mem":
        yield f"{request.param}://{tmp_path}/ds"
        return
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield f"mem://{name}"
    shutil.rmtree(f"/dev/shm/bulkload/{name}", ignore_errors=True)


@pytest.fixture(params=["process memory", "shared copy"])
def sharing(request, monkeypatch):
    """Both ways the workers read a whole array: from the coordinator's memory, or from the
    memfd copy used where the kernel does not allow that (forced here)."""
    copies = []
    if request.param == "shared copy":
        monkeypatch.setattr(shared.procmem, "workers_can_read", lambda: False)
        real = shared.SharedRecords.copy_in_background
        monkeypatch.setattr(
            shared.SharedRecords,
            "copy_in_background",
            lambda self, recs: (copies.append(recs.nbytes), real(self, recs)),
        )
    yield request.param
    if request.param == "shared copy":
        assert copies, "the shared copy was not used"


# --- whole numpy arrays ------------------------------------------------------------------------


@pytest.mark.parametrize("workers, shards, batch", [(1, 1, 10_000), (2, 3, 777), (3, 2, 1)])
def test_array_loads_what_gen_scidb96_loads(dataset, sharing, workers, shards, batch):
    n = N if batch > 1 else 1500
    rep = loader.load(RECORDS[:n], dataset, workers=workers, shards=shards, batch_records=batch)
    assert (rep.records, rep.layout, rep.source) == (n, "scidb96", f"python://numpy.ndarray?n={n}")
    assert stored(dataset) == generate("scidb96", 0, n).tobytes()


@pytest.mark.parametrize("fmt, compression", [("arrow", "none"), ("arrow", "zstd"), ("capnp", "none")])
def test_array_in_every_format(tmp_path, fmt, compression):
    ds = f"rocksdb://{tmp_path}/ds"
    loader.load(RECORDS, ds, format=fmt, compression=compression, batch_records=3000)
    assert stored(ds) == RECORDS.tobytes()


def test_array_and_gen_scidb96_append_to_one_dataset(tmp_path, sharing):
    ds = f"rocksdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=1000", ds)
    loader.load(generate("scidb96", 1000, 2000), ds)  # the same layout, inferred: appends
    assert stored(ds) == generate("scidb96", 0, 3000).tobytes()


@pytest.mark.parametrize(
    "make",
    [
        lambda: generate("scidb96", 0, 2 * N)[::2],  # strided: not C-contiguous
        lambda: generate("scidb96", 0, N).reshape(100, -1),  # 2-D: loaded in C order
        lambda: np.rec.array(generate("scidb96", 0, N)),  # a subclass
    ],
)
def test_arrays_of_other_shapes(tmp_path, make):
    arr = make()
    loader.load(arr, f"lmdb://{tmp_path}/ds", batch_records=999)
    assert stored(f"lmdb://{tmp_path}/ds") == np.ascontiguousarray(arr).reshape(-1).tobytes()


def test_a_custom_dtype_is_a_layout_of_its_own(dataset):
    dt = np.dtype([("x", "<i8"), ("y", "<f4"), ("z", "u1"), ("w", "<i2")])
    arr = np.zeros(5000, dt)
    arr["x"], arr["y"], arr["z"], arr["w"] = np.arange(5000) * -3, np.arange(5000) / 7, np.arange(5000), -1
    rep = loader.load(arr, dataset, batch_records=300, workers=2)
    assert rep.layout == "records"
    with loader.open(dataset) as ds:
        assert ds.layout.dtype == dt and [(f.name, f.type) for f in ds.layout.fields] == [
            ("x", "int64"),
            ("y", "float32"),
            ("z", "uint8"),
            ("w", "int16"),
        ]
    assert stored(dataset) == arr.tobytes()


def test_whole_arrays_are_not_pickled_to_workers(tmp_path, sharing):
    """A worker of an in-memory load holds no more memory than one of gen:// (a pickled
    96 MB array would add at least 96 MB to it)."""
    n = 1_000_000
    arr = generate("scidb96", 0, n)

    def worker_rss(source, name):
        rep = loader.load(source, f"lmdb://{tmp_path}/{name}", workers=1, shards=1)
        assert rep.records == n
        return rep.peak_rss_bytes - resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    from_gen = worker_rss(f"gen://scidb96?n={n}", "g")
    from_memory = worker_rss(arr, "m")
    assert from_memory < from_gen + arr.nbytes // 2, (from_memory, from_gen)
    assert stored(f"lmdb://{tmp_path}/m") == stored(f"lmdb://{tmp_path}/g")


def test_a_shared_copy_that_fails_stops_the_run_with_nothing_committed(tmp_path, monkeypatch):
    """Where the workers read a memfd copy, a copy that runs out of memory half-way fails the
    workers waiting for the rest (the header says so), and the run commits nothing."""
    import errno
    import os
    import types

    writes = []

    def pwrite(fd, data, offset):
        writes.append(offset)
        if len(writes) > 2:
            raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))
        return os.pwrite(fd, data, offset)

    monkeypatch.setattr(shared.procmem, "workers_can_read", lambda: False)
    monkeypatch.setattr(shared, "CHUNK", 96 * 1000)
    monkeypatch.setattr(shared, "os", types.SimpleNamespace(**{**vars(os), "pwrite": pwrite}))
    ds = f"lmdb://{tmp_path}/ds"
    loader.load(RECORDS[:100], ds)
    with pytest.raises(WorkerError) as e:
        loader.load(RECORDS, ds, batch_records=1000, workers=2, shards=2)
    assert "copying the records into shared memory failed" in str(e.value)
    assert stored(ds) == RECORDS[:100].tobytes() and runs_of(ds)[-1]["status"] == "failed"


def test_in_memory_sources_are_a_new_run_each_time(tmp_path):
    ds = f"lmdb://{tmp_path}/ds"
    first = loader.load(RECORDS[:100], ds)
    second = loader.load(RECORDS[:100], ds)  # not "already loaded": an object has no name
    assert first.status == second.status == "loaded" and first.run_id != second.run_id
    assert stored(ds) == RECORDS[:100].tobytes() * 2
    assert all(r["fingerprint"] is None and not r["resumable"] for r in runs_of(ds))


def test_replace_a_dataset_with_an_array(tmp_path, sharing):
    ds = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=5000", ds)
    rep = loader.load(RECORDS[100:300], ds, replace=True)
    assert rep.records == 200 and stored(ds) == RECORDS[100:300].tobytes()


def test_an_empty_array_loads_nothing(tmp_path):
    rep = loader.load(RECORDS[:0], f"lmdb://{tmp_path}/ds")
    assert rep.records == 0 and stored(f"lmdb://{tmp_path}/ds") == b""


# --- layouts: inferred from a dtype, or checked against the one given --------------------------

FIELD_NAMES = st.from_regex(r"[a-z][A-Za-z0-9]{0,5}", fullmatch=True)
FIELDS = st.lists(
    st.tuples(FIELD_NAMES, st.sampled_from(sorted(TYPES))), min_size=1, max_size=8, unique_by=lambda f: f[0]
)


@settings(max_examples=300, deadline=None)
@given(FIELDS)
def test_dtype_layout_round_trip(fields):
    layout = Layout("x", tuple(Field(n, t) for n, t in fields))
    assert layout_from_dtype(layout.dtype, "x") == layout
    assert dtype_mismatch(layout.dtype, layout) is None
    packed = np.dtype([(n, TYPES[t][0]) for n, t in fields])
    assert layout_from_dtype(packed, "x").dtype == packed


@settings(max_examples=300, deadline=None)
@given(FIELDS)
def test_aligned_dtypes_load_only_without_holes(fields):
    """Decision: a layout is packed, so an aligned dtype is its layout when alignment left no
    hole, and is refused, naming the first field it moved (or the trailing padding) and
    how to repack it, when it did."""
    layout = Layout("x", tuple(Field(n, t) for n, t in fields))
    aligned = np.dtype([(n, TYPES[t][0]) for n, t in fields], align=True)
    moved = [n for n in aligned.names if aligned.fields[n][1] != layout.dtype.fields[n][1]]
    if not moved and aligned.itemsize == layout.record_size:
        assert layout_from_dtype(aligned, "x") == layout
        return
    with pytest.raises(LayoutError) as e:
        layout_from_dtype(aligned, "x")
    assert (f"field {moved[0]!r}" if moved else "trailing padding") in str(e.value)
    assert "repack_fields" in str(e.value)
    assert f"field {moved[0]!r}" in dtype_mismatch(aligned, layout) if moved else True
    repacked = recfunctions.repack_fields(np.zeros(2, aligned)).dtype
    assert layout_from_dtype(repacked, "x") == layout


WRONG_DTYPES = {
    "renamed": (
        [(f"d{k}", "<f8") for k in range(9)] + [("e9", "<f8")] + [(f"i{k}", "<i4") for k in range(4)],
        "field 9 is 'e9', the layout's is 'd9'",
    ),
    "other type": (
        [(f"d{k}", "<f8") for k in range(10)] + [("i0", "<i8")] + [(f"i{k}", "<i4") for k in range(1, 4)],
        "field 'i0' is int64 (<i8), the layout's is int32 (<i4)",
    ),
    "big-endian": (
        [("d0", ">f8")] + [(f"d{k}", "<f8") for k in range(1, 10)] + [(f"i{k}", "<i4") for k in range(4)],
        "field 'd0' is >f8, the layout's is float64 (<f8)",
    ),
    "missing": (
        [(f"d{k}", "<f8") for k in range(10)] + [(f"i{k}", "<i4") for k in range(3)],
        "field 'i3' (int32 (<i4)) is missing",
    ),
    "extra": (
        [(f"d{k}", "<f8") for k in range(10)] + [(f"i{k}", "<i4") for k in range(5)],
        "field 'i4' is not in the layout",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG_DTYPES))
def test_layout_given_names_the_first_field_that_differs(tmp_path, case):
    fields, says = WRONG_DTYPES[case]
    arr = np.zeros(10, np.dtype(fields))
    with pytest.raises(LayoutError) as e:
        loader.load(arr, f"lmdb://{tmp_path}/ds", layout="scidb96")
    assert str(e.value) == f"python://numpy.ndarray?n=10 does not hold records of layout 'scidb96': {says}"
    assert not (tmp_path / "ds" / "manifest.json").exists()


def test_offsets_and_padding_are_checked_too(tmp_path):
    padded = np.dtype(
        {
            "names": SCIDB96.names,
            "formats": [SCIDB96.dtype.fields[n][0] for n in SCIDB96.names],
            "offsets": [SCIDB96.dtype.fields[n][1] for n in SCIDB96.names],
            "itemsize": 104,
        }
    )
    with pytest.raises(LayoutError, match=r"records are 104 bytes, the layout's 96 \(trailing padding\)"):
        loader.load(np.zeros(3, padded), f"lmdb://{tmp_path}/a", layout="scidb96")
    moved = np.dtype([("a", "u1"), ("b", "<f8")], align=True)
    with pytest.raises(LayoutError, match=r"field 'b' is at byte offset 8, but layouts are packed"):
        loader.load(np.zeros(3, moved), f"lmdb://{tmp_path}/b")
    with pytest.raises(LayoutError, match=r"dtype float64 has no named fields"):
        loader.load(np.zeros(3), f"lmdb://{tmp_path}/c")


def test_the_datasets_layout_is_the_check_when_none_is_given(tmp_path):
    ds = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=500", ds)
    with pytest.raises(LayoutError, match="field 0 is 'x', the layout's is 'd0'"):
        loader.load(np.zeros(10, [("x", "<f8")]), ds)
    assert stored(ds) == generate("scidb96", 0, 500).tobytes() and len(runs_of(ds)) == 1


# --- DataFrames and Arrow tables ----------------------------------------------------------------


def frame(n=N, start=0):
    return pd.DataFrame(generate("scidb96", start, n))


@pytest.mark.parametrize(
    "make, layout",
    [
        (lambda: frame(), None),
        (lambda: frame()[list(reversed(SCIDB96.names))], "scidb96"),  # another column order: matched by name
        (lambda: pa.Table.from_pandas(frame(), preserve_index=False), None),
        (
            lambda: pa.concat_tables(
                [pa.Table.from_pandas(frame(N // 3, k * (N // 3)), preserve_index=False) for k in range(3)]
            ),
            None,
        ),  # several chunks
        (lambda: pa.RecordBatch.from_pandas(frame(), preserve_index=False), None),
    ],
)
def test_tables_load_what_gen_scidb96_loads(dataset, sharing, make, layout):
    rep = loader.load(make(), dataset, workers=2, batch_records=4096, layout=layout)
    assert rep.records == N and rep.layout == "scidb96"
    assert stored(dataset) == RECORDS.tobytes()


def test_columns_are_converted_when_no_value_changes(tmp_path):
    df = frame(1000)
    df["i0"] = df["i0"].astype("int16")  # widens
    df["i1"] = df["i1"].astype("float64")  # whole numbers
    df["d3"] = df["d3"].astype("float32").astype("float64")  # already exact
    df["i2"] = df["i2"].astype("Int64")  # a nullable column without nulls
    loader.load(df, f"lmdb://{tmp_path}/ds", layout="scidb96")
    with loader.open(f"lmdb://{tmp_path}/ds") as ds:
        got = ds.read_records(0, 1000)
    want = generate("scidb96", 0, 1000)
    want["d3"] = want["d3"].astype("float32")
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize(
    "column, values, says",
    [
        ("i1", [2**40], "column 'i1', row 7: 1099511627776 cannot be held exactly by int32"),
        ("i0", [0.5], "column 'i0', row 7: 0.5 cannot be held exactly by int32"),
        ("i3", [float("nan")], "column 'i3', row 7: nan cannot be held exactly by int32"),
        ("i2", [-(2**31) - 1], "column 'i2', row 7: -2147483649 cannot be held exactly by int32"),
    ],
)
def test_a_lossy_column_names_column_and_row(tmp_path, column, values, says):
    ds = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100", ds)
    df = frame(20)
    df[column] = df[column].astype("float64" if isinstance(values[0], float) else "int64")
    df.loc[7, column] = values[0]
    with pytest.raises(ConversionError) as e:
        loader.load(df, ds)
    assert says in str(e.value) and str(e.value).startswith("python://pandas.DataFrame?n=20: ")
    assert stored(ds) == generate("scidb96", 0, 100).tobytes() and len(runs_of(ds)) == 1


def test_float64_that_float32_rounds_is_lossy(tmp_path):
    lay = tmp_path / "f32.toml"
    lay.write_text('name = "f32"\n[fields]\nx = "float32"\n')
    with pytest.raises(ConversionError, match=r"column 'x', row 1: 0.1 cannot be held exactly by float32"):
        loader.load(pd.DataFrame({"x": [0.5, 0.1]}), f"lmdb://{tmp_path}/ds", layout=str(lay))
    rep = loader.load(pd.DataFrame({"x": [0.5, 0.25]}), f"lmdb://{tmp_path}/ds", layout=str(lay))
    assert rep.records == 2


@pytest.mark.parametrize(
    "make, what",
    [
        (
            lambda df: df.astype({"i2": "Int64"}).assign(i2=lambda d: d["i2"].mask(d.index == 3)),
            "python://pandas.DataFrame?n=10: column 'i2', row 3: null, but field 'i2' is not nullable",
        ),
        (
            lambda df: pa.Table.from_pandas(df, preserve_index=False).set_column(
                12, "i2", pa.array([None, *list(range(9))], pa.int32())
            ),
            "python://pyarrow.Table?n=10: column 'i2', row 0: null, but field 'i2' is not nullable",
        ),
    ],
)
def test_nulls_name_the_column(tmp_path, make, what):
    with pytest.raises(ConversionError) as e:
        loader.load(make(frame(10)), f"lmdb://{tmp_path}/ds", layout="scidb96")
    assert str(e.value).startswith(what) and "fill or drop the nulls" in str(e.value)


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda df: df.drop(columns=["d4"]), "has no column 'd4'"),
        (lambda df: df.assign(extra=1), "column 'extra' is not a field of layout 'scidb96'"),
        (lambda df: df.assign(d4="text"), "column 'd4' is (large_)?string, which cannot become field 'd4' "),
    ],
)
def test_missing_extra_and_non_number_columns(tmp_path, change, says):
    with pytest.raises(LayoutError, match=says):
        loader.load(change(frame(10)), f"lmdb://{tmp_path}/ds", layout="scidb96")


def test_a_tables_layout_is_inferred_from_its_columns(tmp_path):
    table = pa.table({"a": pa.array([1, 2, 3], pa.int16()), "b": pa.array([0.5, 1.5, 2.5], pa.float32())})
    rep = loader.load(table, f"lmdb://{tmp_path}/ds")
    with loader.open(f"lmdb://{tmp_path}/ds") as ds:
        assert rep.layout == "records" and [(f.name, f.type) for f in ds.layout.fields] == [
            ("a", "int16"),
            ("b", "float32"),
        ]
    with pytest.raises(LayoutError, match=r"column 's' has Arrow type date32\[day\], which no layout type holds"):
        loader.load(pa.table({"s": pa.array([1], pa.date32())}), f"lmdb://{tmp_path}/other")


# --- iterables: streams ------------------------------------------------------------------------


def blocks(sizes, make=lambda a: a):
    start = 0
    for k in sizes:
        yield make(generate("scidb96", start, k))
        start += k


@pytest.mark.parametrize(
    "make",
    [
        lambda: blocks([7000, 0, 1, 12999, 10000]),  # arrays, an empty one among them
        lambda: blocks([10000, 20000], lambda a: pd.DataFrame(a)),
        lambda: blocks([15000, 15000], lambda a: pa.RecordBatch.from_pandas(pd.DataFrame(a))),
        lambda: pa.Table.from_pandas(frame(), preserve_index=False).to_reader(max_chunksize=4444),
        lambda: [
            RECORDS.tobytes()[:1000],
            memoryview(RECORDS.tobytes()[1000:2_000_001]),
            bytearray(RECORDS.tobytes()[2_000_001:]),
        ],  # bytes cut across records
        lambda: RECORDS.tobytes(),  # one bytes object: one block
    ],
)
def test_iterables_load_what_gen_scidb96_loads(dataset, make):
    rep = loader.load(make(), dataset, workers=2, shards=3, batch_records=2500)
    assert rep.records == N and rep.layout == "scidb96"
    assert stored(dataset) == RECORDS.tobytes()


def test_an_empty_iterable_loads_zero_records(tmp_path):
    rep = loader.load(iter([]), f"lmdb://{tmp_path}/ds")
    assert rep.records == 0 and rep.status == "loaded"


def test_a_partial_trailing_record_names_the_byte_offset(tmp_path):
    ds = f"lmdb://{tmp_path}/ds"
    loader.load(RECORDS[:10], ds)
    with pytest.raises(PartialRecordError) as e:
        loader.load([RECORDS[10:20010].tobytes(), b"\0" * 50], ds, batch_records=1000)
    assert str(e.value).startswith("python://list: partial record at byte offset 1920000 (50 trailing bytes")
    assert "yield whole records" in str(e.value)
    assert stored(ds) == RECORDS[:10].tobytes()


def test_a_generator_that_raises_names_where_and_commits_nothing(tmp_path):
    def gen():
        yield RECORDS[:5000]
        yield RECORDS[5000:8000]
        raise RuntimeError("sensor went away")

    ds = f"rocksdb://{tmp_path}/ds"
    loader.load(RECORDS[:10], ds)
    with pytest.raises(GeneratorError) as e:
        loader.load(gen(), ds, batch_records=1000)
    assert str(e.value) == (
        "python://generator raised RuntimeError: sensor went away at block 2, after 8,000 "
        "records; nothing from this run was committed"
    )
    assert stored(ds) == RECORDS[:10].tobytes()


@pytest.mark.parametrize(
    "bad, error, says",
    [
        (np.zeros(3, [("x", "<f8")]), LayoutError, "block 1 does not hold records of layout 'scidb96': field 0"),
        (42, GeneratorError, "block 1 is of type int"),
    ],
)
def test_a_bad_block_is_named(tmp_path, bad, error, says):
    with pytest.raises(error, match=says):
        loader.load(iter([RECORDS[:10], bad]), f"lmdb://{tmp_path}/ds")


def test_something_that_is_no_source(tmp_path):
    with pytest.raises(UsageError, match="cannot load an object of type int"):
        loader.load(42, f"lmdb://{tmp_path}/ds")


# --- the benchmark -------------------------------------------------------------------------------


def test_memory_benchmark_at_tiny_n(tmp_path):
    """bench/memory.py runs its rows interleaved and writes its figures and ratios (only at a
    tiny N here: the lead runs it big)."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "memory.py"
    out = tmp_path / "memory.json"
    r = subprocess.run(
        [
            sys.executable,
            str(bench),
            "--n",
            "20000",
            "--repeat",
            "1",
            "--workers",
            "2",
            "--shards",
            "2",
            "--dir",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    figures = result["figures"]
    assert set(figures) == {"memory", "gen", "arcticdb"} and result["records"] == 20000
    assert figures["memory"]["mb_s_median"] > 0 and figures["gen"]["mb_s_median"] > 0
    assert ("skipped" in figures["arcticdb"]) == (not (installed("arcticdb") and installed("pandas")))
    assert result["ratios"]["memory/gen"] > 0 and "memory/gen" in r.stdout
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())
