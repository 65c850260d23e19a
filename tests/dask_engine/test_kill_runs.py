"""A Dask worker process SIGKILLed while it runs a task of an ingest (files of records,
and documents) or of a finalize (its scan and its build phase): the run completes with a
retry, the dataset is byte-identical to an undisturbed local run and verifies, and the
engine's report counts the retry. The process killed is the one holding the task's lease
(its flock, /proc/locks): the worker process itself, not its nanny. (Loads: test_worker_loss.py.)"""

import glob
import os

import pytest
from helpers import stored_docs

import loader
from loader.api.engine import engine_for, engine_info
from loader.docs.gen import generate_docs
from loader.docs.json_dir import write_json_dir
from loader.sources.generators import generate

from .cluster import dataset_state, kill_an_attempt, local_cluster, pending_rows, run_in_thread, same_state

DIMS = "i0:10,i1:1000"


@pytest.fixture(scope="module")
def client():
    with local_cluster(2) as (c, _):
        yield c


def killed_run(client, uri, root, run, ready):
    """``run()`` on Dask with one worker process killed once ``ready()``; its engine report."""
    with engine_for(uri, client=client) as ex:
        thread, out = run_in_thread(run)
        kill_an_attempt(root, ready, thread)
        thread.join(120)
    assert not thread.is_alive()
    assert "error" not in out, out.get("error")
    used = engine_info(ex)
    assert used["tasks_retried"] >= 1, used
    client.wait_for_workers(2, timeout=120)  # the nanny restarts it (slow on a busy machine): two again
    return out["value"], used


def test_worker_killed_mid_ingest_of_files(tmp_path, client):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(4):
        (src / f"f{i}.bin").write_bytes(generate("scidb96", 30000 * i, 30000).tobytes())
    opts = dict(shards=2, workers=2, batch_records=500, checkpoint_seconds=0)
    ref = f"rocksdb://{tmp_path}/ref"
    loader.ingest(ref, str(src), **opts)
    uri, root = f"rocksdb://{tmp_path}/ds", str(tmp_path / "ds")
    rep, _ = killed_run(
        client, uri, root, lambda: loader.ingest(uri, str(src), **opts), lambda: pending_rows(root) >= 4
    )
    assert rep.records == 120000 and len(rep.files) == 4
    same_state(dataset_state(ref, arrays=False), dataset_state(uri, arrays=False))


def test_worker_killed_mid_ingest_of_documents(tmp_path, client):
    src = tmp_path / "in"
    write_json_dir(generate_docs(5, 0, 6000), str(src))
    opts = dict(layout="docs", shards=2, workers=2, batch_records=50, checkpoint_seconds=0)
    ref = f"lmdb://{tmp_path}/ref"
    loader.ingest(ref, str(src), **opts)
    uri, root = f"lmdb://{tmp_path}/ds", str(tmp_path / "ds")
    rep, _ = killed_run(
        client, uri, root, lambda: loader.ingest(uri, str(src), **opts), lambda: pending_rows(root) >= 4
    )
    assert len(rep.files) == 6000
    assert stored_docs(ref)[:2] == stored_docs(uri)[:2]


def scanned(root) -> bool:
    """The finalize's scan phase is done (every scan task wrote its entries): build is next."""
    return bool(glob.glob(os.path.join(root, ".finalize-*", "scan-*.entries")))


@pytest.mark.parametrize("phase", ["scan", "build"])
def test_worker_killed_mid_finalize(tmp_path, client, phase):
    """A killed build task leaves a half-written table that no manifest names; its retry
    drops it and writes its shards' chunks again (build.py), so nothing half-built is
    ever visible and the array equals an undisturbed build."""
    uris = {e: f"lmdb://{tmp_path}/{e}" for e in ("ref", "ds")}
    for uri in uris.values():
        loader.load("gen://scidb96?n=300000&start=11", uri, shards=2, workers=2, batch_records=5000)
    loader.finalize(uris["ref"], dims=DIMS, workers=2)
    root = str(tmp_path / "ds")
    ready = (lambda: glob.glob(os.path.join(root, ".finalize-*"))) if phase == "scan" else (lambda: scanned(root))
    rep, _ = killed_run(client, uris["ds"], root, lambda: loader.finalize(uris["ds"], dims=DIMS, workers=2), ready)
    assert rep.cells == 300000
    same_state(dataset_state(uris["ref"]), dataset_state(uris["ds"]))
