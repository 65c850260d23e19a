"""The files people have: .npy, Arrow IPC (file, stream, Feather v2) and Parquet as SOURCE.

- Loaded byte-identical to the raw-file load of the same records (batch rows, checksums
  and records), however the file is cut (record batches, row groups) and however the
  run splits it (workers, shards, batch size), on lmdb, rocksdb and mem://.
- The layout comes from the file: dtype <-> layout is a round trip (hypothesis); any byte
  order, padding or type that widens without loss is converted field by field; a file
  of scidb96's fields is a scidb96 file (a dataset of it takes gen://scidb96 too).
- Identity as for a raw file: a re-run is "already loaded", a changed file is refused,
  --new-run loads it again, an interrupted run resumes.
- Every way such a file can be wrong is one line and exit 1 (bad data: nulls, truncated,
  not the format its name says) or 2 (not records: unsupported type or column, no such
  field in the dataset's layout, a lossy type), naming the file, the column / field and
  where, with the dataset unchanged.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from helpers import run_cli, tool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loader
from loader.errors import LayoutError
from loader.model.layouts import TYPES, Field, Layout, layout_of_fields
from loader.sources import parse_sources

from .source_helpers import LAY, cli, error_line, records, snapshot

FORMATS = ("npy", "arrow", "feather", "arrows", "parquet")


def table_of(arr: np.ndarray) -> pa.Table:
    return pa.table({name: arr[name].astype(arr.dtype[name].newbyteorder("=")) for name in arr.dtype.names})


def write_as(fmt: str, path, arr: np.ndarray, piece: int = 1000) -> str:
    """``arr`` written as ``fmt`` with ``piece`` rows per record batch / row group."""
    path = str(path)
    if fmt == "npy":
        np.save(path, arr, allow_pickle=False)
        return path
    table = arr if isinstance(arr, pa.Table) else table_of(arr)
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=piece)
    elif fmt == "feather":
        feather.write_feather(table, path, chunksize=piece, compression="uncompressed")
    else:
        new = pa.ipc.new_file if fmt == "arrow" else pa.ipc.new_stream
        with new(path, table.schema) as w:
            w.write_table(table, max_chunksize=piece)
    return path


# --- byte-identical to the raw file -----------------------------------------------------------


#: (records, rows per record batch / row group, workers, shards, batch size): one per store, per format
SPLITS = [(2345, 700, 2, 3, 500), (1000, 1000, 1, 1, 1000), (3001, 4096, 2, 2, 333)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_file_with_a_schema_loads_like_the_raw_file(tmp_path, store_uri, fmt):
    i = (FORMATS.index(fmt) + ["lmdb", "rocksdb", "mem"].index(store_uri.split(":")[0])) % len(SPLITS)
    n, piece, workers, shards, batch = SPLITS[i]
    arr = records(17, n)
    raw = tmp_path / "recs.bin"
    raw.write_bytes(arr.tobytes())
    src = write_as(fmt, tmp_path / f"recs.{fmt}", arr, piece)
    opts = dict(workers=workers, shards=shards, batch_records=batch)
    ref = f"lmdb://{tmp_path}/ref"
    loader.load(str(raw), ref, **opts)
    rep = loader.load(src, store_uri, **opts)
    assert rep.records == n and rep.layout == "scidb96" and rep.status == "loaded"
    assert snapshot(store_uri) == snapshot(ref)


@pytest.mark.parametrize("fmt", ("arrow", "parquet"))
def test_compressed_and_uneven_pieces_and_empty_ones(tmp_path, fmt):
    """Record batches / row groups of every size (empty ones too), zstd-compressed."""
    arr = records(0, 1700)
    cuts = [0, 0, 1, 300, 300, 999, 1700]
    table = table_of(arr)
    path = str(tmp_path / f"x.{fmt}")
    if fmt == "parquet":
        with pq.ParquetWriter(path, table.schema, compression="zstd") as w:
            for a, b in itertools.pairwise(cuts):
                w.write_table(table.slice(a, b - a))
    else:
        opts = pa.ipc.IpcWriteOptions(compression="zstd")
        with pa.ipc.new_file(path, table.schema, options=opts) as w:
            for a, b in itertools.pairwise(cuts):
                w.write_batch(
                    table.slice(a, b - a).combine_chunks().to_batches()[0]
                    if b > a
                    else pa.RecordBatch.from_pylist([], schema=table.schema)
                )
    uri = f"rocksdb://{tmp_path}/ds"
    loader.load(path, uri, workers=2, shards=2, batch_records=256)
    assert snapshot(uri)[1] == arr.tobytes()


def test_source_fill_is_split_invariant(tmp_path):
    """Any record range of any format, read where its pieces fall, is that slice of the records."""
    arr = records(5, 1234)
    sources = [parse_sources(write_as(f, tmp_path / f"s.{f}", arr, 97)) for f in FORMATS]

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.integers(0, 1234), st.integers(0, 1234))
    def check(a, b):
        lo, hi = min(a, b), max(a, b)
        for source in sources:
            out = np.empty(hi - lo, LAY.dtype)
            source.fill(out, lo)
            assert out.tobytes() == arr[lo:hi].tobytes(), source.uri

    check()


# --- the layout from the file -----------------------------------------------------------------

TYPE_NAMES = sorted(TYPES)
FIELD_NAME = st.from_regex(r"[a-z][A-Za-z0-9]{0,6}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(FIELD_NAME, st.sampled_from(TYPE_NAMES), st.sampled_from("<>=")),
        min_size=1,
        max_size=8,
        unique_by=lambda f: f[0],
    ),
    st.booleans(),
)
def test_dtype_and_layout_round_trip(fields, aligned):
    """Any structured dtype of layout types (any byte order, packed or aligned) gives the
    layout of its fields; a layout's own dtype gives the layout back."""
    dtype = np.dtype([(n, np.dtype(TYPES[t][0]).newbyteorder(o)) for n, t, o in fields], align=aligned)
    layout = layout_of_fields(dtype, "x")
    assert layout.fields == tuple(Field(n, t) for n, t, _ in fields)
    assert layout_of_fields(layout.dtype, "x") == layout
    assert layout.dtype.itemsize == sum(TYPES[t][1] for _, t, _ in fields)


