"""Polars and DuckDB over `Dataset.scan` (issue 31), with the real libraries: results equal
numpy's; a Polars filter on the record column reads only the batches of that range; the
row limit stops the scan; `bulkload sql` runs DuckDB and says how to install it when it is
missing."""

import json

import duckdb
import numpy as np
import polars as pl
import pytest
from helpers import run_cli

import loader
from loader.read.scan import READAHEAD, scan_threads
from tests.read.test_scan import counted, scidb96

N = 6000


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return scidb96(tmp_path_factory, "frames", N, 500)


def test_a_polars_filter_on_the_record_column_reads_only_the_batches_of_that_range(uri):
    with loader.open(uri) as ds:
        recs = ds.read_records()
        reads = counted(ds)
        lf = ds.to_polars(record_column="record")
        got = (
            lf.filter((pl.col("record") >= 1200) & (pl.col("record") < 1900) & (pl.col("d0") > 1500))
            .select(pl.col("d3").sum())
            .collect()
            .item()
        )
        part = recs[1200:1900]
        assert got == part["d3"][part["d0"] > 1500].sum()
        assert sorted(reads) == sorted(b.seq for b in ds.batches_covering(1200, 1900)) and len(reads) == 2
        reads.clear()
        ids = lf.filter(pl.col("record").is_between(10, 20)).select("i1").collect()["i1"].to_list()
        assert ids == recs["i1"][10:21].tolist() and len(reads) == 1


def test_a_polars_record_range_query_reads_only_the_stored_bytes_of_its_batches(uri):
    """Target 3: ``filter(range).select(col).sum()`` reads the covering batches' stored bytes
    (``Dataset.read_stats``); a range on a field (i1 equals the record number in
    gen://scidb96, but the dataset keeps no per-batch bounds of it) is filtered after every
    batch is read: only the record column maps to a record range."""
    with loader.open(uri) as ds:
        recs = ds.read_records()
        before = ds.read_stats.copy()
        lf = ds.to_polars(record_column="record")
        got = lf.filter(pl.col("record").is_between(2100, 2899)).select(pl.col("d3").sum()).collect().item()
        assert got == recs["d3"][2100:2900].sum()
        read = ds.read_stats.since(before)
        covering = ds.batches_covering(2100, 2900)
        assert read.batches == len(covering) == 2 and read.bytes == sum(b.nbytes for b in covering)
        assert read.bytes * 5 < ds.manifest.stored_bytes
        before = ds.read_stats.copy()
        on_field = lf.filter(pl.col("i1").is_between(2100, 2899)).select(pl.col("d3").sum()).collect().item()
        assert on_field == got and ds.read_stats.since(before).bytes == ds.manifest.stored_bytes


def test_polars_projection_and_row_limit_match_numpy(uri):
    with loader.open(uri) as ds:
        recs = ds.read_records()
        reads = counted(ds)
        df = ds.to_polars().select(["i2", "d1"]).head(700).collect()
        assert df.columns == ["i2", "d1"] and df["d1"].to_numpy().tolist() == recs["d1"][:700].tolist()
        assert len(reads) <= 2 + scan_threads() * READAHEAD < 12  # stopped after the rows asked for
        full = ds.to_polars().filter(pl.col("i3") < 40).select(pl.col("d2").mean()).collect().item()
        assert full == pytest.approx(recs["d2"][recs["i3"] < 40].mean())


def test_duckdb_reads_a_scan_directly_equal_to_numpy(uri):
    with loader.open(uri) as ds:
        recs = ds.read_records()
        rd = ds.scan(columns=["i0", "d1"])  # noqa: F841 - DuckDB finds it by name
        rows = duckdb.sql("SELECT i0, count(*), sum(d1) FROM rd GROUP BY i0 ORDER BY i0").fetchall()
        keys = np.unique(recs["i0"])
        assert [r[0] for r in rows] == keys.tolist()
        assert [r[1] for r in rows] == [int((recs["i0"] == k).sum()) for k in keys]
        assert [r[2] for r in rows] == pytest.approx([recs["d1"][recs["i0"] == k].sum() for k in keys])


def test_bulkload_sql_runs_duckdb_over_the_dataset(uri):
    p = run_cli("sql", uri, "SELECT count(*) AS n, max(i1) AS m FROM data", "--format", "csv")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ['"n","m"', f"{N},{N - 1}"]
    p = run_cli("sql", uri, "SELECT nope FROM data")
    assert p.returncode == 2 and p.stderr.startswith("bulkload: error: the query failed: Binder Error")


