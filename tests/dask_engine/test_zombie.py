"""A zombie attempt end to end: a Dask worker process (`dask worker --no-nanny`, so no
nanny restarts it) is paused with SIGSTOP while it writes a load task; the scheduler
declares it dead (worker-ttl) and starts the task again on another worker; then the
paused process is continued and keeps writing. At most one attempt writes at a time -
the retry waits for the zombie's lease lock; the zombie stops at its next message (the
retry took its lease) without sending it - and the result equals an undisturbed run,
verifies, and the retry is counted."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import loader
from loader.api.engine import engine_for

from .cluster import dataset_state, lease_holders, pending_rows, run_in_thread, same_state

DASK = str(Path(sys.executable).parent / "dask")
SOURCE = "gen://scidb96?n=200000&start=1"
OPTS = dict(shards=2, workers=2, batch_records=500, checkpoint_seconds=0)


@pytest.fixture(scope="module")
def cluster():
    """A scheduler (here, worker-ttl 3 s) and three worker processes without nannies."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=0, processes=True, dashboard_address=None, scheduler_kwargs={"worker_ttl": "3s"}) as c,
        Client(c) as client,
    ):
        procs = [
            subprocess.Popen(
                [
                    DASK,
                    "worker",
                    c.scheduler_address,
                    "--no-nanny",
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                    "--name",
                    f"z{i}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for i in range(3)
        ]
        try:
            client.wait_for_workers(3, timeout=120)
            yield client, procs
        finally:
            for p in procs:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, sig)
                p.wait(30)


def want_files(root) -> dict:
    leases = os.path.join(root, ".leases")
    out = {}
    for name in os.listdir(leases) if os.path.isdir(leases) else ():
        if name.endswith(".want"):
            with contextlib.suppress(FileNotFoundError):
                out[name] = Path(leases, name).read_text()
    return out


def test_a_paused_attempt_that_resumes_after_its_retry_started_changes_nothing(tmp_path, cluster):
    client, procs = cluster
    ref = f"lmdb://{tmp_path}/ref"
    loader.load(SOURCE, ref, shards=2, workers=2, batch_records=500)
    uri, root = f"lmdb://{tmp_path}/ds", str(tmp_path / "ds")
    paused = None
    with engine_for(uri, client=client) as ex:
        thread, out = run_in_thread(lambda: loader.load(SOURCE, uri, **OPTS))
        try:
            deadline = time.monotonic() + 60
            while paused is None:
                assert thread.is_alive(), "the load ended before a worker could be paused: make it longer"
                assert time.monotonic() < deadline
                holders = lease_holders(root) if pending_rows(root) >= 4 else {}
                if holders:
                    lock, paused = sorted(holders.items())[0]
                    assert paused in [p.pid for p in procs]
                    before = want_files(root)
                    os.kill(paused, signal.SIGSTOP)
                time.sleep(0.005)
            want = os.path.basename(lock)[: -len(".lock")] + ".want"
            # the scheduler gives up on the paused worker and a retry takes the task's lease
            deadline = time.monotonic() + 60
            while want_files(root).get(want) == before[want]:
                assert time.monotonic() < deadline, "Dask never started the task again"
                time.sleep(0.05)
            time.sleep(0.5)  # the subject: the retry keeps waiting for the zombie's lock a while
            assert lease_holders(root).get(lock) == paused
            assert ex.retried == 0  # the retry waits for the zombie's lock: one writer at a time
            written = {f: os.path.getsize(f) for f in Path(root).glob("shard*/data.mdb")}
        finally:
            if paused is not None:
                os.kill(paused, signal.SIGCONT)  # the zombie goes on writing until its next message
        thread.join(120)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    assert out["value"].records == 200000
    assert ex.retried >= 1
    assert written  # the shards existed while both attempts lived
    same_state(dataset_state(ref), dataset_state(uri))
