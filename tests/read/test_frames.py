"""Polars and DuckDB over `Dataset.scan` (issue 31), with the real libraries: results equal
numpy's; a Polars filter on the record column reads only the batches of that range; the
row limit stops the scan; `bulkload sql` runs DuckDB and says how to install it when it is
missing."""

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
