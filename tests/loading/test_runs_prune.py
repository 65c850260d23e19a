"""Runs you can list and bound (issue 29): `bulkload runs`, `bulkload runs prune`,
`loader.runs` / `loader.prune_runs`, ``[job] keep_runs`` and ``--keep-runs``.

Pruning never breaks: resume (an interrupted load resumes after a prune), exactly-once
(a file ingested or loaded long ago is still recognised), a pinned reader, verify; it is
a writer (busy: exit 3) whose write is atomic (a kill leaves the old or the new list).
Run lists are read through the API (never manifest.json), so the tests hold on any
catalog storage."""

import json
import os
import signal
import subprocess
import time

import pytest
from helpers import run_cli, tool

import loader
from loader.errors import DatasetBusyError, DatasetNotFoundError, UsageError
from loader.infra.lock import DatasetLock
from loader.model.layouts import get_layout
from loader.sources.generators import generate

LAY = get_layout("scidb96")
SMALL = dict(batch_records=100, shards=1, workers=1)


def gen_bytes(start, n):
    return generate(LAY, start, n, impl="c").tobytes()


def ids(uri, **filters):
    return [r.id for r in loader.runs(uri, **filters)]


def grow(path, start, n):
    """Append records start..start+n-1 to the file ``path``."""
    with open(path, "ab") as f:
        f.write(gen_bytes(start, n))


def appended_loads(tmp_path, uri, count, n=50):
    """``count`` loads of one growing file (each appends ``n`` records); the file's path."""
    f = tmp_path / "grow.bin"
    for i in range(count):
        grow(f, i * n, n)
        rep = loader.load(str(f), uri, **SMALL)
        assert rep.records == n
    return f


# --- listing ------------------------------------------------------------------------------------


def test_python_api_refuses_bad_values_before_opening_the_dataset(tmp_path):
    with pytest.raises(UsageError, match="--since"):
        loader.runs(f"lmdb://{tmp_path}/none", since="last week")
    with pytest.raises(UsageError, match="--keep"):
        loader.prune_runs(f"lmdb://{tmp_path}/none", keep=-1)
    assert not os.path.exists(tmp_path / "none")


# --- pruning ------------------------------------------------------------------------------------


def test_prune_by_count_keeps_the_newest(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 6)
    before = ids(uri)
    rep = loader.prune_runs(uri, keep=2, dry_run=True)
    assert [r["id"] for r in rep.removed] == before[:1:-1] and ids(uri) == before  # dry run: nothing written
    p = run_cli("runs", "prune", uri, "--keep", 2)
    assert p.returncode == 0, p.stderr
    assert "removed 4 run record(s), kept 2" in p.stdout and all(i in p.stdout for i in before[2:])
    assert ids(uri) == before[:2]
    with loader.open(uri) as ds:
        assert ds.records == 300 and ds.read_records().tobytes() == gen_bytes(0, 300)


def test_prune_by_age_removes_only_runs_that_ended_before(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    f = appended_loads(tmp_path, uri, 3)
    time.sleep(0.05)  # the subject: runs that ended before the cutoff, and after it
    cutoff = time.time()
    time.sleep(0.05)
    grow(f, 150, 50)
    loader.load(str(f), uri, **SMALL)
    old = ids(uri)[1:]
    assert loader.prune_runs(uri, older_than="30d").removed == []
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(cutoff)) + f"{cutoff % 1:.3f}"[1:] + "+00:00"
    p = run_cli("runs", "prune", uri, "--older-than", iso, "--json")
    assert p.returncode == 0, p.stderr
    assert sorted(r["id"] for r in json.loads(p.stdout)["removed"]) == sorted(old)
    assert len(ids(uri)) == 1


