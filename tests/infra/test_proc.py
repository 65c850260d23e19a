"""infra/proc.py: a worker ignores the stop signals, dies with its parent and with its
coordinator (real processes, real signals), and measures itself."""

import contextlib
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from loader.infra.proc import cpu_seconds, minor_faults, parent_alive, peak_rss


def python(code: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True, **kw)


def gone(pid: int, timeout: float = 5.0) -> bool:
    """Whether ``pid`` exits within ``timeout`` (a zombie nobody reaps counts as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not parent_alive(pid):
            return True
        time.sleep(0.02)
    return False


def test_parent_alive_of_no_pid_live_and_reaped():
    assert parent_alive(0) and parent_alive(os.getpid())
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert not parent_alive(p.pid)


def test_zombie_counts_as_dead():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # do not reap it: wait until it is a zombie
        with open(f"/proc/{p.pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                break
        time.sleep(0.01)
    assert not parent_alive(p.pid)
    p.wait()


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_worker_leaves_the_stop_signals_to_its_coordinator(signo):
    w = python("""
        import types, time
        from loader.infra.proc import start_worker
        start_worker(types.SimpleNamespace(main_pid=0, worker=3, fault=""))
        print("ready", flush=True)
        time.sleep(60)
    """)
    try:
        assert w.stdout.readline() == "ready\n"
        w.send_signal(signo)
        time.sleep(0.3)  # the subject: the signal does not end it, even after a while
        assert w.poll() is None  # still running
    finally:
        w.kill()
        w.wait()


@pytest.mark.parametrize("how", ["parent", "coordinator"])
def test_a_worker_dies_with_its_parent_and_with_its_coordinator(how):
    """PDEATHSIG kills a worker whose parent dies; a worker whose parent lives on (as the
    forkserver does) exits when the coordinator it watches dies."""
    middle = python(f"""
        import subprocess, sys, time
        code = '''
        import os, sys, time
        from loader.infra.proc import die_with_parent, watch_coordinator
        if {how!r} == "parent":
            die_with_parent()
        else:
            watch_coordinator(int(sys.argv[1]), interval=0.05)
        print(os.getpid(), flush=True)
        time.sleep(60)
        '''
        coordinator = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        w = subprocess.Popen([sys.executable, "-c", code, str(coordinator.pid)], stdout=subprocess.PIPE, text=True)
        print(w.stdout.readline().strip(), coordinator.pid, flush=True)
        time.sleep(60)
    """)
    worker = coordinator = None
    try:
        worker, coordinator = map(int, middle.stdout.readline().split())
        if how == "parent":
            middle.kill()
            middle.wait()
        else:
            os.kill(coordinator, signal.SIGKILL)
            time.sleep(0.3)  # the subject: the middle process outlives the coordinator's death
            assert middle.poll() is None  # the worker's parent lives on
        assert gone(worker)
    finally:
        for pid in (worker, coordinator):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        middle.kill()
        middle.wait()


def test_self_measures():
    assert peak_rss() > 1 << 20
    assert isinstance(cpu_seconds(), float) and cpu_seconds() > 0
    fresh = mmap.mmap(-1, 8 << 20)  # anonymous pages, none resident yet
    before = minor_faults()
    for off in range(0, len(fresh), mmap.PAGESIZE):
        fresh[off] = 1  # the first write to each page faults it in
    assert minor_faults() >= before + len(fresh) // mmap.PAGESIZE // 2
    fresh.close()
