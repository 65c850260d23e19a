"""Fencing of Dask attempts (infra/dask_exec.py) on real files and real flock: a newer
attempt of a task waits for the older one's lock, and the older one - a zombie - stops at
its next message (`Superseded`) without sending it; the coordinator revoking the lease
(a run that stops) stops it the same way. The lock file counts the attempts."""

import threading
import time

import pytest

from loader.infra.dask_exec import STOP, Job, Lease, Superseded, lease_base, write_text


def test_a_newer_attempt_fences_the_older_one(tmp_path):
    job = Job("run1", str(tmp_path), "q")
    old = Lease(job, 0)
    assert old.acquire() == 1
    old.check()  # still its own
    new = Lease(job, 0)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("attempt", new.acquire()))
    t.start()
    time.sleep(0.3)  # the subject: the newer attempt still waits after a while
    assert t.is_alive() and "attempt" not in got  # at most one writer: it waits for the lock
    with pytest.raises(Superseded):
        old.check()  # the zombie's next message is refused
    old.release()  # it stops: the kernel frees the lock
    t.join(5)
    assert got["attempt"] == 2
    new.check()
    new.release()


def test_a_stopped_run_revokes_the_lease(tmp_path):
    job = Job("run2", str(tmp_path), "q")
    lease = Lease(job, 3)
    lease.acquire()
    write_text(lease_base(job, 3) + ".want", STOP)
    with pytest.raises(Superseded):
        lease.check()
    lease.release()
