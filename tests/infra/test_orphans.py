"""A worker whose coordinator was SIGKILLed while starting it exits silently (infra/orphans.py,
issue 28 item 12): no UnpicklingError traceback from multiprocessing on the job's stderr
after the job was reported killed. An error of a worker whose coordinator is alive is
still printed."""

import os
import subprocess
import sys
import time

#: a coordinator that starts a worker through the pool's forkserver and dies half-way
#: through sending it its start-up data (as a SIGKILL of `bulkload compact` can land)
HALF_START = """
import os, signal, sys, time
from multiprocessing import forkserver
from loader.infra import pool

pool.context()
sentinel, w = forkserver.connect_to_new_process([])
print(forkserver.read_signed(sentinel), flush=True)
os.write(w, b"\\x80\\x04\\x95\\x10\\x00\\x00\\x00\\x00\\x00\\x00\\x00}")  # half a pickle
if sys.argv[1] == "die":
    os.kill(os.getpid(), signal.SIGKILL)
os.close(w)
time.sleep(4)  # alive while the worker fails
"""


def half_started_worker(tmp_path, how: str) -> str:
    """stderr of the coordinator and its half-started worker, once the worker has exited."""
    (tmp_path / "half_start.py").write_text(HALF_START)
    with open(tmp_path / "stderr", "w") as err:
        p = subprocess.Popen(
            [sys.executable, "half_start.py", how], cwd=tmp_path, stdout=subprocess.PIPE, stderr=err, text=True
        )
        worker = int(p.stdout.readline())
        deadline = time.monotonic() + 20
        while os.path.exists(f"/proc/{worker}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{worker}")
        p.wait(timeout=20)
    return (tmp_path / "stderr").read_text()


def test_worker_whose_coordinator_died_while_starting_it_exits_silently(tmp_path):
    assert half_started_worker(tmp_path, "die") == ""


def test_worker_start_up_error_with_a_live_coordinator_is_still_printed(tmp_path):
    err = half_started_worker(tmp_path, "live")
    assert "Traceback" in err and "UnpicklingError: pickle data was truncated" in err