def test_an_interrupted_load_resumes_after_pruning(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 3)
    args = ["load", "gen://scidb96?n=3000&start=500", uri, "--batch-records", 100, "-q"]
    env = dict(os.environ, BULKLOAD_FAULT="checkpoint:3", BULKLOAD_CHECKPOINT_SECONDS="0")
    p = subprocess.run([tool("bulkload"), *map(str, args)], capture_output=True, env=env, timeout=120)
    assert p.returncode == -signal.SIGKILL
    killed = ids(uri)[0]
    p = run_cli("runs", "prune", uri, "--keep", 0, "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert {x["id"]: x["reason"] for x in rep["protected"]}[killed].startswith("interrupted and resumable")
    assert killed in ids(uri) and len(rep["removed"]) == 2  # the file's newest run stays too
    p = run_cli(*args[:-1], "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["status"] == "resumed" and out["run_id"] == killed and out["resumed_records"] > 0
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.records == 3150
        assert ds.read_records(150, 3150).tobytes() == gen_bytes(500, 3000)


def test_a_source_loaded_long_ago_is_still_recognised_after_pruning(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100&start=1000", uri, **SMALL)
    f = appended_loads(tmp_path, uri, 4)
    loader.prune_runs(uri, keep=0)
    assert len(ids(uri)) == 2  # the newest run of each source
    assert loader.load("gen://scidb96?n=100&start=1000", uri, **SMALL).status == "already-loaded"
    assert loader.load(str(f), uri, **SMALL).status == "already-loaded"
    grow(f, 200, 30)
    rep = loader.load(str(f), uri, **SMALL)
    assert (rep.status, rep.records) == ("appended", 30)
    with loader.open(uri) as ds:
        assert ds.records == 330 and ds.read_records(100, 330).tobytes() == gen_bytes(0, 230)


def test_a_file_ingested_long_ago_is_still_skipped_after_pruning(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    d = tmp_path / "in"
    d.mkdir()
    for i in range(5):
        (d / f"f{i}.bin").write_bytes(gen_bytes(i * 40, 40))
        loader.ingest(uri, str(d), pattern="*.bin", **SMALL)
    assert len(ids(uri)) == 5
    rep = loader.prune_runs(uri, keep=1)
    assert len(rep.removed) == 4 and len(ids(uri)) == 1
    rep = loader.ingest(uri, str(d), pattern="*.bin", **SMALL)
    assert rep.records == 0 and rep.already == 5
    p = run_cli("ingest", uri, "--from", d, "--pattern", "*.bin", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["already"] == 5
    with loader.open(uri) as ds:
        assert ds.records == 200 and ds.read_records().tobytes() == gen_bytes(0, 200)


def test_a_pruned_dataset_verifies_and_a_pinned_reader_reads_on(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 5)
    reader = loader.open(uri)
    try:
        assert reader.read_records(0, 10).tobytes() == gen_bytes(0, 10)
        p = run_cli("runs", "prune", uri, "--keep", 1)
        assert p.returncode == 0, p.stderr
        assert reader.read_records().tobytes() == gen_bytes(0, 250)
    finally:
        reader.close()
    p = run_cli("verify", uri)
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert ds.records == 250 and len(ds.info()["runs"]) == 1


def test_prune_of_a_busy_dataset_exits_3(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 3)
    with DatasetLock(str(tmp_path / "ds")):
        p = run_cli("runs", "prune", uri, "--keep", 1)
        assert p.returncode == 3 and len(p.stderr.strip().splitlines()) == 1 and "locked" in p.stderr
        with pytest.raises(DatasetBusyError):
            loader.prune_runs(uri, keep=1, dry_run=True)
        assert run_cli("runs", uri).returncode == 0  # listing reads: never busy
    assert len(ids(uri)) == 3


@pytest.mark.parametrize("point,survives", [("save:1", "old"), ("saved:1", "new")])
def test_a_kill_during_prune_leaves_the_old_or_the_new_list(tmp_path, point, survives):
    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 4)
    before = ids(uri)
    p = run_cli("runs", "prune", uri, "--keep", 1, env={"BULKLOAD_FAULT": point})
    assert p.returncode == -signal.SIGKILL
    assert ids(uri) == (before if survives == "old" else before[:1])
    assert run_cli("verify", uri).returncode == 0
    assert not [n for n in os.listdir(tmp_path / "ds") if ".tmp-" in n]


def test_prune_keeps_the_last_replace_and_drops_the_replaced_history(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100&start=3", uri, **SMALL)
    loader.load("gen://scidb96?n=100&start=900", uri, **SMALL)
    loader.load("gen://scidb96?n=50", uri, replace=True, **SMALL)
    f = appended_loads(tmp_path, uri, 3)
    rep = loader.prune_runs(uri, keep=0)
    statuses = {r.id: r.status for r in loader.runs(uri)}
    assert "replaced" not in statuses.values() and len(rep.removed) == 4
    assert any("--replace" in p["reason"] for p in rep.protected)
    # the history is forgotten, the current content still recognised
    assert loader.load("gen://scidb96?n=50", uri, **SMALL).status == "already-loaded"
    assert loader.load(str(f), uri, **SMALL).status == "already-loaded"
    assert loader.load("gen://scidb96?n=100&start=900", uri, **SMALL).status == "loaded"
    with loader.open(uri) as ds:
        assert ds.records == 300 and ds.verify().ok


def test_a_compaction_after_a_resumable_run_is_kept(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 3)
    env = dict(os.environ, BULKLOAD_FAULT="checkpoint:3", BULKLOAD_CHECKPOINT_SECONDS="0")
    args = ["load", "gen://scidb96?n=2000&start=500", uri, "--batch-records", 100, "-q"]
    assert subprocess.run([tool("bulkload"), *map(str, args)], env=env, timeout=120).returncode == -signal.SIGKILL
    loader.compact(uri, force=True)
    compact_id = ids(uri, kind="compact")[0]
    rep = loader.prune_runs(uri, keep=0)
    assert compact_id in ids(uri) and "compaction" in {p["id"]: p["reason"] for p in rep.protected}[compact_id]
    # so the interrupted run is (still) not resumed onto the compacted stores
    p = run_cli(*args[:-1], "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["status"] != "resumed"
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.read_records(150, 2150).tobytes() == gen_bytes(500, 2000)


# --- keep_runs: a cron job's run list stays bounded -------------------------------------------


def test_a_cron_loop_with_keep_runs_stays_bounded(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    f = tmp_path / "grow.bin"
    p = tmp_path / "cron.toml"
    p.write_text(
        f'[job]\ndataset = "{uri}"\nshards = 1\nworkers = 1\nbatch_records = 10\nkeep_runs = 10\nquiet = true\n'
        f'[load]\nsource = "{f}"\n'
    )
    d = tmp_path / "in"
    d.mkdir()
    for i in range(50):
        grow(f, i * 10, 10)
        rep = loader.run(str(p))
        assert rep.steps[-1]["step"] == "prune"
        assert len(loader.runs(uri)) == min(i + 1, 10), i
    # the same with the CLI's --keep-runs, on an ingest of a new file each tick
    ing = f"lmdb://{tmp_path}/ing"
    for i in range(5):
        (d / f"{i:03d}.bin").write_bytes(gen_bytes(i * 5, 5))
        q = run_cli(
            "ingest",
            ing,
            "--from",
            d,
            "--pattern",
            "*.bin",
            "--keep-runs",
            2,
            "-q",
            "--batch-records",
            10,
            "--shards",
            1,
            "--workers",
            1,
        )
        assert q.returncode == 0, q.stderr
        assert len(loader.runs(ing)) == min(i + 1, 2)
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.read_records().tobytes() == gen_bytes(0, 500)
    with loader.open(ing) as ds:
        assert ds.read_records().tobytes() == gen_bytes(0, 25)


def test_pipeline_keep_runs_is_checked_before_any_step(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    p = tmp_path / "p.toml"
    p.write_text(f'[job]\ndataset = "{uri}"\nkeep_runs = -2\n[load]\nsource = "gen://scidb96?n=10"\n')
    q = run_cli("run", p)
    assert q.returncode == 2 and "line 3" in q.stderr and "keep_runs" in q.stderr, q.stderr
    with pytest.raises(DatasetNotFoundError):  # nothing was run
        loader.runs(uri)


def test_prune_with_keep_and_older_than_drops_only_runs_outside_both(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 4)
    before = ids(uri)
    rep = loader.prune_runs(uri, keep=3, older_than=time.time() + 60)
    assert [r["id"] for r in rep.removed] == before[3:] and ids(uri) == before[:3]
    rep = loader.prune_runs(uri, keep=1, older_than="1h")  # every run is newer than an hour
    assert rep.removed == [] and ids(uri) == before[:3]


def test_finalize_and_compact_runs_are_pruned_and_the_arrays_stay(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 2, n=500)
    loader.finalize(uri, dims="i0:10,i1:1000", workers=1)
    loader.compact(uri, force=True)
    cells = loader.query(uri, "i0=0:10,i1=0:1000")
    loader.load(str(tmp_path / "grow.bin"), uri, **SMALL)  # already loaded: no run
    rep = loader.prune_runs(uri, keep=0)
    assert sorted(r["kind"] for r in rep.removed) == ["compact", "finalize", "load"]
    assert [r.kind for r in loader.runs(uri)] == ["load"]
    assert loader.query(uri, "i0=0:10,i1=0:1000").equals(cells)
    assert loader.verify(uri).ok


def test_prune_after_a_job_on_a_busy_dataset_is_a_warning(tmp_path, capfd):
    from loader.maintain.run_prune import prune_after_job

    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 3)
    with DatasetLock(str(tmp_path / "ds")):
        assert prune_after_job(uri, 1) is None
    err = capfd.readouterr().err
    assert "not pruned" in err and "the next run prunes them" in err and len(ids(uri)) == 3
    rep = loader.load("gen://scidb96?n=10&start=5000", uri, keep_runs=1, **SMALL)
    assert rep.status == "loaded" and ids(uri) == [rep.run_id, *ids(uri)[1:]] and len(ids(uri)) == 2


def test_documents_ingest_after_pruning_skips_what_it_stored_and_reports_what_was_bad(tmp_path):
    from loader.docs.gen import generate_docs
    from loader.docs.json_dir import write_json_dir

    uri, src = f"lmdb://{tmp_path}/docs", tmp_path / "in"
    kw = dict(shards=1, workers=1, batch_records=20, layout="docs")
    for i in range(4):
        write_json_dir(generate_docs(3, i * 30, 30), src)
        if i == 3:
            (src / "95.json").write_bytes(b'{"text": "a", "created_at": 1')  # bad: skipped
        loader.ingest(uri, str(src), on_bad_file="skip", **kw)
    assert len(ids(uri)) == 4
    loader.prune_runs(uri, keep=0)
    assert len(ids(uri)) == 1
    rep = loader.ingest(uri, str(src), on_bad_file="skip", **kw)
    assert (rep.status, rep.already, [s["name"] for s in rep.skipped]) == ("nothing-to-do", 119, ["95.json"])
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.records == 119


def test_a_stop_signal_during_prune_leaves_the_old_or_the_new_list(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    appended_loads(tmp_path, uri, 7, n=10)
    for k, delay in enumerate((0.05, 0.15, 0.25, 0.35, 0.5, 0.8)):
        before = ids(uri)
        keep = 6 - k
        p = subprocess.Popen(
            [tool("bulkload"), "runs", "prune", uri, "--keep", str(keep)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        after = ids(uri)
        assert after in (before, before[:keep]), (delay, p.returncode, err)
        assert p.returncode in (0, 143, -signal.SIGTERM), err
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 1
        assert not [n for n in os.listdir(tmp_path / "ds") if ".tmp-" in n]
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.records == 70
