"""A Dask worker process SIGKILLed in the middle of a run (its pid, not its nanny's): Dask
reruns its task, the retry resumes after the batches the dead attempt reported durable,
the run completes byte-identical to an undisturbed local run, verify passes, and the
engine counts the retry. (Zombie attempts: test_fencing.py.)"""

import os
import signal
import time

import pytest

import loader
from loader.api.engine import engine_for

from .cluster import dataset_state, local_cluster, pending_rows, run_in_thread, same_state

SOURCE = "gen://scidb96?n=120000&start=3"
OPTS = dict(shards=2, workers=2, batch_records=500)


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(2) as (client, c):
        yield client, c


def kill_a_busy_worker(client, ex, ready, thread, timeout=60):
    """Once ``ready()``, SIGKILL the process of a Dask worker that started an attempt;
    its pid (client.run), not its nanny's. Returns the pid killed."""
    deadline = time.monotonic() + timeout
    while not (ready() and ex.workers):
        assert thread.is_alive(), "the run ended before a worker could be killed: make it longer"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    pids = client.run(os.getpid)
    pid = pids[sorted(ex.workers)[0]]
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    return pid


def test_worker_killed_mid_load_is_retried_and_the_result_is_identical(tmp_path, cluster):
    client, _ = cluster
    ref = f"lmdb://{tmp_path}/ref"
    loader.load(SOURCE, ref, **OPTS)
    uri, root = f"lmdb://{tmp_path}/ds", str(tmp_path / "ds")
    with engine_for(uri, client=client) as ex:
        thread, out = run_in_thread(lambda: loader.load(SOURCE, uri, checkpoint_seconds=0, **OPTS))
        kill_a_busy_worker(client, ex, lambda: pending_rows(root) >= 4, thread)
        thread.join(120)
    assert "error" not in out, out.get("error")
    assert out["value"].records == 120000
    assert ex.retried >= 1
    same_state(dataset_state(ref), dataset_state(uri))
    client.wait_for_workers(2, timeout=120)
