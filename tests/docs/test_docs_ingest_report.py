"""One report for `ingest`: documents and files of fixed-size records both return
`IngestReport`, whose ``files`` lists one dict per file ingested (name and records) -
a documents run no longer reports a count there - with the --json keys of each: both name
their ``layout`` (the one raw files were read as), ``pattern`` only for fixed-size records."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli

from loader.docs.gen import generate_docs
from loader.docs.json_dir import write_json_dir
from loader.loading.ingest import IngestReport, ingest
from loader.model.layouts import get_layout
from loader.sources.generators import generate

KW = dict(shards=2, workers=2, batch_records=40, progress="none")
COMMON = {
    "dataset",
    "directory",
    "run_id",
    "status",
    "files",
    "skipped",
    "deferred",
    "already",
    "records",
    "batches",
    "bytes",
    "resumed_records",
    "seconds",
    "mb_per_s",
    "error",
}


def docs_dir(d, ids):
    write_json_dir(generate_docs(2, 0, int(max(ids)) + 1).take(np.asarray(ids)), d)


def records_dir(d, sizes):
    d.mkdir()
    lay = get_layout("scidb96")
    for name, n in sizes.items():
        (d / name).write_bytes(generate(lay, 0, n, impl="c").tobytes())


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_documents_and_records_return_one_report_class(tmp_path, scheme):
    docs_dir(tmp_path / "docs", [3, 1, 7, 20])
    (tmp_path / "docs" / "5.json").write_bytes(b"{bad")
    rep = ingest(f"{scheme}://{tmp_path}/d", str(tmp_path / "docs"), layout="docs", on_bad_file="skip", **KW)
    assert type(rep) is IngestReport and rep.layout == "docs" and rep.pattern is None
    assert rep.files == [{"name": f"{i}.json", "records": 1} for i in (1, 3, 7, 20)]  # the bad 5.json is not
    assert [s["name"] for s in rep.skipped] == ["5.json"] and rep.records == 4
    out = rep.to_dict()
    assert set(out) == COMMON | {"layout"} and out["files"] == rep.files

    records_dir(tmp_path / "bin", {"a.bin": 30, "b.bin": 0, "c.bin": 55})
    rep = ingest(f"{scheme}://{tmp_path}/r", str(tmp_path / "bin"), **KW)
    assert type(rep) is IngestReport and rep.layout == "scidb96" and rep.pattern == "*"
    assert [(f["name"], f["records"]) for f in rep.files] == [("a.bin", 30), ("b.bin", 0), ("c.bin", 55)]
    assert sum(f["records"] for f in rep.files) == rep.records == 85
    out = rep.to_dict()
    assert set(out) == COMMON | {"pattern", "layout"} and out["layout"] == "scidb96"
    assert {"name", "records", "batches", "first_record"} <= set(out["files"][0])

    for uri, d in ((f"{scheme}://{tmp_path}/d", "docs"), (f"{scheme}://{tmp_path}/r", "bin")):  # nothing new
        rep = ingest(uri, str(tmp_path / d), on_bad_file="skip", **KW)
        assert (rep.status, rep.files, rep.records) == ("nothing-to-do", [], 0)


def test_cli_json_keys_and_text_of_both(tmp_path):
    docs_dir(tmp_path / "docs", range(30))
    records_dir(tmp_path / "bin", {"a.bin": 30, "b.bin": 12})
    d_uri, r_uri = f"lmdb://{tmp_path}/d", f"lmdb://{tmp_path}/r"
    for uri, d, extra, key, nfiles in [
        (d_uri, "docs", ["--layout", "docs"], "layout", 30),
        (r_uri, "bin", [], "pattern", 2),
    ]:  # (both have "layout")
        p = run_cli("ingest", uri, "--from", tmp_path / d, *extra, "--json", "-q", "--shards", "2")
        assert p.returncode == 0, p.stderr
        rep = json.loads(p.stdout)
        assert set(rep) == COMMON | {key, "layout"} and rep["status"] == "done" and len(rep["files"]) == nfiles
        assert all(set(f) >= {"name", "records"} for f in rep["files"])
    # the text lines count the files listed
    docs_dir(tmp_path / "docs", range(30, 45))
    p = run_cli("ingest", d_uri, "--from", tmp_path / "docs", "--shards", "2")
    assert p.returncode == 0 and p.stdout.startswith("ingested 15 document(s) ("), p.stdout + p.stderr
    records_dir(tmp_path / "more", {"c.bin": 12})
    (tmp_path / "more" / "c.bin").rename(tmp_path / "bin" / "c.bin")
    p = run_cli("ingest", r_uri, "--from", tmp_path / "bin", "--shards", "2")
    assert p.returncode == 0 and p.stdout.startswith("ingested 1 file(s), 12 records of layout scidb96 ("), (
        p.stdout + p.stderr
    )
