"""Runs in the manifest, re-runs (nothing to do / --new-run), --replace, stale arrays,
stdin runs, and the dataset lock with readers."""

import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import manifest_json, run_cli, tool, write_manifest_json

import loader
from loader.errors import ChangedInputError, DatasetBusyError, DatasetReplacedError
from loader.infra.lock import DatasetLock
from loader.model.layouts import get_layout
from loader.sources.generators import generate

LAY = get_layout("scidb96")


def gen_bytes(start, n):
    return generate(LAY, start, n, impl="c").tobytes()


def manifest(tmp_path, name="ds"):
    return manifest_json(tmp_path / name)


def test_every_load_is_a_run_and_info_lists_them(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    rep = loader.load("gen://scidb96?n=3000", uri, batch_records=1000, shards=2)
    assert rep.status == "loaded" and rep.records == 3000
    p = run_cli("info", uri, "--json")
    runs = json.loads(p.stdout)["runs"]
    assert len(runs) == 1
    r = runs[0]
    assert (r["kind"], r["status"], r["records"], r["batches"], r["source"]) == (
        "load",
        "done",
        3000,
        3,
        "gen://scidb96?n=3000&start=0",
    )
    assert r["started"] <= r["ended"] and r["id"] == rep.run_id and "pending" not in r
    p = run_cli("info", uri)
    assert p.returncode == 0 and rep.run_id in p.stdout and "done" in p.stdout


def test_rerun_of_a_finished_load_loads_nothing_and_new_run_loads_again(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    args = ["load", "gen://scidb96?n=2500&start=3", uri, "--batch-records", 1000]
    assert run_cli(*args).returncode == 0
    before = manifest(tmp_path)
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr
    assert "0 new records" in p.stdout and "already loaded" in p.stdout and "--new-run" in p.stdout
    assert manifest(tmp_path) == before  # nothing was written
    rep = json.loads(run_cli(*args, "--json").stdout)
    assert (rep["status"], rep["records"], rep["run_id"]) == ("already-loaded", 0, before["runs"][0]["id"])
    p = run_cli(*args, "--new-run", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["records"] == 2500
    with loader.open(uri) as ds:
        assert ds.records == 5000
        assert ds.read_records(2500, 5000).tobytes() == gen_bytes(3, 2500)  # numbering continued
        assert [r["status"] for r in ds.info()["runs"]] == ["done", "done"]


def test_a_changed_file_is_refused_until_new_run(tmp_path):
    """(Was: a changed file is silently another source - loaded again, duplicating what it
    still shares with the loaded one. Now refused; see tests/system/test_integrity.py.)"""
    uri = f"lmdb://{tmp_path}/ds"
    f = tmp_path / "x.bin"
    f.write_bytes(gen_bytes(0, 1000))
    assert loader.load(str(f), uri).records == 1000
    assert loader.load(str(f), uri).status == "already-loaded"
    f.write_bytes(gen_bytes(0, 999) + gen_bytes(5, 1))  # same size, other content
    with pytest.raises(ChangedInputError, match=r"changed since run .* loaded it"):
        loader.load(str(f), uri)
    rep = loader.load(str(f), uri, new_run=True)
    assert rep.status == "loaded" and rep.records == 1000
    with loader.open(uri) as ds:
        assert ds.records == 2000


def test_stdin_loads_are_always_new_runs(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    data = gen_bytes(0, 1500)
    for _ in range(2):
        p = run_cli("load", "-", uri, "--batch-records", 1000, input=data)
        assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert ds.records == 3000 and ds.read_records(1500, 3000).tobytes() == data
        runs = ds.info()["runs"]
        assert [r["source"] for r in runs] == ["-", "-"] and all(not r.get("resumable") for r in runs)


def test_a_crashed_stdin_load_commits_nothing_and_is_not_resumed(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100", uri, batch_records=100)
    env = dict(os.environ, BULKLOAD_FAULT="checkpoint:2", BULKLOAD_CHECKPOINT_SECONDS="0")
    p = subprocess.run(
        [tool("bulkload"), "load", "-", uri, "--batch-records", "100", "-q"],
        input=gen_bytes(100, 2000),
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == -signal.SIGKILL
    with loader.open(uri) as ds:
        assert ds.records == 100 and ds.verify().ok
    p = run_cli("load", "-", uri, "--batch-records", 100, input=gen_bytes(100, 2000))
    assert p.returncode == 0
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == gen_bytes(0, 2100)
        assert [r["status"] for r in ds.info()["runs"]] == ["done", "interrupted", "done"]


# --- --replace -----------------------------------------------------------------------------


def test_replace_starts_over_atomically_and_old_readers_keep_reading(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=4000", uri, batch_records=1000, shards=2)
    old = loader.open(uri)
    assert old.read_records(0, 10).tobytes() == gen_bytes(0, 10)  # shard 0 is open, shard 1 not yet
    lazy = loader.open(uri)
    rep = loader.load("gen://scidb96?n=1500&start=77", uri, replace=True, format="arrow", batch_records=500)
    assert rep.status == "loaded" and rep.records == 1500
    # a reader with open shards still reads its snapshot; one opening a shard now is told
    assert old.read_records(0, 1000).tobytes() == gen_bytes(0, 1000)
    with pytest.raises(DatasetReplacedError, match=r"was replaced .* open it again"):
        lazy.read_records(0, 10)
    old.close()
    lazy.close()
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == gen_bytes(77, 1500)
        assert ds.manifest.format == "arrow" and ds.verify().ok
        runs = ds.info()["runs"]
        assert [(r["kind"], bool(r.get("replace"))) for r in runs] == [("load", False), ("load", True)]
    assert sorted(os.listdir(tmp_path)) == ["ds"]
    # the old dataset's history does not count as "already loaded"
    assert loader.load("gen://scidb96?n=4000", uri).status == "loaded"
    # and replacing with the same source again is a no-op only for the current content
    assert loader.load("gen://scidb96?n=4000", uri, replace=True).records == 4000


def test_info_shows_the_runs_a_replace_started_over_as_replaced(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    for args in (
        ["gen://scidb96?n=300"],
        ["gen://scidb96?n=200&start=300"],
        ["gen://scidb96?n=50", "--replace"],
        ["gen://scidb96?n=5&start=50"],
    ):
        assert run_cli("load", args[0], uri, *args[1:], "-q").returncode == 0
    runs = json.loads(run_cli("info", uri, "--json").stdout)["runs"]
    assert [r["status"] for r in runs] == ["replaced", "replaced", "done", "done"]
    assert [r["status"] for r in manifest(tmp_path)["runs"]] == ["done"] * 4  # shown so, never stored
    text = run_cli("info", uri).stdout
    assert text.count(" replaced ") == 2 and text.count(" done ") == 2, text


def test_replace_of_a_missing_dataset_creates_it(tmp_path):
    uri = f"rocksdb://{tmp_path}/ds"
    p = run_cli("load", "gen://scidb96?n=100", uri, "--replace", "--json")
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == gen_bytes(0, 100)


def test_append_marks_finalized_arrays_stale(tmp_path):
    redim = pytest.importorskip("loader.arrays.finalize")
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=2000", uri, batch_records=500, shards=1, workers=1)
    redim.finalize(uri, dims="i0:10,i1:1000", workers=1)
    assert "stale" not in manifest(tmp_path)["arrays"]["grid"]
    loader.load("gen://scidb96?n=1000&start=2000", uri, batch_records=500)
    assert manifest(tmp_path)["arrays"]["grid"]["stale"] is True
    redim.finalize(uri, dims="i0:10,i1:1000", workers=1)
    assert not manifest(tmp_path)["arrays"]["grid"].get("stale")


def test_unknown_manifest_keys_survive_a_write(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100", uri)
    m = manifest(tmp_path)
    m["future_key"] = {"x": 1}
    write_manifest_json(tmp_path / "ds", m)
    loader.load("gen://scidb96?n=100&start=100", uri)
    assert manifest(tmp_path)["future_key"] == {"x": 1}


# --- locks and readers ------------------------------------------------------------------------

HOLDER = r"""
import sys, time
from loader.infra.lock import DatasetLock
with DatasetLock(sys.argv[1]) as lock:
    lock.set_job("test holder")
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_dead_holders_lock_is_taken_over(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100", uri)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "ds")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    p = run_cli("load", "gen://scidb96?n=100&start=100", uri)
    assert p.returncode == 3
    assert f"dataset locked by pid {holder.pid} on host" in p.stderr and "(test holder)" in p.stderr
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # the kernel released the flock with the process: the next job takes it at once
    p = run_cli("load", "gen://scidb96?n=100&start=100", uri)
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == gen_bytes(0, 200)
    with DatasetLock(str(tmp_path / "ds")), pytest.raises(DatasetBusyError):  # and it was released again
        DatasetLock(str(tmp_path / "ds")).acquire()


POLLER = r"""
import json, sys, time, loader
uri, final = sys.argv[1], int(sys.argv[2])
states, t0 = [], time.time()
while time.time() - t0 < 60:
    t = time.time()
    with loader.open(uri) as ds:
        n = ds.records
        rep = ds.verify()
        assert rep.ok, rep.problems
        tail = ds.read_records(max(0, n - 7), n)
    states.append([n, time.time() - t, tail.tobytes().hex()[:64]])
    if n >= final:
        break
print(json.dumps(states))
"""


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_readers_are_never_blocked_and_see_only_committed_state(tmp_path, scheme):
    uri = f"{scheme}://{tmp_path}/ds"
    loader.load("gen://scidb96?n=1000", uri, batch_records=1000, shards=2)
    poller = subprocess.Popen(
        [sys.executable, "-c", POLLER, uri, "31000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    # a slow ingest-like job: three runs, checkpointing every batch
    for i in range(3):
        loader.load(f"gen://scidb96?n=10000&start={1000 + i * 10000}", uri, checkpoint_seconds=0)
    out, err = poller.communicate(timeout=90)
    assert poller.returncode == 0, err
    states = json.loads(out)
    counts = [n for n, _, _ in states]
    assert set(counts) <= {1000, 11000, 21000, 31000}  # whole runs only, never a partial one
    assert counts == sorted(counts) and counts[-1] == 31000
    assert max(dt for _, dt, _ in states) < 10  # never waited for the writer
    for n, _, head in states:
        assert head == gen_bytes(n - 7, 7).hex()[:64]


def test_info_shows_a_window_of_the_last_runs_with_counts_of_all(tmp_path):
    """`info` reads the last 20 runs, whatever the history's length, and counts all of
    them by status from the catalog's aggregates; replaced runs inside the window are
    still shown `replaced`."""
    uri = f"lmdb://{tmp_path}/ds"
    for i in range(23):
        loader.load(f"gen://scidb96?n=10&start={10 * i}", uri, shards=1, progress="none")
    loader.load("gen://scidb96?n=5", uri, shards=1, progress="none", replace=True)
    loader.load("gen://scidb96?n=5&start=5", uri, shards=1, progress="none")
    d = json.loads(run_cli("info", uri, "--json").stdout)
    every = [r.id for r in reversed(loader.runs(uri))]  # newest first -> oldest first
    assert d["runs_total"] == 25 and d["runs_by_status"] == {"done": 25}
    assert [r["id"] for r in d["runs"]] == every[-20:]
    assert [r["status"] for r in d["runs"]] == ["replaced"] * 18 + ["done", "done"]
    assert "runs (the last 20 of 25" in run_cli("info", uri).stdout
