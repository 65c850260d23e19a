"""`bulkload scan` / `export` / `get` (issue 31): streaming output in every format, nothing
but the data on stdout with ``--out -`` (byte-identical to the file output), CSV and
Parquet options, valid (escaped) TSV or JSON lines from `get`."""

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from helpers import run_cli

import loader
from loader.docs.batch import DocBatch
from loader.docs.json_dir import write_json_dir
from tests.read.test_scan import scidb96

N = 3000


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return scidb96(tmp_path_factory, "scancli", N, 400)


def stdout_bytes(*args):
    p = run_cli(*args, input=b"")
    assert p.returncode == 0, p.stderr
    return p.stdout, p.stderr.decode()


@pytest.mark.parametrize("fmt", ["arrow", "parquet", "csv", "jsonl", "npy"])
def test_scan_to_stdout_is_byte_identical_to_the_file_and_holds_only_data(uri, tmp_path, fmt):
    sel = ["--columns", "i1,d3", "--records", "350:2100", "--format", fmt]
    data, err = stdout_bytes("scan", uri, *sel, "--out", "-")
    assert "exported 1,750 records to -" in err
    f = tmp_path / f"x.{fmt}"
    p = run_cli("scan", uri, *sel, "--out", f)
    assert p.returncode == 0 and "exported 1,750 records" in p.stdout
    assert f.read_bytes() == data
    quiet, err = stdout_bytes("scan", uri, *sel, "--out", "-", "--quiet")
    assert quiet == data and err == ""
    with loader.open(uri) as ds:
        want = ds.read_records(350, 2100)
    if fmt == "npy":
        got = np.load(io.BytesIO(data))
        assert got.dtype.names == ("i1", "d3") and np.array_equal(got["d3"], want["d3"])
        return
    if fmt == "jsonl":
        rows = [json.loads(line) for line in data.decode().splitlines()]
        assert [r["i1"] for r in rows] == want["i1"].tolist() and list(rows[0]) == ["i1", "d3"]
        return
    t = {
        "arrow": lambda b: pa.ipc.open_file(b).read_all(),
        "parquet": lambda b: pq.read_table(pa.BufferReader(b)),
        "csv": lambda b: pcsv.read_csv(pa.BufferReader(b)),
    }[fmt](data)
    assert t.column_names == ["i1", "d3"] and t.column("i1").to_pylist() == want["i1"].tolist()


def test_export_writes_csv_and_parquet_with_the_row_groups_and_compression_asked_for(uri, tmp_path):
    data, err = stdout_bytes("export", uri, "--format", "csv", "--out", "-")
    assert err.startswith("exported 3,000 records to -")
    t = pcsv.read_csv(pa.BufferReader(data))
    assert t.num_rows == N and t.column_names[:2] == ["d0", "d1"]
    f = tmp_path / "x.parquet"
    p = run_cli("export", uri, "--format", "parquet", "--row-group-rows", "1000", "--compression", "zstd", "--out", f)
    assert p.returncode == 0, p.stderr
    m = pq.ParquetFile(f).metadata
    assert [m.row_group(i).num_rows for i in range(m.num_row_groups)] == [1000, 1000, 1000]
    assert m.row_group(0).column(0).compression == "ZSTD"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "csv", "--compression", "zstd"], "--compression zstd is not one of format csv's: it takes none"),
        (
            ["--format", "arrow", "--row-group-rows", "5"],
            "--row-group-rows takes a positive number of rows, for --format parquet only",
        ),
        (["--format", "xml"], "unknown format 'xml'; use one of arrow, parquet, csv, jsonl, npy"),
        (["--format", "csv", "--columns", "d0,zz"], "column 'zz' is not a field of layout 'scidb96'"),
        (["--format", "csv", "--records", "10"], "--records '10' is not a record range"),
    ],
)
def test_bad_scan_options_are_one_line_usage_errors(uri, tmp_path, args, message):
    p = run_cli("scan", uri, *args, "--out", tmp_path / "x")
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_get_writes_valid_tsv_and_json_lines(tmp_path):
    texts = [b"plain", b"a\ttab", b"two\nlines", b"back\\slash\r"]
    write_json_dir(DocBatch.from_records([(i, 1000 + i, t) for i, t in enumerate(texts)]), tmp_path / "in")
    u = f"lmdb://{tmp_path}/docs"
    assert run_cli("ingest", u, "--from", tmp_path / "in", "--layout", "docs").returncode == 0
    p = run_cli("get", u, 0, 1, 2, 3)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n") == [
        "0\t1000\tplain",
        "1\t1001\ta\\ttab",
        "2\t1002\ttwo\\nlines",
        "3\t1003\tback\\\\slash\\r",
        "",
    ]
    p = run_cli("get", u, 2, 3, "--format", "jsonl")
    assert [json.loads(line)["text"] for line in p.stdout.splitlines()] == ["two\nlines", "back\\slash\r"]


def test_scan_of_a_box_writes_the_cells_of_that_box(tmp_path):
    u = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N}", u, shards=1, workers=1, batch_records=400, progress="none")
    loader.finalize(u, dims="i0:4,i1:500", workers=1, progress="none")
    data, _ = stdout_bytes(
        "scan",
        u,
        "--box",
        "i0=1:3,i1=0:900",
        "--array",
        "grid",
        "--columns",
        "i0,i1,d1",
        "--format",
        "csv",
        "--out",
        "-",
        "--quiet",
    )
    with loader.open(u) as ds:
        want = ds.read_box("grid", ["d1"], i0=(1, 3), i1=(0, 900))
    got = pcsv.read_csv(pa.BufferReader(data))
    assert got.num_rows == want.num_rows > 0 and got.column("d1").to_pylist() == want.column("d1").to_pylist()
    p = run_cli("scan", u, "--box", "i0=1:3", "--records", "0:5", "--format", "csv", "--out", tmp_path / "x")
    assert p.returncode == 2 and "not both" in p.stderr
