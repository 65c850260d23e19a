"""The catalog suite (issue 29's targets) keeps working: `bulkload bench --suite catalog` on
tiny sizes writes catalog.json / .md / .png and one history line per run, with every
target present and a baseline run turning the load targets into measured ones; and the
bench helper that commits many small runs leaves a dataset that verifies and takes loads.

Checks the shape of the results, never the speed (benchmarks live in bench/, not in timed
tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loader.bench import report as R
from loader.bench.catalog import catalog_targets, child_catalog_ops, child_catalog_runs, sizes
from loader.bench.figures import Figure

BULKLOAD = str(Path(sys.executable).parent / "bulkload")
PNG = b"\x89PNG\r\n\x1a\n"
OPS = ("append", "open", "commit", "info", "verify")
TARGETS = {
    "catalog-append-50ms",
    "catalog-open-20ms",
    "catalog-info-300ms",
    "catalog-append-flat",
    "catalog-commit-flat",
    "catalog-open-flat",
    "catalog-verify-rss-flat",
    "catalog-load-br100-3x",
    "catalog-load-default-noise",
}

pytest.importorskip("matplotlib")


def bench(out: Path, *args: str) -> dict:
    p = subprocess.run(
        [
            BULKLOAD,
            "bench",
            "--suite",
            "catalog",
            "--max-batches",
            "200",
            "--records",
            "20000",
            "--repeats",
            "1",
            "--out",
            str(out),
            "--json",
            "--quiet",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs into one directory, the second with the first as its baseline."""
    out = tmp_path_factory.mktemp("catalog")
    first = bench(out, "--label", "first")
    before = out / "before.json"
    before.write_text((out / "catalog.json").read_text())
    second = bench(out, "--label", "second", "--baseline", str(before))
    return out, first, second


def test_the_catalog_suite_writes_its_json_markdown_and_one_png(runs):
    out, _, res = runs
    assert R.validate(res) == []
    assert res["suite"] == "catalog" and res["parameters"]["sections"] == ["catalog"]
    assert json.loads((out / "catalog.json").read_text())["figures"].keys() == res["figures"].keys()
    assert res["plots"] == ["catalog.png"] and (out / "catalog.png").read_bytes()[:8] == PNG
    assert not list(out.glob("*throughput*")) and not list(out.glob(".bench-work-*"))
    m = res["machine"]
    assert m["cores"] >= 1 and m["cpu_model"] and m["filesystem"]["type"]
    assert "bench helper" in res["parameters"]["runs_helper"]
    md = (out / "catalog.md").read_text()
    assert "| batches | runs | metadata |" in md and "| 200 | 20 |" in md and "| 20 | 2 |" in md
    assert "≤ 1.5" in md and "![catalog](catalog.png)" in md
    assert "| bulkload load --batch-records 100 | 20,000 | 200 |" in md  # the loads, with their batches


