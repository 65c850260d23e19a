"""The random-read benchmark (loader/bench/randreads.py, bench/random_reads.py) runs at tiny
N: every figure measured (readahead off / on / np.memmap, records and box reads, 1 and 2
threads; the disk's own random-read limit from 1, 2 and 8 threads), each sample reading
exactly the records asked for, the target rows present; the script writes its JSON and a
table with the disk requests per task. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from loader.bench.randreads import DISK_THREADS, TARGETS, child_diskreads, child_randreads, prepare, workload
from loader.bench.report import validate

from .bench_fixtures import opened_bench

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "random_reads.py"


def test_every_target_reads_the_records_asked_for(tmp_path):
    n = 3000
    with opened_bench(tmp_path, n=n) as b:
        ds, raw = b.work / "ds", b.work / "raw.bin"
        prepare(b, n, f"lmdb://{ds}", raw)
        for mode, wl in (("records", workload(n, tasks=20, count=3, span=7)), ("box", workload(n, 20, width=50))):
            for target in TARGETS:
                for threads in (1, 2):
                    r = child_randreads(mode, target, threads, f"lmdb://{ds}", str(raw), n, 5, **wl)
                    asked = 20 * (3 * 7 if mode == "records" else 50)
                    assert r["records"] == asked and r["seconds"] > 0 and r["disk_read_bytes"] >= 0, (mode, target)
                    assert r["disk_requests"] >= 0 and r["disk_requests_per_task"] == round(r["disk_requests"] / 20, 2)
        for threads in DISK_THREADS:
            r = child_diskreads(str(raw), threads, 30, 1)
            assert r["reads"] == 30 and r["seconds"] > 0 and r["disk_requests"] >= 0


def test_the_script_runs_and_reports_the_target(tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--n",
            "2000",
            "--repeats",
            "1",
            "--tasks",
            "5",
            "--out",
            str(tmp_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert validate(res) == [] and (tmp_path / "random_reads.json").exists()
    figs = {k: f for k, f in res["figures"].items() if f["group"] == "random"}
    assert len(figs) == 12 + len(DISK_THREADS) and all(f["status"] == "ok" for f in figs.values()), {
        k: f.get("reason") for k, f in figs.items()
    }
    assert all(f["samples"][0]["records"] == f["records"] for k, f in figs.items() if "-disk-" not in k)
    assert all(figs[f"random-disk-t{t}"]["samples"][0]["reads"] == 5 * 4 for t in DISK_THREADS)
    md = (tmp_path / "random_reads.md").read_text()
    assert "disk read requests / task" in md and "cold random 12 KiB preads of the raw file" in md
    rows = [t for t in res["targets"] if t["id"].startswith("random-")]
    assert [t["id"] for t in rows] == [f"random-{m}-raoff-t{t}-vs-memmap" for m in ("records", "box") for t in (1, 2)]
    assert all(t["target"] == 2.0 and t["ratio"] is not None for t in rows)
