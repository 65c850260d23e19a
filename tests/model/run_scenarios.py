"""Command sequences that leave every kind of run and garbage entry in a manifest.

Shared by tests/model/test_runs_typed.py and by the script that made its golden files,
tests/model/fixtures/runs/make_fixtures.py, which ran these very scenarios with the code
of main before runs were typed. A scenario calls ``snap(name, uri)`` at the moments worth
keeping: the manifest then holds load / appended / resumed / stdin / failed (bad input
and a dead worker) / killed (still ``running``) / superseded / --replace runs, fixed-size
ingest runs (skip, fail, killed, resumed), finalize (done, failed, rebuilt) and compact
runs, documents (load, bad files skipped, ingest, fold) and the three kinds of garbage
entries (a reader is kept open so that they stay listed).

Kills are real (BULKLOAD_FAULT: SIGKILL at a scripted point) and happen in a `bulkload`
child process; the CLI is the one next to the running python (the venv's).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import loader

BULKLOAD = str(Path(sys.executable).parent / "bulkload")
FAST = {"BULKLOAD_CHECKPOINT_SECONDS": "0"}  # a checkpoint after every group of batches
SMALL = ["--shards", "2", "--workers", "2", "--batch-records", "100", "-q"]
RS = 96  # scidb96


def cli(*args, fault: str | None = None, input: bytes | None = None, ok: bool = True) -> int:
    """Run `bulkload ARGS` (``fault``: killed at that point); its exit code."""
    env = dict(os.environ, **FAST)
    env.pop("BULKLOAD_FAULT", None)
    if fault:
        env["BULKLOAD_FAULT"] = fault
    p = subprocess.run([BULKLOAD, *map(str, args)], input=input, capture_output=True, env=env, timeout=300)
    if ok and p.returncode != 0:
        raise AssertionError(f"bulkload {' '.join(map(str, args))}: exit {p.returncode}: {p.stderr.decode()}")
    return p.returncode


def gen(start: int, n: int) -> bytes:
    p = subprocess.run([BULKLOAD, "generate", str(n), "--start", str(start)], capture_output=True, check=True)
    return p.stdout


def fixed_loads(base: Path, snap) -> None:
    """`load` runs of a file, a generator and stdin; --replace; finalize; compact."""
    uri = f"lmdb://{base}/load"
    f = base / "recs.bin"
    f.write_bytes(gen(0, 600))
    cli("load", f, uri, *SMALL)
    snap("load-file", uri)
    with open(f, "ab") as out:
        out.write(gen(600, 300))
    cli("load", f, uri, *SMALL)
    snap("load-appended", uri)
    assert cli("load", "gen://scidb96?n=3000&start=1000", uri, *SMALL, fault="checkpoint:3", ok=False) != 0
    snap("load-killed", uri)
    cli("load", "gen://scidb96?n=3000&start=1000", uri, *SMALL)
    snap("load-resumed", uri)
    cli("load", "-", uri, *SMALL, input=gen(4000, 250))
    snap("load-stdin", uri)
    assert cli("load", "-", uri, *SMALL, input=gen(5000, 250) + b"x" * 10, ok=False) == 1
    snap("load-stdin-failed", uri)
    assert cli("load", "gen://scidb96?n=3000&start=6000", uri, *SMALL, fault="w0.flush:3", ok=False) == 1
    snap("load-worker-died", uri)
    cli("load", "gen://scidb96?n=200&start=9000", uri, *SMALL)
    snap("load-superseded", uri)
    fin = ["--dims", "i2:7,i3:13", "--workers", "2", "-q"]
    assert cli("finalize", uri, *fin, ok=False) == 1  # duplicate cells
    snap("finalize-failed", uri)
    cli("finalize", uri, *fin, "--duplicates", "last", "--strategy", "spill")
    with loader.open(uri):  # pins the generation: what the next writers replace stays listed
        cli("finalize", uri, *fin, "--duplicates", "last", "--no-compact", "--force")  # up to date: rebuilt
        cli("load", "gen://scidb96?n=500&start=9200", uri, *SMALL)
        cli("compact", uri, "--target-batch-records", "1000", "--workers", "2")
        snap("finalize-compact-garbage", uri)
    cli("load", "gen://scidb96?n=700", uri, *SMALL, "--replace")
    snap("load-replace", uri)


def fixed_ingest(base: Path, snap) -> None:
    """`ingest` runs of a directory of raw files: done, bad file skipped, failed, killed, resumed."""
    uri = f"rocksdb://{base}/ingest"
    d = base / "in"
    d.mkdir()
    for i, name in enumerate(["01.bin", "02.bin", "03.bin"]):
        (d / name).write_bytes(gen(i * 1000, 300))
    ing = ["ingest", uri, "--from", d, *SMALL]
    cli(*ing)
    snap("ingest", uri)
    (d / "04.bin").write_bytes(gen(4000, 200))
    (d / "05.bin").write_bytes(gen(5000, 10) + b"x" * 7)  # a partial record
    cli(*ing, "--on-bad-file", "skip")
    snap("ingest-skip", uri)
    (d / "045.bin").write_bytes(gen(4500, 120))
    assert cli(*ing, ok=False) == 1
    snap("ingest-failed", uri)
    (d / "05.bin").unlink()
    for name, start in (("06.bin", 6000), ("07.bin", 7000), ("08.bin", 8000)):
        (d / name).write_bytes(gen(start, 900))
    assert cli(*ing, fault="checkpoint:4", ok=False) != 0
    snap("ingest-killed", uri)
    cli(*ing)
    snap("ingest-resumed", uri)


def documents(base: Path, snap) -> None:
    """Documents: gen://docs, a JSON directory with bad files (skip), ingest, a killed load
    resumed, and a fold (compact) whose old tables stay listed for an open reader."""
    from loader.docs.gen import generate_docs
    from loader.docs.json_dir import write_json_dir

    uri = f"lmdb://{base}/docs"
    docs = ["--shards", "2", "--workers", "2", "--batch-records", "50", "-q"]
    cli("load", "gen://docs?n=300&seed=5", uri, *docs)
    snap("docs-load", uri)
    d = base / "json"
    write_json_dir(generate_docs(5, 1000, 120), d)
    (d / "1500.json").write_bytes(b'{"text": "a", "created_at": 1')
    cli("load", d, uri, "--layout", "docs", "--on-bad-file", "skip", *docs)
    snap("docs-load-skip", uri)
    e = base / "cron"
    write_json_dir(generate_docs(5, 2000, 90), e)
    cli("ingest", uri, "--from", e, *docs)
    snap("docs-ingest", uri)
    assert cli("load", "gen://docs?n=2000&seed=5&start=3000", uri, *docs, fault="checkpoint:3", ok=False) != 0
    snap("docs-killed", uri)
    cli("load", "gen://docs?n=2000&seed=5&start=3000", uri, *docs)
    snap("docs-resumed", uri)
    with loader.open(uri):
        cli("compact", uri, "--target-batch-records", "200", "--workers", "2")
        snap("docs-compact-garbage", uri)


SCENARIOS = (fixed_loads, fixed_ingest, documents)


def run_all(base: Path, snap) -> None:
    for scenario in SCENARIOS:
        where = base / scenario.__name__
        where.mkdir(parents=True)
        scenario(where, snap)
