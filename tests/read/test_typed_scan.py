"""Typed records (issue 30) through the streaming reads (issue 31): `Dataset.scan` with and
without a projection, record ranges, `to_pandas`, `to_polars`, `sql` and `bulkload scan`
give native Arrow types (timestamp with zone, bool, fixed_size_binary, string,
fixed_size_list, float16) and real nulls from ``_validity``, on every serializer and
compression (the Cap'n Proto column reader finds each field by `Layout.capnp_span`)."""

import csv
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import run_cli
from sources.test_typed_fields import LAYOUT, sample

import loader
from loader.model.arrow_records import records_to_arrow

N = 44  # batches of 10: the ends of a record range are parts of batches
CASES = [("capnp", "none"), ("capnp", "lz4"), ("capnp", "zstd"), ("arrow", "none"), ("arrow", "zstd")]


@pytest.fixture(scope="module")
def toml(tmp_path_factory):
    from model.test_field_types import TICKS_TOML

    path = tmp_path_factory.mktemp("layout") / "tk.toml"
    path.write_text(TICKS_TOML)
    return str(path)


@pytest.fixture(scope="module")
def records():
    return sample(N)


@pytest.fixture(scope="module", params=CASES, ids=lambda p: "-".join(p))
def uri(request, tmp_path_factory, toml, records):
    fmt, comp = request.param
    u = f"lmdb://{tmp_path_factory.mktemp('typed')}/ds"
    loader.load(
        records, u, layout=toml, format=fmt, compression=comp, batch_records=10, shards=2, workers=1, progress="none"
    )
    return u


@pytest.fixture(scope="module")
def zstd_uri(tmp_path_factory, toml, records):
    """One dataset for the CLI's outputs (the text conversions do not depend on the format)."""
    u = f"lmdb://{tmp_path_factory.mktemp('typed_sql')}/ds"
    loader.load(records, u, layout=toml, compression="zstd", batch_records=10, progress="none")
    return u


def test_a_typed_scan_has_native_types_and_real_nulls(uri, records):
    want = records_to_arrow(records, LAYOUT)
    with loader.open(uri) as ds:
        got = ds.scan().read_all()
        assert got.schema == LAYOUT.arrow_schema and got.equals(want)
        assert got.column("venue").null_count == int((records["_validity"][:, 0] & 1 == 0).sum()) > 0
        assert got.column("flag").null_count == int((records["_validity"][:, 0] & 2 == 0).sum()) > 0
        assert ds.to_arrow(records=(3, 37)).equals(want.slice(3, 34))  # parts of batches at both ends


@pytest.mark.parametrize("columns", [["venue"], ["flag", "ok"], ["sym", "v", "name", "h", "ts", "d"], ["px", "venue"]])
def test_a_projection_of_typed_fields_reads_them_with_their_nulls(uri, records, columns):
    want = records_to_arrow(records, LAYOUT).select(columns)
    with loader.open(uri) as ds:
        got = ds.scan(columns=columns).read_all()
        assert got.schema.names == columns and got.equals(want)
        for name in columns:
            assert got.schema.field(name).type == LAYOUT.field(name).arrow_type
        assert ds.to_arrow(columns, records=(7, 29)).equals(want.slice(7, 22))


def test_to_pandas_keeps_the_zone_and_gives_nullable_dtypes(uri, records):
    with loader.open(uri) as ds:
        frame = ds.to_pandas()
        one = ds.to_pandas(columns=["venue"])
    assert str(frame["ts"].dtype) == "datetime64[ns, UTC]" and str(frame["venue"].dtype) == "Int16"
    assert str(frame["flag"].dtype) == "boolean" and frame["ok"].dtype == bool
    assert str(one["venue"].dtype) == "Int16" and list(one.columns) == ["venue"]
    valid = records["_validity"][:, 0] & 1 != 0
    assert one["venue"].isna().to_numpy().tolist() == (~valid).tolist()
    assert one["venue"][valid].astype("int64").tolist() == records["venue"][valid].tolist()
    assert frame["name"].tolist()[:3] == ["Zürich", "", "日本"]


