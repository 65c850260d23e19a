"""Nothing to do writes nothing: an idle `compact` (no small batches, compact shards) and
a `finalize` of an array that is up to date leave the manifest (bytes and mtime), every
shard file and the run list as they were, and say "nothing to do" (exit 0, ``--json``
``status``). Also as the idle ticks of a pipeline. Real CLI, real stores."""

import json
import os
import time

import pytest
from helpers import run_cli

import loader

DIMS = "i0:10,i1:1000"
#: files every open of a shard may rewrite without changing data: LMDB's reader lock
#: table and bulkload's writer lock record (the pid of the last writer to open it),
#: rocksdict's own config (written on every open, read-only ones too)
NOT_DATA = {"lock.mdb", "writer.lock", "rocksdict-config.json"}


def state(path) -> dict:
    """The manifest's bytes and mtime, and every shard, array and catalog file's mtime and size."""
    out = {"manifest": ((path / "manifest.json").read_bytes(), os.stat(path / "manifest.json").st_mtime_ns)}
    for d, _, names in os.walk(path):
        rel = os.path.relpath(d, path)
        if rel.startswith(("shard-", "arrays", "catalog")):
            for n in names:
                if n not in NOT_DATA:
                    st = os.stat(os.path.join(d, n))
                    out[os.path.join(rel, n)] = (st.st_mtime_ns, st.st_size)
    return out


def runs_of(uri) -> list:
    with loader.open(uri) as ds:
        return [(r["kind"], r["status"]) for r in ds.info()["runs"]]


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_idle_compact_and_finalize_of_an_up_to_date_array_write_nothing(tmp_path, scheme):
    path = tmp_path / "ds"
    uri = f"{scheme}://{path}"
    for i in range(3):  # three small batches: the first compaction merges them
        assert run_cli("load", f"gen://scidb96?n=300&start={300 * i}", uri, "-q").returncode == 0
    p = run_cli("finalize", uri, "--dims", DIMS, "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["status"] == "done" and json.loads(p.stdout)["compact"]["status"] == "done"
    runs, before = runs_of(uri), state(path)
    time.sleep(0.01)  # the subject: a rewrite after this would show a later mtime
    for args in (
        ["compact", uri],
        ["finalize", uri, "--dims", DIMS],
        ["finalize", uri, "--dims", DIMS, "--no-compact"],
    ):
        p = run_cli(*args, "--json")
        assert p.returncode == 0, p.stderr
        rep = json.loads(p.stdout)
        assert rep["status"] == "nothing-to-do" and rep["run_id"] is None, rep
        p = run_cli(*args)
        assert p.returncode == 0 and p.stdout.startswith("nothing to do:"), p.stdout + p.stderr
        assert state(path) == before and runs_of(uri) == runs
    # what changes the array makes finalize build again: other chunks, an append
    p = run_cli("finalize", uri, "--dims", "i0:10,i1:500", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["status"] == "done", p.stderr
    assert run_cli("load", "gen://scidb96?n=10&start=900", uri, "-q").returncode == 0
    p = run_cli("finalize", uri, "--dims", "i0:10,i1:500", "--no-compact", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["status"] == "done", p.stderr
    p = run_cli("finalize", uri, "--dims", "i0:10,i1:500", "--no-compact", "--force", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["status"] == "done", p.stderr
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.manifest.arrays["grid"]["cells"] == 910


def test_idle_pipeline_ticks_add_no_runs(tmp_path):
    path = tmp_path / "ds"
    f = tmp_path / "job.toml"
    f.write_text(
        f'[job]\ndataset = "lmdb://{path}"\nquiet = true\n[load]\nsource = "gen://scidb96?n=3000"\n'
        f'[compact]\n[finalize]\ndims = "{DIMS}"\n'
    )
    assert run_cli("run", f).returncode == 0
    runs, before = runs_of(f"lmdb://{path}"), state(path)
    for _ in range(3):
        p = run_cli("run", f)
        assert p.returncode == 0, p.stderr
        assert runs_of(f"lmdb://{path}") == runs and state(path) == before
