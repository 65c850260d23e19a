"""`bulkload runs DATASET` (listing: newest first, filters, --json, statuses as `info`
shows them) and the one-line usage errors of `runs`, `runs prune` and `--keep-runs`
(issue 29). Pruning itself: tests/loading/test_runs_prune.py."""

import json
import os
import subprocess
import time

import pytest
from helpers import run_cli, tool

import loader
from loader.model.layouts import get_layout
from loader.sources.generators import generate

SMALL = dict(batch_records=100, shards=1, workers=1)


def ids(uri, **filters):
    return [r.id for r in loader.runs(uri, **filters)]


def appended_loads(tmp_path, uri, count, n=50):
    """``count`` loads of one file that grows by ``n`` records before each."""
    f = tmp_path / "grow.bin"
    for i in range(count):
        with open(f, "ab") as out:
            out.write(generate(get_layout("scidb96"), i * n, n, impl="c").tobytes())
        assert loader.load(str(f), uri, **SMALL).records == n


def test_runs_are_listed_newest_first_and_filtered(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 3)
    t_mid = time.time()
    time.sleep(0.05)  # the subject: the compaction starts after t_mid
    loader.compact(uri, force=True)
    listed = loader.runs(uri)
    assert [r.kind for r in listed] == ["compact", "load", "load", "load"]
    assert [r.started for r in listed] == sorted([r.started for r in listed], reverse=True)
    assert [r.kind for r in loader.runs(uri, kind="load")] == ["load"] * 3
    assert ids(uri, limit=2) == [r.id for r in listed[:2]]
    assert ids(uri, since=t_mid) == [listed[0].id]
    assert ids(uri, since="1h", status="done", kind="load") == [r.id for r in listed[1:]]
    assert ids(uri, status="failed") == []
    p = run_cli("runs", uri, "--json", "--kind", "load", "--limit", 2)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert [r["id"] for r in got] == [r.id for r in listed[1:3]] and got[0]["records"] == 50
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_mid)) + f"{t_mid % 1:.3f}"[1:] + "Z"
    p = run_cli("runs", uri, "--since", iso, "--json")
    assert p.returncode == 0 and [r["id"] for r in json.loads(p.stdout)] == [listed[0].id], p.stderr
    p = run_cli("runs", uri)
    lines = p.stdout.splitlines()
    assert p.returncode == 0 and lines[0].split()[:6] == ["id", "kind", "status", "started", "seconds", "records"]
    assert [ln.split()[0] for ln in lines[1:]] == [r.id for r in listed]
    # a dataset is always SCHEME://PATH: one at ./prune (or ./list) is never taken for the sub-command
    os.symlink(tmp_path / "ds", tmp_path / "prune")
    for words in (["lmdb://prune"], ["list", "lmdb://prune"]):
        p = subprocess.run(
            [tool("bulkload"), "runs", *words, "--json"], capture_output=True, text=True, cwd=tmp_path, timeout=60
        )
        assert p.returncode == 0, p.stderr
        assert [r["id"] for r in json.loads(p.stdout)] == [r.id for r in listed]


def test_runs_shows_statuses_as_info_does(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=300", uri, **SMALL)
    loader.load("gen://scidb96?n=200&start=5", uri, replace=True, **SMALL)
    assert [r.status for r in loader.runs(uri)] == ["done", "replaced"]
    assert len(ids(uri, status="replaced")) == 1
    info = [r["status"] for r in loader.info(uri)["runs"]]
    assert info == [r.status for r in reversed(loader.runs(uri))]


ARG_ERRORS = [
    (["runs", "{uri}", "--since", "yesterday"], "--since", "30d"),
    (["runs", "{uri}", "--since", "12x"], "--since", "2026-11-01T08:00:00Z"),
    (["runs", "{uri}", "--status", "ok"], "--status", "interrupted"),
    (["runs", "{uri}", "--kind", "copy"], "--kind", "finalize"),
    (["runs", "{uri}", "--limit", "0"], "--limit", "at least 1"),
    (["runs", "prune", "{uri}"], "--keep", "--older-than 30d"),
    (["runs", "prune", "{uri}", "--keep", "-1"], "--keep", "at least 0"),
    (["runs", "prune", "{uri}", "--older-than", "soon"], "--older-than", "12h"),
    (["runs", "prune", "{uri}", "--keep", "two"], "--keep", "integer"),
    (["load", "gen://scidb96?n=10&start=7", "{uri}", "--keep-runs", "-3"], "--keep-runs", "at least 0"),
]


@pytest.mark.parametrize("args,option,example", ARG_ERRORS, ids=[" ".join(a[:4]) for a, _, _ in ARG_ERRORS])
def test_bad_arguments_are_one_line_usage_errors(tmp_path, args, option, example):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100", uri, **SMALL)
    p = run_cli(*[a.format(uri=uri) for a in args])
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert option in p.stderr and example in p.stderr
    assert len(loader.runs(uri)) == 1  # nothing was loaded or pruned