def test_polars_and_duckdb_read_typed_fields_with_their_nulls(uri, records):
    pl = pytest.importorskip("polars")
    pytest.importorskip("duckdb")
    nulls = int((records["_validity"][:, 0] & 1 == 0).sum())
    with loader.open(uri) as ds:
        lf = ds.to_polars()
        frame = lf.select("ts", "venue", "v", "sym", "ok").collect()
        assert frame.schema["ts"] == pl.Datetime("ns", "UTC") and frame.schema["venue"] == pl.Int16
        assert frame.schema["v"] == pl.Array(pl.Float32, 3) and frame.schema["sym"] == pl.Binary
        assert frame["venue"].null_count() == nulls and frame["ok"].to_list() == records["ok"].tolist()
        assert lf.filter(pl.col("venue").is_null()).select(pl.len()).collect().item() == nulls
        t = ds.sql("SELECT ts, venue, name, ok FROM data WHERE venue IS NULL")
        ts = t.schema.field("ts").type  # DuckDB gives a zoned time in its session zone's name
        assert t.num_rows == nulls and ts.unit == "ns" and ts.tz in ("UTC", "Etc/UTC")
        assert t.schema.field("name").type == pa.string() and t.schema.field("ok").type == pa.bool_()
        assert ds.sql("SELECT count(*) AS n FROM data WHERE flag").column("n")[0].as_py() == int(
            (records["flag"] & (records["_validity"][:, 0] & 2 != 0)).sum()
        )


def test_bulkload_scan_writes_typed_values_as_csv_jsonl_and_parquet(zstd_uri, records, tmp_path):
    valid = records["_validity"][:, 0] & 1 != 0
    p = run_cli("scan", zstd_uri, "--format", "parquet", "--out", tmp_path / "t.parquet")
    assert p.returncode == 0, p.stderr
    assert pq.read_table(tmp_path / "t.parquet").equals(
        records_to_arrow(records, LAYOUT).replace_schema_metadata(pq.read_table(tmp_path / "t.parquet").schema.metadata)
    )

    p = run_cli("scan", zstd_uri, "--format", "jsonl", "--columns", "ts,d,sym,name,v,ok,venue,h", "--out", "-")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(rows) == N
    r1 = rows[1]
    assert r1["ts"] == np.datetime_as_string(records["ts"][1], "ns") + "Z"  # ISO 8601, UTC
    assert r1["d"] == int(records["d"][1].astype("int64"))
    assert r1["sym"] == "MSFT\x00\x01" and rows[3]["sym"] == ""  # the text up to the zero padding
    assert r1["name"] == "" and rows[0]["name"] == "Zürich" and r1["ok"] is bool(records["ok"][1])
    assert r1["v"] == pytest.approx(records["v"][1].tolist())
    assert [r["venue"] for r in rows] == [int(v) if ok else None for v, ok in zip(records["venue"], valid, strict=True)]

    p = run_cli("scan", zstd_uri, "--format", "csv", "--columns", "ts,sym,v,ok,venue", "--records", "0:4", "--out", "-")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == '"ts","sym","v","ok","venue"' and len(lines) == 5
    cells = list(csv.reader(io.StringIO(p.stdout)))[1:]
    for i, (ts, sym, v, ok, venue) in enumerate(cells):
        assert ts == rows[i]["ts"] and sym == rows[i]["sym"] and json.loads(v) == rows[i]["v"]
        assert ok == ("true" if records["ok"][i] else "false")
        assert venue == (str(records["venue"][i]) if valid[i] else "")


