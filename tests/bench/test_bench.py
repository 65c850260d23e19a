"""The benchmark suite keeps working: `bulkload bench --suite quick` on tiny N.

Checks the JSON schema, the Markdown and that the plots exist, never the speed
(benchmarks live in bench/, not in timed tests).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loader.bench import report as R

BULKLOAD = str(Path(sys.executable).parent / "bulkload")

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    # the record of an earlier run: its latest files and its history line
    (out / "quick.json").write_text('{"earlier": true}')
    (out / "history.jsonl").write_text(json.dumps({"suite": "quick", "label": "earlier"}) + "\n")
    p = subprocess.run(
        [
            BULKLOAD,
            "bench",
            "--suite",
            "quick",
            "--n",
            "20000",
            "--repeats",
            "1",
            "--out",
            str(out),
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return out, json.loads(p.stdout)


def test_json_schema(quick):
    out, res = quick
    assert res["schema"] == R.SCHEMA and res["schema_version"] == R.SCHEMA_VERSION
    assert R.validate(res) == []
    on_disk = json.loads((out / "quick.json").read_text())
    assert on_disk["figures"].keys() == res["figures"].keys()
    m = res["machine"]
    assert m["cores"] >= 1 and m["memory_bytes"] > 0 and m["cpu_model"] and m["kernel"]
    assert m["filesystem"]["type"]
    assert res["versions"]["bulkload"] and res["versions"]["numpy"]
    assert "commit" in res["git"]
    assert res["parameters"]["n"] == 20000 and res["parameters"]["repeats"] == 1


def test_figures_and_limits(quick):
    _, res = quick
    figs = res["figures"]
    # the reference limits and the headline loads are always measured
    for fid in (
        "gen-devnull",
        "gen-file",
        "gen-file-fsync",
        "gen-shm",
        "gen-parallel-shm",
        "gen-pipe",
        "npsave-fsync",
        "npload",
        "cold-read",
        "load-lmdb-capnp-w1",
        "load-rocksdb-capnp",
        "load-mem-capnp",
        "load-stdin-capnp",
        "load-lmdb-arrow-zstd",
        "peer-lmdb-per-record",
        "peer-rocksdict-writebatch",
        "peer-pycapnp-builder",
    ):
        f = figs[fid]
        assert f["status"] == "ok", (fid, f.get("reason"))
        assert f["mb_s"]["min"] <= f["mb_s"]["median"] <= f["mb_s"]["max"]
        assert f["records_s"]["median"] > 0
        assert f["samples"][0]["seconds"] > 0
        if fid == "gen-file-fsync":  # the disk limit: before the loads, between the rounds, at the end
            assert [s["phase"] for s in f["samples"]] == ["limits", "round 1", "after", "end of run"]
        else:
            assert len(f["samples"]) == 1
    load = figs["load-lmdb-capnp-w1"]
    assert load["limit"] == "gen-file-fsync" and load["ratio_to_limit"]["median"] > 0
    assert load["peak_tree_rss_bytes"]["max"] > 0
    # optional peers and the finalizer are measured or say why not, never faked
    for f in figs.values():
        assert f["status"] in ("ok", "skipped", "failed")
        if f["status"] != "ok":
            assert f["reason"]
            assert f["id"] in {s["id"] for s in res["skipped"]}
    target_ids = {t["id"] for t in res["targets"]}
    assert {"load-vs-disk", "load-vs-arcticdb", "load-vs-naive-lmdb", "load-2w-vs-1w", "finalize-400"} <= target_ids
    for t in res["targets"]:
        assert t["status"] in ("pass", "short") or t["status"].startswith("not measured")


def test_markdown_and_plots(quick):
    out, res = quick
    md = (out / "quick.md").read_text()
    assert "## Targets" in md and "## Reference limits" in md and "bulkload-gen -> file + fsync" in md
    # issue 31's reads and issue 30's ticks: their tables and targets in the quick suite
    assert "## Reads against ArcticDB, DuckDB and Parquet" in md and "## gen://ticks against ArcticDB" in md
    goals = {t["id"]: t for t in res["targets"]}
    assert goals["reads-scidb96-column-vs-full"]["status"] in ("pass", "short") and "ticks-box-1ms" in goals
    for name in ("quick-throughput.png", "quick-scaling.png", "quick-rss.png"):
        p = out / name
        assert p.exists() and p.stat().st_size > 1000
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert name in res["plots"]
    assert not list(out.glob(".bench-work-*")), "the work directory is removed"


def test_a_run_replaces_the_latest_files_and_appends_one_history_line(quick):
    out, res = quick
    pngs = ["quick-rss.png", "quick-scaling.png", "quick-throughput.png"]
    assert sorted(p.name for p in out.iterdir()) == sorted(["history.jsonl", "quick.json", "quick.md", *pngs])
    assert "earlier" not in json.loads((out / "quick.json").read_text())  # replaced, no per-run copy beside it
    earlier, line = (json.loads(x) for x in (out / "history.jsonl").read_text().splitlines())
    assert earlier["label"] == "earlier" and line["suite"] == "quick" and line["started"] == res["started"]
    assert set(line["targets"]) == {t["id"] for t in res["targets"]}
    ok = {k: f for k, f in res["figures"].items() if f["status"] == "ok"}
    assert set(line["figures"]) == set(ok)
    assert line["figures"]["gen-pipe"]["mb_s"] == pytest.approx(ok["gen-pipe"]["mb_s"]["median"], rel=1e-3)


def test_bad_options(tmp_path):
    p = subprocess.run(
        [BULKLOAD, "bench", "--suite", "huge", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and "unknown suite" in p.stderr
    p = subprocess.run(
        [BULKLOAD, "bench", "--n", "10", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and "--n" in p.stderr


def test_an_unknown_workload_is_a_usage_error(tmp_path):
    p = subprocess.run(
        [BULKLOAD, "bench", "--workloads", "scidb96,trades", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "unknown workload(s) trades; use scidb96, ticks" in p.stderr
