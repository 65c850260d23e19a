"""Records with real types (times, bool, bytes, strings, arrays, nulls) end to end.

Every kind of source (a numpy array, an .npy / Parquet / Arrow IPC file, a pandas
DataFrame, an Arrow Table) loads them into every serializer and store and reads back the
same records (numpy), the same Arrow table (native types, tz, nulls) and pandas frame;
exports are read back with their types by DuckDB and Polars. Conversions are exact or
refused, as classes: one line naming the column, first row, value and fix."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model.test_field_types import TICKS_TOML

import loader
from loader.errors import ConversionError, LayoutError
from loader.model.arrow_records import frame_of_records, records_to_arrow, set_validity
from loader.model.layouts import Field, Layout, parse_layout_toml

TOML = TICKS_TOML
LAYOUT = parse_layout_toml(TOML, "tk.toml")


def sample(n: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    r = np.zeros(n, LAYOUT.dtype)
    r["ts"] = (1_700_000_000_000_000_000 + rng.integers(0, 10**12, n)).astype("M8[ns]")
    r["d"] = rng.integers(-(10**9), 10**9, n).astype("m8[us]")
    r["ok"] = rng.integers(0, 2, n).astype(bool)
    r["sym"] = [b"AAPL", b"MSFT\x00\x01", b"12345678", b""] * (n // 4)
    r["name"] = ["Zürich".encode(), b"", "日本".encode(), b"abcdefghijkl"] * (n // 4)
    r["v"] = rng.random((n, 3)).astype("f4")
    r["h"] = rng.random(n).astype("f2")
    r["venue"] = rng.integers(-300, 300, n)
    r["px"] = rng.random(n) * 100
    r["flag"] = rng.integers(0, 2, n).astype(bool)
    set_validity(r, LAYOUT, "venue", rng.random(n) < 0.7)
    set_validity(r, LAYOUT, "flag", rng.random(n) < 0.5)
    return r


def source_of(kind: str, records: np.ndarray, layout: Layout, tmp_path):
    """``records`` as a source of ``kind``: an in-memory object or a file path."""
    table = records_to_arrow(records, layout)
    if kind == "numpy":
        return records
    if kind == "npy":
        np.save(tmp_path / "r.npy", records)
        return str(tmp_path / "r.npy")
    if kind == "parquet":
        pq.write_table(table, tmp_path / "r.parquet", row_group_size=16)
        return str(tmp_path / "r.parquet")
    if kind == "arrow":
        with pa.OSFile(str(tmp_path / "r.arrow"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            for batch in table.to_batches(max_chunksize=16):
                w.write_batch(batch)
        return str(tmp_path / "r.arrow")
    if kind == "pandas":
        return frame_of_records(records, layout)
    return table


SOURCES = ["numpy", "npy", "parquet", "arrow", "pandas", "table"]


@pytest.fixture(scope="module")
def toml(tmp_path_factory):
    path = tmp_path_factory.mktemp("layout") / "tk.toml"
    path.write_text(TOML)
    return str(path)


@pytest.mark.parametrize("kind", SOURCES)
def test_every_type_loads_from_every_source_kind_and_reads_back_the_same(tmp_path, toml, kind):
    records = sample()
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(source_of(kind, records, LAYOUT, tmp_path), uri, layout=toml, batch_records=16)
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == records.tobytes()
        assert ds.to_arrow().equals(records_to_arrow(records, LAYOUT))
        frame = ds.to_pandas()
    assert str(frame["ts"].dtype) == "datetime64[ns, UTC]" and str(frame["venue"].dtype) == "Int16"
    assert str(frame["flag"].dtype) == "boolean" and frame["venue"].isna().sum() > 0
    assert frame["name"].tolist()[:4] == ["Zürich", "", "日本", "abcdefghijkl"]


@pytest.mark.parametrize("kind", ["numpy", "npy", "parquet", "arrow", "pandas", "table"])
def test_a_sources_own_types_make_the_layout(tmp_path, kind):
    records = sample()
    obj = source_of(kind, records, LAYOUT, tmp_path)
    if kind in ("numpy", "npy"):  # a dtype does not say which fields are nullable: _validity is no field
        plain = Layout("p", tuple(Field(f.name, f.type) for f in LAYOUT.fields))
        obj = source_of(kind, np.array(records[plain.names], plain.dtype), plain, tmp_path)
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(obj, uri)
    with loader.open(uri) as ds:
        got = {f.name: f for f in ds.layout.fields}
    assert got["ts"].type == "datetime64[ns]" and got["d"].type == "timedelta64[us]"
    assert got["ok"].type == "bool" and got["sym"].type == "bytes[8]" and got["v"].type == "float32[3]"
    assert got["h"].type == "float16"
    if kind in ("numpy", "npy"):
        assert got["name"].type == "bytes[12]" and not got["venue"].nullable
        return
    assert got["ts"].tz == "UTC" and got["name"].type == "string[12]"
    assert got["venue"].nullable and got["flag"].nullable and not got["px"].nullable


def test_a_files_text_of_variable_length_is_as_wide_as_its_longest_value(tmp_path):
    pq.write_table(pa.table({"s": ["ab", "cdé"], "b": [b"", b"xyz1"]}), tmp_path / "s.parquet", row_group_size=1)
    assert run_cli("load", tmp_path / "s.parquet", f"lmdb://{tmp_path}/ds").returncode == 0
    with loader.open(f"lmdb://{tmp_path}/ds") as ds:
        assert ds.layout.describe_fields() == "s:string[4], b:bytes[4]"
        assert ds.to_arrow().column("s").to_pylist() == ["ab", "cdé"]


# --- refusals, as classes: every source kind that converts ------------------------------------

CONVERTING = ["npy", "parquet", "arrow", "pandas", "table"]


def one_column(kind: str, values, tmp_path, arrow_type=None):
    """A source of one column ``x`` holding ``values`` (numpy, or a list with ``arrow_type``)."""
    arr = pa.array(values, arrow_type) if arrow_type is not None else pa.array(values)
    table = pa.table({"x": arr})
    if kind == "npy":
        col = values if isinstance(values, np.ndarray) else np.array(arr.to_pylist())
        out = np.zeros(len(col), [("x", col.dtype, col.shape[1:])])
        out["x"] = col
        np.save(tmp_path / "x.npy", out)
        return str(tmp_path / "x.npy")
    if kind == "parquet":
        pq.write_table(table, tmp_path / "x.parquet")
        return str(tmp_path / "x.parquet")
    if kind == "arrow":
        with pa.OSFile(str(tmp_path / "x.arrow"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
        return str(tmp_path / "x.arrow")
    if kind == "pandas":
        return table.to_pandas()
    return table


def refused(kind: str, src, field_type: str, tmp_path, code: int, *texts):
    """Loading ``src`` into a layout of one field x of ``field_type`` fails with exit
    ``code`` (1: ConversionError, 2: LayoutError) saying ``texts``; nothing is created."""
    lay = tmp_path / "x.toml"
    lay.write_text(f'name = "x"\n[fields]\nx = {field_type}\n')
    uri = f"lmdb://{tmp_path}/ds"
    if isinstance(src, str):
        p = run_cli("load", src, uri, "--layout", lay)
        assert p.returncode == code, p.stderr
        message = p.stderr.strip()
        assert len(message.splitlines()) == 1
    else:
        with pytest.raises(ConversionError if code == 1 else LayoutError) as e:
            loader.load(src, uri, layout=str(lay))
        message = str(e.value)
    for text in texts:
        assert text in message, message
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("kind", CONVERTING)
def test_int64_beyond_2_53_is_not_a_float64(tmp_path, kind):
    src = one_column(kind, np.array([1, 2**53 + 1], np.int64), tmp_path)
    refused(
        kind, src, '"float64"', tmp_path, 1, "column 'x', row 1: 9007199254740993 cannot be held exactly by float64"
    )


@pytest.mark.parametrize("kind", CONVERTING)
def test_a_time_that_is_not_a_whole_unit_is_refused(tmp_path, kind):
    src = one_column(kind, np.array([1000, 1001], "M8[ns]"), tmp_path)
    refused(
        kind,
        src,
        '"datetime64[us]"',
        tmp_path,
        1,
        "column 'x', row 1:",
        "a fraction of a us",
        "declare the field as datetime64[ns]",
    )


@pytest.mark.parametrize("kind", CONVERTING)
def test_a_coarser_time_that_overflows_the_finer_unit_is_refused(tmp_path, kind):
    src = one_column(kind, np.array([0, 10**11], "M8[s]"), tmp_path)
    refused(kind, src, '"datetime64[ns]"', tmp_path, 1, "column 'x', row 1:", "ns beyond the int64 range")


@pytest.mark.parametrize("kind", CONVERTING)
def test_bytes_longer_than_the_field_are_refused(tmp_path, kind):
    src = one_column(kind, np.array([b"abc", b"abcdefghi"], "S9"), tmp_path)
    refused(
        kind,
        src,
        '"bytes[8]"',
        tmp_path,
        1,
        "column 'x', row 1: b'abcdefghi' is 9 bytes, longer than bytes[8]",
        "use a layout with bytes[9]",
    )


@pytest.mark.parametrize("kind", ["parquet", "arrow", "pandas", "table"])
def test_text_longer_than_the_field_in_utf8_is_refused(tmp_path, kind):
    src = one_column(kind, ["abc", "ééé"], tmp_path)
    refused(kind, src, '"string[5]"', tmp_path, 1, "column 'x', row 1: 'ééé' is 6 bytes, longer than string[5]")


@pytest.mark.parametrize("kind", CONVERTING)
def test_bytes_that_are_not_utf8_are_not_a_string(tmp_path, kind):
    src = one_column(kind, np.array([b"ok", b"\xff\xfe"], "S2"), tmp_path)
    refused(
        kind,
        src,
        '"string[4]"',
        tmp_path,
        1,
        "column 'x', row 1: b'\\xff\\xfe' is not UTF-8 text",
        "use bytes[4] for raw bytes",
    )


@pytest.mark.parametrize("kind", ["parquet", "arrow", "pandas", "table"])
def test_text_ending_in_nul_is_refused_as_a_padded_string(tmp_path, kind):
    src = one_column(kind, ["a", "b\x00"], tmp_path)
    refused(kind, src, '"string[4]"', tmp_path, 1, "row 1: 'b\\x00' ends in a NUL character")


@pytest.mark.parametrize("kind", ["parquet", "arrow", "pandas", "table"])
def test_a_null_into_a_field_that_is_not_nullable_is_refused(tmp_path, kind):
    src = one_column(kind, [1, None, 3], tmp_path, pa.int32())
    if kind == "pandas":  # (pandas' own nullable integers: a float column's NaN is a value, as in numpy)
        src = pd.DataFrame({"x": pd.array([1, None, 3], "Int32")})
    refused(
        kind,
        src,
        '"int32"',
        tmp_path,
        1,
        "column 'x'",
        "null(s)" if kind in ("parquet", "arrow") else "row 1: null",
        "nullable",
    )


@pytest.mark.parametrize("kind", ["parquet", "arrow", "pandas", "table"])
def test_a_list_of_another_length_is_not_an_array_field(tmp_path, kind):
    src = one_column(kind, [[1.0, 2.0, 3.0], [1.0, 2.0]], tmp_path, pa.list_(pa.float64()))
    refused(kind, src, '"float32[3]"', tmp_path, 1, "column 'x', row 1: [1.0, 2.0]", "give every row 3 values")


@pytest.mark.parametrize("kind", CONVERTING)
def test_a_column_of_another_kind_is_a_usage_error(tmp_path, kind):
    src = one_column(kind, np.array([1, 2], np.int64), tmp_path)
    refused(kind, src, '"datetime64[ns]"', tmp_path, 2, "'x'", "datetime64[ns]")


def test_exact_conversions_are_done(tmp_path):
    """Another unit when exact, shorter bytes padded, a list of k numbers into T[k], 0/1 into bool."""
    table = pa.table(
        {
            "t": pa.array([0, 5_000_000], pa.timestamp("us", "Europe/Paris")),
            "b": pa.array([b"a", b"abcd"]),
            "v": pa.array([[1, 2], [3, 4]], pa.list_(pa.int16())),
            "f": pa.array([0, 1], pa.int8()),
        }
    )
    lay = Layout(
        "c",
        (
            Field("t", "datetime64[ns]", tz="Europe/Paris"),
            Field("b", "bytes[4]"),
            Field("v", "float64[2]"),
            Field("f", "bool"),
        ),
    )
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(table, uri, layout=lay)
    with loader.open(uri) as ds:
        r = ds.read_records()
        t = ds.to_arrow()
    assert r["t"].astype("i8").tolist() == [0, 5_000_000_000] and r["b"].tolist() == [b"a", b"abcd"]
    assert r["v"].tolist() == [[1.0, 2.0], [3.0, 4.0]] and r["f"].tolist() == [False, True]
    assert t.schema.field("t").type == pa.timestamp("ns", "Europe/Paris")
    assert t.column("t")[1].as_py() == dt.datetime(1970, 1, 1, 1, 0, 5, tzinfo=t.column("t")[1].as_py().tzinfo)


# --- every serializer, compression and store ----------------------------------------------------


@pytest.mark.parametrize("store", ["lmdb", "rocksdb"])
@pytest.mark.parametrize("fmt,compression", [("capnp", "none"), ("capnp", "zstd"), ("arrow", "none"), ("arrow", "lz4")])
def test_every_serializer_compression_and_store_round_trips_typed_records(tmp_path, toml, store, fmt, compression):
    records = sample(64, seed=3)
    uri = f"{store}://{tmp_path}/ds"
    loader.load(records, uri, layout=toml, format=fmt, compression=compression, batch_records=20)
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == records.tobytes()
        assert ds.read_records(7, 45).tobytes() == records[7:45].tobytes()
        assert ds.to_arrow().equals(records_to_arrow(records, LAYOUT))
    p = run_cli("verify", uri)
    assert p.returncode == 0, p.stderr
    info = run_cli("info", uri)
    assert "ts:datetime64[ns](UTC)" in info.stdout and "venue:int16?" in info.stdout and "v:float32[3]" in info.stdout


def test_pycapnp_reads_a_typed_batch_by_the_generated_schema(tmp_path):
    from loader.serializers import get_serializer
    from loader.serializers.capnp_framing import pycapnp_reader

    records = sample(8)
    value = get_serializer("capnp", LAYOUT).encode(records, 100)
    with pycapnp_reader(LAYOUT, value) as batch:
        assert batch.start == 100
        got = batch.records[1]
        assert got.ts == records["ts"][1].astype("i8") and got.ok == bool(records["ok"][1])
        assert bytes(getattr(got.sym, f"b{i}") for i in range(8)) == b"MSFT\x00\x01\x00\x00"
        assert [got.v.e0, got.v.e1, got.v.e2] == records["v"][1].tolist()
        assert got.flag == bool(records["flag"][1]) and got.validity.b0 == records["_validity"][1][0]


# --- exports, read back by DuckDB and Polars ------------------------------------------------------


def test_exports_are_read_back_with_their_types_by_duckdb_and_polars(tmp_path, toml):
    import duckdb
    import polars as pl

    records = sample(16)
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(records, uri, layout=toml)
    for fmt in ("parquet", "arrow", "npy", "capnp"):
        p = run_cli("export", uri, "--out", tmp_path / f"out.{fmt}", "--format", fmt)
        assert p.returncode == 0, p.stderr
    assert np.load(tmp_path / "out.npy").tobytes() == records.tobytes()
    con = duckdb.connect()
    rel = con.sql(f"SELECT * FROM read_parquet('{tmp_path / 'out.parquet'}')")
    types = dict(zip(rel.columns, map(str, rel.types), strict=True))
    assert types["ts"] == "TIMESTAMPTZ_NS" and types["ok"] == "BOOLEAN" and types["name"] == "VARCHAR"
    assert types["sym"] == "BLOB" and types["venue"] == "SMALLINT"
    assert types["v"] == "FLOAT[]"  # Parquet has no fixed-size list: a list of float (DuckDB reads no Arrow schema)
    assert types["d"] == "BIGINT"  # Parquet has no duration: its int64 (pyarrow and Polars read the Arrow type)
    nulls = con.sql(f"SELECT count(*) FROM read_parquet('{tmp_path / 'out.parquet'}') WHERE venue IS NULL").fetchall()[
        0
    ][0]
    assert nulls == int((records["_validity"][:, 0] & 1 == 0).sum())
    for frame in (pl.read_parquet(tmp_path / "out.parquet"), pl.read_ipc(tmp_path / "out.arrow")):
        assert frame.schema["ts"] == pl.Datetime("ns", "UTC") and frame.schema["ok"] == pl.Boolean
        assert frame.schema["name"] == pl.String and frame.schema["v"] == pl.Array(pl.Float32, 3)
        assert frame.schema["d"] == pl.Duration("us") and frame.schema["venue"] == pl.Int16
        assert frame["name"].to_list()[:3] == ["Zürich", "", "日本"] and frame["venue"].null_count() > 0


def test_dask_dataframe_has_the_native_types(tmp_path, toml):
    pytest.importorskip("dask.dataframe")
    records = sample(40)
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(records, uri, layout=toml, batch_records=10)
    with loader.open(uri) as ds:
        frame = ds.to_dask_dataframe(partition_bytes=1000).compute()
        want = ds.to_pandas()
    assert str(frame["ts"].dtype) == "datetime64[ns, UTC]" and str(frame["venue"].dtype) == "Int16"
    # (dask's convert-string option turns object columns, the bytes too, into strings)
    pd.testing.assert_frame_equal(
        frame.reset_index(drop=True).drop(columns=["sym", "v"]),
        want.drop(columns=["sym", "v"]),
        check_index_type=False,
        check_dtype=False,
    )


# --- hypothesis: random layouts of the new types round-trip ---------------------------------------

_TYPES = st.sampled_from(
    [
        "bool",
        "datetime64[ms]",
        "timedelta64[ns]",
        "bytes[3]",
        "string[5]",
        "float32[2]",
        "int64[3]",
        "float16",
        "uint8",
        "float64",
    ]
)
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=2)


@st.composite
def typed_records(draw):
    specs = draw(st.lists(st.tuples(_TYPES, st.booleans()), min_size=1, max_size=6))
    lay = Layout("hyp", tuple(Field(f"f{i}", t, nullable=n) for i, (t, n) in enumerate(specs)))
    n = draw(st.integers(0, 12))
    raw = np.frombuffer(draw(st.binary(min_size=n * lay.record_size, max_size=n * lay.record_size)), np.uint8)
    recs = raw.view(lay.dtype).copy() if n else np.zeros(0, lay.dtype)
    if lay.validity_bytes:
        recs["_validity"] = 0
    for f in lay.fields:
        if f.type == "bool":
            recs[f.name] = recs[f.name].view(np.uint8) & 1
        elif f.type == "string[5]":
            recs[f.name] = [
                draw(_TEXT).encode()[:5].rstrip(b"\x80\xbf").decode("utf-8", "ignore").encode() for _ in range(n)
            ]
        elif f.type == "float16" or f.type == "float32[2]":
            recs[f.name] = np.nan_to_num(recs[f.name])  # NaN payloads need not survive Arrow; values do
        elif f.type.startswith("datetime") or f.type.startswith("timedelta"):
            recs[f.name] = recs[f.name].view("i8") // 4  # NaT (int64 min) is not a value pandas keeps
        if f.nullable:
            set_validity(recs, lay, f.name, np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool))
    return lay, recs


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=typed_records(), fmt=st.sampled_from(["capnp", "arrow"]))
def test_random_typed_layouts_round_trip_through_numpy_arrow_and_pandas(tmp_path_factory, case, fmt):
    lay, recs = case
    tmp = tmp_path_factory.mktemp("h")
    uri = f"lmdb://{tmp}/ds"
    loader.load(recs, uri, layout=lay, format=fmt, batch_records=5)
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == recs.tobytes()
        table = ds.to_arrow()
        frame = ds.to_pandas()
    assert table.equals(records_to_arrow(recs, lay))
    for source in (table, frame):  # and back in: the same records
        again = f"lmdb://{tmp}/again{type(source).__name__}"
        loader.load(source, again, layout=lay, format=fmt)
        with loader.open(again) as ds:
            assert ds.read_records().tobytes() == recs.tobytes()


def test_a_pipeline_loads_and_compacts_typed_records(tmp_path, toml):
    records = sample(40, seed=5)
    src = source_of("parquet", records, LAYOUT, tmp_path)
    uri = f"rocksdb://{tmp_path}/ds"
    pipe = tmp_path / "typed.toml"
    pipe.write_text(
        f'[job]\ndataset = "{uri}"\nlayout = "{toml}"\nformat = "arrow"\nbatch_records = 8\n'
        f'[load]\nsource = "{src}"\n[compact]\nforce = true\ntarget_batch_records = 40\n'
    )
    p = run_cli("run", pipe)
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert len(ds.manifest.batches) == 1 and ds.read_records().tobytes() == records.tobytes()
        assert ds.to_arrow().equals(records_to_arrow(records, LAYOUT))


def test_an_array_with_validity_but_no_layout_asks_for_the_layout(tmp_path):
    with pytest.raises(LayoutError, match="has a _validity field: records of a layout with nullable fields"):
        loader.load(sample(4), f"lmdb://{tmp_path}/ds")
    np.save(tmp_path / "n.npy", sample(4))
    p = run_cli("load", tmp_path / "n.npy", f"lmdb://{tmp_path}/ds")
    assert p.returncode == 2 and "it has a _validity field" in p.stderr and "pass --layout" in p.stderr
    other = tmp_path / "other.toml"  # the same fields in another order: copied by field, its bits would be lost
    other.write_text(TOML.replace('px = "float64"\n', "").replace("[fields]\n", '[fields]\npx = "float64"\n'))
    p = run_cli("load", tmp_path / "n.npy", f"lmdb://{tmp_path}/ds", "--layout", other)
    assert p.returncode == 2 and "has a _validity field but its records are not those of layout 'tk'" in p.stderr
    assert not (tmp_path / "ds").exists()


def test_a_streams_text_column_needs_its_width_from_the_layout(tmp_path):
    schema = pa.schema([("s", pa.string())])
    reader = pa.RecordBatchReader.from_batches(schema, iter([pa.record_batch([pa.array(["ab", "cde"])], schema)]))
    with pytest.raises(
        LayoutError,
        match=r"column 's' is of variable length \(string\) and holds no value to measure; "
        r"pass the layout \(layout=\) with a field s = \"string\[N\]\"",
    ):
        loader.load(reader, f"lmdb://{tmp_path}/ds")
    reader = pa.RecordBatchReader.from_batches(schema, iter([pa.record_batch([pa.array(["ab", "cde"])], schema)]))
    loader.load(reader, f"lmdb://{tmp_path}/ds", layout=Layout("s", (Field("s", "string[3]"),)))
    with loader.open(f"lmdb://{tmp_path}/ds") as ds:
        assert ds.to_arrow().column("s").to_pylist() == ["ab", "cde"]
