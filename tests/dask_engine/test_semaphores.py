"""/dev/shm/sem.mp-* left by killed Dask test runs: Dask's nannies create them (named
semaphores of multiprocessing queues under the spawn context; bulkload's own pool uses
pipes only) and multiprocessing's resource tracker removes them when their process dies -
but not when the tracker dies too, as when a test run is killed with its process group.
The test fixture (cluster.py) records the names its cluster created and a later test
process removes those of a dead one."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .cluster import SEM_RECORDS, remove_leaked_semaphores, semaphores

ROOT = Path(__file__).resolve().parents[2]
CHILD = f"""
import sys, time
sys.path[:0] = [{str(ROOT)!r}]
from tests.dask_engine.cluster import local_cluster
with local_cluster(1):
    print("ready", flush=True)
    time.sleep(120)
"""


def group_members(pgid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # a zombie maps nothing
            out.append(int(stat.parent.name))
    return out


def wait_for_group_to_die(pgid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while members := group_members(pgid):
        assert time.monotonic() < deadline, f"processes {members} outlived SIGKILL"
        time.sleep(0.05)


def test_the_semaphores_of_a_killed_test_cluster_are_removed_by_the_next_one(tmp_path):
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert p.stdout.readline().strip() == "ready"
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the test run, its workers and its resource tracker
        p.wait(30)
        wait_for_group_to_die(p.pid)  # a dying worker still maps its semaphores
    record = Path(SEM_RECORDS, str(p.pid))
    created = set(record.read_text().split())
    assert created  # the cluster's nanny made some
    assert created <= semaphores(), "nothing leaked: the tracker survived (this test shows nothing then)"
    remove_leaked_semaphores()
    assert not created & semaphores()
    assert not record.exists()
