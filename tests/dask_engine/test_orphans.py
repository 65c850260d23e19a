"""A coordinator killed mid-load on Dask (SIGKILL of the `bulkload` process; the cluster
lives on): the dataset stays at its last commit, the tasks of the dead client stop - no
lease is held and no shard file changes afterwards - and the same command resumes to a
dataset byte-identical to an undisturbed run."""

import os
import signal
import subprocess
import time

import pytest
from helpers import manifest_json, tool, wait_until

import loader

from .cluster import dataset_state, lease_holders, local_cluster, pending_rows, same_state

SOURCE = "gen://scidb96?n=200000&start=5"
ARGS = ["--shards", "2", "--workers", "2", "--batch-records", "500", "-q"]


@pytest.fixture(scope="module")
def client():
    with local_cluster(2) as (c, _):
        yield c


def shard_files(root) -> dict:
    """(size, mtime) of every file of the shards: what a writer changes."""
    out = {}
    for d, _, names in os.walk(root):
        if os.path.basename(d).startswith("shard") or "shard" in d:
            for n in names:
                st = os.stat(os.path.join(d, n))
                out[os.path.join(d, n)] = (st.st_size, st.st_mtime_ns)
    return out


def test_a_killed_coordinator_leaves_the_last_commit_and_its_tasks_stop(tmp_path, client):
    ref = f"lmdb://{tmp_path}/ref"
    loader.load(SOURCE, ref, shards=2, workers=2, batch_records=500)
    uri, root = f"lmdb://{tmp_path}/ds", str(tmp_path / "ds")
    cmd = [tool("bulkload"), "--engine", "dask", "--scheduler", client.scheduler.address, "load", SOURCE, uri, *ARGS]
    env = dict(os.environ, BULKLOAD_CHECKPOINT_SECONDS="0")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(
            lambda: (pending_rows(root) >= 4 and lease_holders(root)) or p.poll() is not None,
            60,
            "the load to get under way (4 batches pending, leases held)",
        )
        assert p.poll() is None, "the load ended before it could be killed: make it longer"
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait(30)
    committed = manifest_json(root)
    at_kill = shard_files(root)
    wait_until(lambda: not lease_holders(root), 30, "the dead coordinator's tasks to give up their leases")
    grown = sum(v[0] for v in shard_files(root).values()) - sum(v[0] for v in at_kill.values())
    # they stop at their next message (a group of batches), not after their whole share (~19 MB)
    assert grown < 3_000_000, f"the orphaned tasks wrote {grown} bytes after the coordinator died"
    before = shard_files(root)
    time.sleep(1.5)  # the subject: nothing happens for a while (a stray task would write by now)
    assert shard_files(root) == before  # nobody writes any more
    assert manifest_json(root) == committed  # the last commit, untouched
    with loader.open(uri) as ds:
        assert ds.verify().ok
    again = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    same_state(dataset_state(ref), dataset_state(uri))