def test_bulkload_sql_without_duckdb_exits_2_with_an_install_hint(uri, tmp_path):
    (tmp_path / "duckdb.py").write_text("raise ImportError('No module named duckdb')\n")
    p = run_cli("sql", uri, "SELECT 1 FROM data", env={"PYTHONPATH": str(tmp_path)})
    assert p.returncode == 2
    assert "bulkload sql needs duckdb, which is not installed: pip install 'bulkload[duckdb]'" in p.stderr


def duckdb_on_the_full_table(ds, query):
    """DuckDB's result of ``query`` over every record, read whole, with the record column."""
    import pyarrow as pa

    full = ds.to_arrow()
    full = full.append_column("record", pa.array(np.arange(ds.records, dtype=np.int64)))
    con = duckdb.connect()
    con.register("data", full)
    t = con.sql(query).arrow()
    return t.read_all() if hasattr(t, "read_all") else t


SQL_RANGES = [  # query, the record range read (None: every batch)
    ("SELECT sum(d3) AS s, count(*) AS n FROM data WHERE record >= 1200 AND record < 1900 AND d0 > 1500", (1200, 1900)),
    ("SELECT i0, count(*) AS n FROM data WHERE record BETWEEN 10 AND 20 GROUP BY i0 ORDER BY i0", (10, 21)),
    ("select * from DATA d where 4500 <= d.RECORD and d.record <= 4600 order by record", (4500, 4601)),
    ("SELECT record, i1 FROM data WHERE record = 3999", (3999, 4000)),
    ("SELECT count(*) FROM data WHERE record > 99999", (N, N)),
    ("SELECT count(*) FROM data WHERE record < 0", (0, 0)),
    ("SELECT count(*) AS n FROM data WHERE record < 100 OR d0 > 5000", None),  # OR: no range
    ("SELECT count(*) AS n FROM data WHERE record < 100 + 0", None),  # an expression: not pushed
    ("SELECT (SELECT count(*) FROM data) AS all_rows, count(*) AS n FROM data WHERE record < 600", None),
    ("SELECT count(*) AS n FROM data WHERE record < 10 UNION ALL SELECT count(*) FROM data", None),
    ("WITH few AS (SELECT * FROM data WHERE record < 50) SELECT count(*) AS n FROM few", None),
    ("SELECT count(*) AS n FROM data, range(3) r WHERE record < 20", None),  # a join
    ("SELECT count(*) AS n FROM data WHERE NOT (record < 5500)", None),
    ("SELECT count(*) AS n FROM data a JOIN data b ON a.i1 = b.i1 WHERE a.i1 < 50", None),  # data read twice
    ("SELECT count(*) AS n FROM data WHERE record < 30 AND (SELECT count(*) FROM query_table('data')) > 0", None),
]


@pytest.mark.parametrize("query, rng", SQL_RANGES)
def test_sql_pushes_the_where_record_range_and_equals_duckdb_on_the_full_table(uri, query, rng):
    with loader.open(uri) as ds:
        want = duckdb_on_the_full_table(ds, query)
        before = ds.read_stats.copy()
        got = ds.sql(query)
        read = ds.read_stats.since(before)
        assert got.equals(want), (got, want)
        covering = ds.batches_covering(*rng) if rng is not None else ds.manifest.batches
        assert read.batches == len(covering) and read.bytes == sum(b.nbytes for b in covering)


def test_bulkload_sql_with_a_record_range_equals_duckdb_on_the_full_table(uri):
    query = "SELECT i2, sum(d1) AS s FROM data WHERE record >= 700 AND record < 2300 GROUP BY i2 ORDER BY i2"
    p = run_cli("sql", uri, query, "--format", "json", "--stats")
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert json.loads(p.stdout) == duckdb_on_the_full_table(ds, query).to_pylist()
        covering = ds.batches_covering(700, 2300)
        read = sum(b.nbytes for b in covering)
        assert p.stderr == f"read {read:,} of {ds.manifest.stored_bytes:,} stored bytes ({len(covering)} batches)\n"


@pytest.mark.parametrize(
    "query",
    [
        "SELECT sum(i1) AS s FROM data TABLESAMPLE 50% (bernoulli, 7) WHERE record < 3000",
        "SELECT sum(i1) AS s FROM data WHERE record < 3000 USING SAMPLE 50% (bernoulli, 7)",
    ],
)
def test_sql_with_a_sample_reads_every_batch_a_sample_of_fewer_rows_would_differ(uri, query):
    with loader.open(uri) as ds:
        ds.sql(query)
        assert ds.read_stats.bytes == ds.manifest.stored_bytes