@pytest.mark.parametrize(
    "dtype,field",
    [
        ([("a", "<i4"), ("b", "<M8[D]")], "'b' has type datetime64[D]"),
        ([("a", "<i4", (3, 2))], "'a' has type ('<i4', (3, 2))"),
        ([("t", "<M8[5s]")], "'t' has type datetime64[5s]"),
        ([("s", "U4")], "'s' has type <U4"),
        ([("o", "O")], "'o' has type object"),
        ([("c", "<c16")], "'c'"),
    ],
)
def test_dtypes_that_are_not_layouts_name_the_field(dtype, field):
    with pytest.raises(LayoutError, match="no layout type holds") as e:
        layout_of_fields(np.dtype(dtype), "x")
    assert field in str(e.value)
    with pytest.raises(LayoutError, match="is not a record type"):
        layout_of_fields(np.dtype("<f8"), "x")


@pytest.mark.parametrize("fmt", ("npy", "parquet"))
def test_other_byte_orders_padding_and_wider_types_are_converted(tmp_path, fmt):
    """Big-endian, aligned (padded), int32 stored as int64 and float32 as float64 under
    --layout of a wider type: the records are the values converted field by field."""
    n = 1500
    rng = np.random.default_rng(3)
    dtype = np.dtype([("a", ">i4"), ("b", "<f4"), ("c", ">u2"), ("d", "<f8")], align=True)
    arr = np.zeros(n, dtype)
    for name in dtype.names:
        arr[name] = rng.integers(0, 30000, n)
    (tmp_path / "wide.toml").write_text(
        'name = "wide"\n[fields]\nd = "float64"\na = "int64"\nb = "float64"\nc = "uint32"\n'
    )
    src = write_as(fmt, tmp_path / f"x.{fmt}", arr, 400)
    uri = f"lmdb://{tmp_path}/own"
    loader.load(src, uri, batch_records=333, workers=2, shards=2)
    with loader.open(uri) as ds:
        assert ds.manifest.layout["fields"] == [["a", "int32"], ["b", "float32"], ["c", "uint16"], ["d", "float64"]]
        got = ds.read_records()
        assert ds.manifest.layout["name"] == "x"
    for name in dtype.names:
        assert np.array_equal(got[name], arr[name])
    wide = f"lmdb://{tmp_path}/wide"
    loader.load(src, wide, layout=str(tmp_path / "wide.toml"), batch_records=333)
    with loader.open(wide) as ds:
        got = ds.read_records()
        assert got.dtype.names == ("d", "a", "b", "c")
    for name in dtype.names:
        assert np.array_equal(got[name], arr[name].astype(got.dtype[name]))