def test_duckdb_reads_the_csv_of_typed_values_back_with_their_types(zstd_uri, records, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    p = run_cli("scan", zstd_uri, "--format", "csv", "--columns", "ts,ok,venue,name", "--out", tmp_path / "t.csv")
    assert p.returncode == 0, p.stderr
    rel = duckdb.connect().sql(f"SELECT * FROM read_csv('{tmp_path / 't.csv'}')")
    types = dict(zip(rel.columns, map(str, rel.types), strict=True))
    assert types["ts"].startswith("TIMESTAMP") and types["ok"] == "BOOLEAN" and types["name"] == "VARCHAR"
    got = rel.fetchall()
    valid = records["_validity"][:, 0] & 1 != 0
    assert [r[2] for r in got] == [int(v) if ok else None for v, ok in zip(records["venue"], valid, strict=True)]


def test_a_scan_to_npy_of_a_nullable_field_keeps_its_nulls_as_validity(zstd_uri, records, tmp_path):
    p = run_cli("scan", zstd_uri, "--format", "npy", "--columns", "ts,venue,flag", "--out", tmp_path / "s.npy")
    assert p.returncode == 0, p.stderr
    got = np.load(tmp_path / "s.npy")
    assert got.dtype.names == ("ts", "venue", "flag", "_validity")
    assert np.array_equal(got["ts"], records["ts"]) and np.array_equal(got["_validity"], records["_validity"])
    assert np.array_equal(got["venue"], records["venue"]) and np.array_equal(got["flag"], records["flag"])
    p = run_cli("export", zstd_uri, "--format", "npy", "--out", tmp_path / "all.npy")
    assert p.returncode == 0, p.stderr
    assert np.load(tmp_path / "all.npy").tobytes() == records.tobytes()


def test_bulkload_sql_writes_typed_results_as_csv_json_and_npy(zstd_uri, records, tmp_path):
    pytest.importorskip("duckdb")
    query = "SELECT ts, sym, v, venue, ts::DATE AS day FROM data ORDER BY ts LIMIT 5"
    order = np.argsort(records["ts"], kind="stable")[:5]
    valid = records["_validity"][:, 0] & 1 != 0
    p = run_cli("sql", zstd_uri, query, "--format", "json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [r["sym"] for r in rows] == [records["sym"][i].decode() for i in order]
    assert [r["venue"] for r in rows] == [int(records["venue"][i]) if valid[i] else None for i in order]
    assert rows[0]["day"] == str(records["ts"][order[0]].astype("M8[D]")) and rows[0]["ts"].startswith(rows[0]["day"])
    p = run_cli("sql", zstd_uri, query, "--format", "csv")
    assert p.returncode == 0, p.stderr
    cells = list(csv.reader(io.StringIO(p.stdout)))
    assert cells[0] == ["ts", "sym", "v", "venue", "day"] and len(cells) == 6
    assert [
        json.loads(c[2]) == pytest.approx(records["v"][i].tolist()) for c, i in zip(cells[1:], order, strict=True)
    ] == [True] * 5
    p = run_cli("sql", zstd_uri, "SELECT ts, ok, px FROM data", "--format", "npy", "--out", tmp_path / "q.npy")
    assert p.returncode == 0, p.stderr
    got = np.load(tmp_path / "q.npy")
    assert got.dtype == np.dtype([("ts", "M8[ns]"), ("ok", "?"), ("px", "<f8")])
    assert np.array_equal(np.sort(got["ts"]), np.sort(records["ts"])) and got["ok"].sum() == records["ok"].sum()
    for col in ("name", "sym"):  # text of varying length, DuckDB's BLOB: no fixed width
        p = run_cli("sql", zstd_uri, f"SELECT {col} FROM data", "--format", "npy", "--out", tmp_path / "n.npy")
        assert p.returncode == 2 and f"column {col!r} is" in p.stderr and "use --format arrow" in p.stderr
        assert "Traceback" not in p.stderr and not (tmp_path / "n.npy").exists()


def test_text_outputs_write_bytes_as_their_text_and_escape_what_is_not_utf8():
    from loader.read.tables import as_text

    col = pa.array([b"AAPL\0\0\0\0", b"\xffA\0\0\0\0\0\0", None], pa.binary(8))
    t = as_text(pa.table({"sym": col, "v": pa.array([[1.5], [2.0], None], pa.list_(pa.float32(), 1))}), lists=True)
    assert t.column("sym").to_pylist() == ["AAPL", "\\xffA", None] and t.column("v").to_pylist() == [
        "[1.5]",
        "[2.0]",
        None,
    ]