def test_every_size_measures_every_operation_with_its_samples(runs):
    _, _, res = runs
    figs = res["figures"]
    for n in (20, 200):  # --max-batches 200: it and a tenth of it
        build = figs[f"catalog-build-b{n}"]
        assert build["status"] == "ok", build.get("reason")
        s = build["samples"][0]
        assert s["batches"] == n and s["runs"] == n // 10 and s["metadata_bytes"] > 0 and s["commits"] >= 1
        for op in OPS:
            f = figs[f"catalog-{op}-b{n}"]
            assert f["status"] == "ok", (f["id"], f.get("reason"))
            assert f["params"] == {"op": op, "batches": n, "runs": n // 10}
            assert len(f["samples"]) == 1 and f["seconds"]["median"] > 0
        assert figs[f"catalog-verify-b{n}"]["peak_tree_anon_bytes"]["max"] > 0
        assert figs[f"catalog-append-b{n}"]["samples"][0]["append_batches"] == 1  # one 1,000-record batch
    for key in ("br100", "default"):
        f = figs[f"catalog-load-{key}"]
        assert f["status"] == "ok" and f["records"] == 20000 and f["mb_s"]["median"] > 0


def test_every_target_has_a_status_and_a_baseline_measures_the_load_targets(runs):
    _, first, second = runs
    for res in (first, second):
        ts = {t["id"]: t for t in res["targets"]}
        assert set(ts) == TARGETS
        for t in ts.values():
            assert t["status"] in ("pass", "short") or t["status"].startswith("not measured"), t
            if t["status"] in ("pass", "short"):
                assert t["pass"] == (t["status"] == "pass") and t["value"] > 0 and t["reference"] > 0
        assert all(ts[f"catalog-{op}-flat"].get("at_most") for op in ("append", "commit", "open"))
    first_ts = {t["id"]: t for t in first["targets"]}
    assert first_ts["catalog-load-br100-3x"]["status"].startswith("not measured")  # 20,000 records: no "before"
    assert first_ts["catalog-load-default-noise"]["status"].startswith("not measured")
    ts = {t["id"]: t for t in second["targets"]}
    br = ts["catalog-load-br100-3x"]
    assert br["status"] in ("pass", "short")
    assert br["reference"] == first["figures"]["catalog-load-br100"]["seconds"]["median"]
    assert ts["catalog-load-default-noise"]["status"] in ("pass", "short")


def test_each_run_appends_one_history_line(runs):
    out, first, second = runs
    lines = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    assert [x["label"] for x in lines] == ["first", "second"]
    for line, res in zip(lines, (first, second), strict=True):
        assert line["suite"] == "catalog" and line["started"] == res["started"]
        commit = res["git"]["commit"]  # None outside a git checkout
        assert line["git"] == (commit[:7] + ("-dirty" if res["git"]["dirty"] else "") if commit else None)
        assert set(line["targets"]) == TARGETS
        assert {k: v["status"] for k, v in line["targets"].items()} == {t["id"]: t["status"] for t in res["targets"]}


@pytest.mark.parametrize("kind", ["missing", "not json", "fifo"])
def test_an_unreadable_baseline_is_a_usage_error_before_anything_runs(tmp_path, kind):
    import os

    path = tmp_path / "before.json"
    if kind == "not json":
        path.write_text("{")
    elif kind == "fifo":
        os.mkfifo(path)  # never opened: it would block
    p = subprocess.run(
        [BULKLOAD, "bench", "--suite", "catalog", "--baseline", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--baseline" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("git", [{"commit": None, "dirty": None}, {}, None])
def test_a_baseline_from_outside_a_git_checkout_still_gives_the_load_targets(git):
    def load(fid: str, seconds: float) -> Figure:
        return Figure(fid, "catalog-load", fid, 20000, samples=[{"seconds": seconds}])

    before = {
        "git": git,
        "figures": {
            fid: {"status": "ok", "records": 20000, "seconds": {"median": s}}
            for fid, s in (("catalog-load-br100", 3.0), ("catalog-load-default", 1.0))
        },
    }
    now = {f.id: f for f in (load("catalog-load-br100", 0.5), load("catalog-load-default", 1.0))}
    ts = {t.id: t for t in catalog_targets(now, before)}
    assert (ts["catalog-load-br100-3x"].ratio, ts["catalog-load-br100-3x"].status) == (6.0, "pass")
    assert (ts["catalog-load-default-noise"].ratio, ts["catalog-load-default-noise"].status) == (1.0, "pass")
    assert "baseline git ?" in ts["catalog-load-br100-3x"].note


@pytest.mark.parametrize(
    "max_batches, expected",
    [
        (None, (1_000, 10_000, 100_000, 1_000_000)),
        (10_000, (1_000, 10_000)),
        (50_000, (1_000, 10_000, 50_000)),
        (300, (30, 300)),
        (5, (5,)),
    ],
)
def test_max_batches_keeps_the_sizes_up_to_it_and_at_least_two(max_batches, expected):
    assert sizes((1_000, 10_000, 100_000, 1_000_000), max_batches) == expected


def test_the_runs_helper_leaves_a_dataset_that_verifies_and_takes_loads(tmp_path):
    import loader

    root = tmp_path / "ds"
    uri = f"lmdb://{root}"
    loader.load("gen://scidb96?n=100", uri, batch_records=10)
    res = child_catalog_runs(str(root), runs=25, per_commit=10)
    assert res["commits"] == 3
    ops = child_catalog_ops(uri, uri, str(root), append=50)  # its own warm-up dataset: fine
    assert ops["records_before"] == 150 and ops["append_batches"] == 1
    info = loader.info(uri)
    assert info["records"] == 200 and info["batches"] == 12
    assert info["runs_total"] == 1 + 25 + 1 + 1 + 1  # the load, the helper's, the warm-up, the append, the commit
    assert loader.verify(uri).ok
    rep = loader.load("gen://scidb96?n=100&start=200", uri, batch_records=10)
    assert rep.records == 100 and loader.info(uri)["records"] == 300


def test_a_size_that_cannot_be_built_fails_with_its_reason_and_the_suite_goes_on(tmp_path):
    from loader.bench.suite import run

    # 0 records a batch: `bulkload load --batch-records 0` refuses, every size fails to build
    res = run("catalog", n=1000, repeats=1, out=tmp_path / "out", max_batches=20, catalog_batch_records=0)
    assert R.validate(res) == []
    for n in (2, 20):
        for op in ("build", *OPS):
            f = res["figures"][f"catalog-{op}-b{n}"]
            assert f["status"] == "failed" and "could not build the dataset" in f["reason"], f
    assert all(res["figures"][f"catalog-load-{k}"]["status"] == "ok" for k in ("br100", "default"))
    ts = {t["id"]: t for t in res["targets"]}
    assert ts["catalog-append-50ms"]["status"] == "not measured (catalog-append-b20)"
    assert ts["catalog-open-flat"]["status"].startswith("not measured (catalog-open-b2")
    md = (tmp_path / "out" / "catalog.md").read_text()
    assert "| 20 | 2 |" in md and "failed" in md and "could not build the dataset" in md


def test_before_runs_the_other_codes_loads_interleaved_and_they_are_the_targets_before(tmp_path):
    p = subprocess.run(
        [
            BULKLOAD,
            "bench",
            "--suite",
            "catalog",
            "--max-batches",
            "2",
            "--records",
            "20000",
            "--repeats",
            "2",
            "--out",
            str(tmp_path),
            "--json",
            "--quiet",
            "--before",
            BULKLOAD,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert R.validate(res) == [] and res["parameters"]["before"] == BULKLOAD
    figs = res["figures"]
    for key in ("br100", "default"):
        f = figs[f"catalog-load-{key}-before"]
        assert f["status"] == "ok" and f["params"]["bulkload"] == BULKLOAD
        assert [s["round"] for s in f["samples"]] == [1, 2]  # interleaved with this code's, round by round
    ts = {t["id"]: t for t in res["targets"]}
    for tid, key in (("catalog-load-br100-3x", "br100"), ("catalog-load-default-noise", "default")):
        assert ts[tid]["status"] in ("pass", "short")
        assert ts[tid]["reference"] == round(figs[f"catalog-load-{key}-before"]["seconds"]["median"], 6)
        assert "interleaved in this run" in ts[tid]["note"]