def test_a_file_of_scidb96_fields_joins_scidb96_datasets_and_extra_columns_are_left(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(write_as("parquet", tmp_path / "a.parquet", records(0, 600)), uri, batch_records=256)
    loader.load("gen://scidb96?n=400&start=600", uri)
    wider = table_of(records(1000, 300)).append_column("note", pa.array(["x"] * 300))
    wider = wider.append_column("extra", pa.array([None] * 299 + [1.5]))
    loader.load(write_as("arrow", tmp_path / "more.arrow", wider), uri)  # the dataset's layout: the other
    assert snapshot(uri)[1] == records(0, 1300).tobytes()  # columns are neither loaded nor checked


# --- identity: already loaded, changed, resumed ------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_rerun_is_already_loaded_a_changed_file_is_refused_new_run_loads_it_again(tmp_path, fmt):
    uri = f"lmdb://{tmp_path}/ds"
    src = write_as(fmt, tmp_path / f"x.{fmt}", records(0, 900), 250)
    assert loader.load(src, uri, batch_records=200).records == 900
    again = run_cli("load", src, uri, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "already-loaded"
    before = snapshot(uri)
    write_as(fmt, src, records(5000, 900), 250)  # same size, other records
    error_line(run_cli("load", src, uri), 1, f"{src} changed since run", "--new-run")
    assert snapshot(uri) == before
    assert loader.load(src, uri, new_run=True).records == 900
    assert snapshot(uri)[1] == records(0, 900).tobytes() + records(5000, 900).tobytes()


@pytest.mark.parametrize("fmt", ("npy", "parquet", "arrow"))
def test_a_crashed_load_of_a_file_resumes_to_the_same_dataset(tmp_path, fmt):
    src = write_as(fmt, tmp_path / f"x.{fmt}", records(0, 6000), 700)
    uri, ref = f"lmdb://{tmp_path}/ds", f"lmdb://{tmp_path}/ref"
    loader.load(src, ref, batch_records=100, shards=2, workers=2)
    env = dict(os.environ, BULKLOAD_FAULT="checkpoint:5", BULKLOAD_CHECKPOINT_SECONDS="0")
    p = subprocess.run(
        [tool("bulkload"), "load", src, uri, "--batch-records", "100", "--shards", "2", "-q"],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == -9
    p = run_cli("load", src, uri, "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["status"] == "resumed" and rep["resumed_records"] > 0
    assert snapshot(uri) == snapshot(ref)


# --- what is wrong with a file: one line, the exit code, nothing written -----------------------------


def bad_files(tmp_path) -> list[tuple]:
    """(path, exit code, texts of the message) of every kind of bad file."""
    out = []

    def add(name, data, code, *texts):
        p = tmp_path / name
        if callable(data):
            data(str(p))
        else:
            p.write_bytes(data)
        out.append((str(p), code, texts))

    good = records(0, 50)
    add(
        "huge.parquet",
        lambda p: pq.write_table(pa.table({"a": [1, 2], "name": ["x", "y" * 5000]}), p),
        2,
        "column 'name' holds a value of 5,000 bytes; a field holds at most 4,096",
    )
    add(
        "days.arrow",
        lambda p: write_as("arrow", p, pa.table({"a": [1, 2], "d": pa.array([1, 2], pa.date32())})),
        2,
        "column 'd' has type date32[day]",
        "no layout type holds",
    )
    add(
        "when.feather",
        lambda p: feather.write_feather(pa.table({"t": pa.array([1, 2], pa.time32("s"))}), p),
        2,
        "column 't' has type time32[s]",
    )
    add("days.npy", lambda p: np.save(p, np.zeros(3, [("h", "<M8[D]")])), 2, "field 'h' has type datetime64[D]")
    add("snake.npy", lambda p: np.save(p, np.zeros(3, [("a_b", "<i4")])), 2, "field name 'a_b' is not allowed")
    add("plain.npy", lambda p: np.save(p, np.zeros(3)), 2, "float64 is not a record type")
    add("square.npy", lambda p: np.save(p, np.zeros((3, 2), LAY.dtype)), 2, "shape (3, 2)", "one-dimensional")
    add("objects.npy", lambda p: np.save(p, np.zeros(3, [("o", "O")]), allow_pickle=True), 2, "'o' has type object")
    npy = tmp_path / "whole.npy"
    np.save(npy, good)
    data = npy.read_bytes()
    header = len(data) - good.nbytes
    add(
        "cut.npy",
        data[: header + 96 * 20 + 7],
        1,
        f"from byte offset {header}",
        f"ends at byte offset {header + 96 * 20 + 7}",
        "record 20 is the first missing",
    )
    add(
        "cut.parquet",
        Path(write_as("parquet", tmp_path / "p.parquet", good)).read_bytes()[:-30],
        1,
        "is not a valid Parquet file",
    )
    add(
        "cut.arrow",
        Path(write_as("arrow", tmp_path / "a.arrow", good)).read_bytes()[:-30],
        1,
        "is not a valid Arrow IPC file",
    )
    add("raw.parquet", good.tobytes(), 1, "is not a valid Parquet file")
    add("raw.npy", good.tobytes(), 1, "is not a valid .npy file")
    add("old.feather", b"FEA1" + bytes(200), 1, "Feather version 1")
    for suffix, what in [
        (".csv", "CSV text"),
        (".json", "JSON"),
        (".npz", "a NumPy .npz archive"),
        (".gz", "gzip-compressed"),
        (".zst", "zstd-compressed"),
        (".h5", "HDF5"),
    ]:
        add("x" + suffix, good.tobytes(), 2, f"is {what}, not records")
    for i, (magic, what) in enumerate(
        [(b"\x28\xb5\x2f\xfd", "zstd-compressed"), (b"PK\x03\x04", "a zip archive"), (b"\x89HDF\r\n\x1a\n", "HDF5")]
    ):
        add(f"magic{i}.bin", magic + good.tobytes()[len(magic) :], 2, f"is {what} (by its content)")
    return out


def test_every_bad_file_is_one_line_with_its_exit_code_and_nothing_is_written(tmp_path):
    """Into a new dataset (the file's layout is inferred: the message names what is
    wrong), and into a scidb96 one (refused too: nothing of it changes). In this process
    (every one is found before a worker starts); through the real binary: the tests below."""
    uri, new = f"lmdb://{tmp_path}/ds", f"lmdb://{tmp_path}/new"
    loader.load("gen://scidb96?n=500", uri)
    before = snapshot(uri)
    for path, code, texts in bad_files(tmp_path):
        line = error_line(cli("load", path, new), code, *texts)
        assert os.path.basename(path) in line
        assert not os.path.exists(tmp_path / "new")
        p = cli("load", path, uri)
        assert p.returncode in (1, 2) and os.path.basename(path) in error_line(p, p.returncode)
        assert snapshot(uri) == before, path
    assert len(loader.open(uri).info()["runs"]) == 1


@pytest.mark.parametrize("fmt,where", [("parquet", "row group 0"), ("arrow", "record batch 0")])
def test_nulls_into_a_field_that_is_not_nullable_are_refused_and_a_new_dataset_makes_it_nullable(tmp_path, fmt, where):
    nulls = pa.table({"a": pa.array([1, None, 3], pa.int32()), "b": [1.0, 2.0, 3.0]})
    path = str(tmp_path / f"nulls.{fmt}")
    pq.write_table(nulls, path, row_group_size=2) if fmt == "parquet" else write_as("arrow", path, nulls, 2)
    lay = tmp_path / "ab.toml"
    lay.write_text('name = "ab"\n[fields]\na = "int32"\nb = "float64"\n')
    error_line(
        run_cli("load", path, f"lmdb://{tmp_path}/strict", "--layout", lay),
        1,
        f"column 'a' holds 1 null(s) in {where}, but its field is not nullable",
        "declare the field nullable",
    )
    assert not os.path.exists(tmp_path / "strict")
    assert run_cli("load", path, f"lmdb://{tmp_path}/own").returncode == 0
    with loader.open(f"lmdb://{tmp_path}/own") as ds:
        assert ds.layout.field("a").nullable and not ds.layout.field("b").nullable
        assert ds.to_arrow().column("a").to_pylist() == [1, None, 3]


def test_nulls_found_only_when_a_row_group_is_decoded_commit_nothing(tmp_path):
    """A Parquet file written without statistics: its nulls are found by the worker."""
    arr = records(0, 3000)
    table = table_of(arr)
    d1 = pa.array(np.where(np.arange(3000) == 2222, np.nan, arr["d1"]), from_pandas=True)
    table = table.set_column(1, "d1", d1)
    path = str(tmp_path / "late.parquet")
    pq.write_table(table, path, row_group_size=1000, write_statistics=False)
    uri = f"rocksdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100", uri)
    before = snapshot(uri)
    error_line(
        run_cli("load", path, uri, "--batch-records", 250, "-q"), 1, "column 'd1' holds 1 null(s) in row group 2"
    )
    assert snapshot(uri) == before


def test_a_file_without_a_field_of_the_dataset_or_with_a_value_its_type_loses_is_refused(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100", uri)
    before = snapshot(uri)
    arr = records(0, 10)
    short = table_of(arr).drop_columns(["i3"])
    pq.write_table(short, tmp_path / "short.parquet")
    error_line(run_cli("load", tmp_path / "short.parquet", uri), 2, "has no field 'i3' of layout 'scidb96'")
    wide = arr["i0"].astype(np.int64)
    wide[7] = 2**40
    pq.write_table(table_of(arr).set_column(10, "i0", pa.array(wide)), tmp_path / "lossy.parquet")
    error_line(
        run_cli("load", tmp_path / "lossy.parquet", uri),
        1,
        "lossy.parquet: column 'i0', row 7: 1099511627776 cannot be held exactly by int32",
    )
    np.save(tmp_path / "other.npy", np.zeros(4, [("x", "<i4")]))
    error_line(run_cli("load", tmp_path / "other.npy", uri), 2, "has no field 'd0'")
    error_line(
        run_cli("load", tmp_path / "other.npy", f"lmdb://{tmp_path}/new", "--layout", "scidb96"), 2, "has no field 'd0'"
    )
    assert snapshot(uri) == before and not os.path.exists(tmp_path / "new" / "manifest.json")


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_empty_file_loads_zero_records(tmp_path, fmt):
    uri = f"lmdb://{tmp_path}/ds"
    rep = loader.load(write_as(fmt, tmp_path / f"e.{fmt}", records(0, 0)), uri)
    assert rep.records == 0 and rep.status == "loaded"
    assert loader.load(write_as(fmt, tmp_path / f"f.{fmt}", records(0, 7)), uri).records == 7


def test_raw_and_generated_loads_do_not_import_pyarrow(tmp_path):
    """pyarrow is heavy: only a load of an Arrow or Parquet file (or an Arrow dataset) imports it."""
    (tmp_path / "r.bin").write_bytes(records(0, 10).tobytes())
    code = (
        f"import sys, loader; loader.load({str(tmp_path / 'r.bin')!r}, 'lmdb://{tmp_path}/a'); "
        f"loader.load('gen://scidb96?n=5', 'lmdb://{tmp_path}/b'); print('pyarrow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_a_layout_from_a_file_is_a_valid_layout(tmp_path):
    arr = np.zeros(3, [("x", "<u8"), ("yy", "<i1")])
    source = parse_sources(write_as("npy", tmp_path / "pts.npy", arr))
    layout = source.records_layout(None, None)
    assert layout == Layout("pts", (Field("x", "uint64"), Field("yy", "int8")))
    assert layout.dtype.itemsize == 9


def test_the_files_benchmark_runs_at_a_tiny_n(tmp_path):
    """bench/files.py end to end at N = 20,000 (the lead runs it at 20M): every path, its ratios."""
    out = tmp_path / "files.json"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run(
        [
            sys.executable,
            os.path.join(root, "bench", "files.py"),
            "--n",
            "20000",
            "--repeats",
            "1",
            "--dir",
            str(tmp_path),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    result = json.loads(out.read_text())
    assert set(result["paths"]) == {"raw", "npy", "arrow", "fifo-1", "fifo-2"}
    assert set(result["ratios"]) == {"npy/raw", "arrow/raw", "fifo-2/fifo-1"}
    assert all(r["mb_s_median"] > 0 for r in result["paths"].values())
    assert "npy / raw file" in p.stdout and "2 FIFOs / 1 FIFO" in p.stdout
    assert [d for d in os.listdir(tmp_path) if d.startswith("bench-files-")] == []  # nothing left behind


@pytest.mark.parametrize("fmt", ("arrow", "arrows", "feather", "npy"))
def test_a_worker_reads_an_uncompressed_arrow_file_or_an_npy_without_pyarrow(tmp_path, fmt):
    """What a worker receives (the pickled source) fills records from the file's bytes at
    the offsets planned: no pyarrow import (a fifth of a second per worker)."""
    import pickle

    arr = records(0, 3000)
    source = parse_sources(write_as(fmt, tmp_path / f"x.{fmt}", arr, 700))
    (tmp_path / "source.pickle").write_bytes(pickle.dumps(source))
    code = (
        "import pickle, sys, numpy as np; from loader.model.layouts import get_layout; "
        f"s = pickle.loads(open({str(tmp_path / 'source.pickle')!r}, 'rb').read()); "
        "out = np.empty(1500, get_layout('scidb96').dtype); s.fill(out, 1234); "
        "sys.stdout.buffer.write(out.tobytes()); sys.stderr.write(str('pyarrow' in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert p.stdout == arr[1234:2734].tobytes() and p.stderr == b"False", p.stderr


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_files_of_every_format_version_load(tmp_path, version):
    arr = records(0, 50)
    path = tmp_path / "v.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, arr, version=version)
    uri = f"lmdb://{tmp_path}/ds"
    p = run_cli("load", path, uri, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["layout"] == "scidb96", p.stderr
    assert snapshot(uri)[1] == arr.tobytes()
    data = path.read_bytes()
    for cut in (12, len(data) - arr.nbytes - 3):  # in the header's length, in the header
        (tmp_path / "cut.npy").write_bytes(data[:cut])
        error_line(run_cli("load", tmp_path / "cut.npy", f"lmdb://{tmp_path}/new"), 1, "is not a valid .npy file")
        assert not os.path.exists(tmp_path / "new")


def test_dictionary_encoded_number_columns_load_as_their_values(tmp_path):
    x = np.arange(20) % 3 * 1000
    y = np.arange(20, dtype="f8") / 4
    table = pa.table({"x": pa.array(x).dictionary_encode(), "y": pa.array(y)})
    batches = table.to_batches(max_chunksize=3)
    with pa.OSFile(str(tmp_path / "d.arrow"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        for b in batches:
            w.write_batch(b)
    with pa.OSFile(str(tmp_path / "d.arrows"), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        for b in batches:
            w.write_batch(b)
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=4)
    sources = [
        str(tmp_path / "d.arrow"),
        str(tmp_path / "d.arrows"),
        str(tmp_path / "d.parquet"),
        table,
        batches,
        table.to_pandas(),
    ]
    for i, source in enumerate(sources):
        uri = f"lmdb://{tmp_path}/ds{i}"
        if isinstance(source, str):
            p = run_cli("load", source, uri, "--batch-records", 2, "--workers", 2, "-q")
            assert p.returncode == 0, p.stderr
        else:
            loader.load(source, uri, batch_records=2)
        with loader.open(uri) as ds:
            got = ds.read_records()
            assert ds.manifest.layout["fields"] == [["x", "int64"], ["y", "float64"]], i
        assert got["x"].tolist() == x.tolist() and got["y"].tolist() == y.tolist(), i
