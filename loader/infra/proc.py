"""A worker process's life with its coordinator, and what it measures of itself.

Every pool worker (load, compact's merge, finalize's scan / partition / build, the
documents compaction) calls `start_worker(task)` first:

- it ignores SIGINT, SIGTERM and SIGHUP (also when they hit the whole process group):
  the coordinator alone decides, stops the workers (SIGKILL) and records the run as
  interrupted (interrupts.py);
- it dies with its parent (``PR_SET_PDEATHSIG``) and, since a worker's parent is the
  forkserver, which lives as long as its workers, a thread also watches the coordinator
  (``task.main_pid``) and exits the process at once when it is gone (`watch_coordinator`);
- (in a thread of a host process, e.g. a Dask worker, or in its own coordinator's process,
  ``task.main_pid == os.getpid()``: infra/executors.InProcessExecutor, only the fault
  points, counted with the coordinator's: the host owns the signals and the process);
- it arms the job's fault points (faults.py) under the prefix ``w<worker>.``;
- it keeps freed heap memory for reuse (`heap.keep_freed`): LMDB copies each big value
  into a freshly malloc'ed overflow page and frees it at commit; with glibc's defaults
  the freed top of the heap goes back to the kernel and comes back as page faults on
  the next transaction - that churn was most of a load's write stage.

Long loops also ask `parent_alive` between steps. `peak_rss`, `cpu_seconds` and
`minor_faults` are the figures a receipt reports. Crash behaviour: a worker that finds its
coordinator dead exits like a kill (``os._exit``), writing nothing more; the stores are
then as after a crash, which every writer tolerates.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import threading
import time

from . import faults, heap

#: exit status of a worker whose coordinator died
ORPHAN_EXIT = 70
_PR_SET_PDEATHSIG = 1


def start_worker(task) -> None:
    """Every worker's first step: leave the stop signals to the coordinator, die with it,
    arm fault points. ``task`` has ``main_pid``, ``worker`` and ``fault``. A worker run
    in a thread of a host process (a Dask worker: infra/dask_exec.py) or in its coordinator's
    own process (executors.InProcessExecutor) leaves the signals and the process's life to
    its host."""
    if task.main_pid == os.getpid():
        faults.take_role(f"w{task.worker}.")
        heap.keep_freed_if_owned()  # the bulkload command's own process
        return
    if threading.current_thread() is threading.main_thread():
        leave_stop_signals_to_coordinator()
        die_with_parent()
        watch_coordinator(task.main_pid)
    heap.keep_freed()
    faults.configure(task.fault, prefix=f"w{task.worker}.")


def leave_stop_signals_to_coordinator() -> None:
    """Ignore Ctrl-C, SIGTERM, SIGHUP (also when they hit the whole process group)."""
    for signo in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signo, signal.SIG_IGN)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent exits."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def watch_coordinator(main_pid: int, interval: float = 0.2) -> None:
    """Exit at once if the coordinator dies (e.g. SIGKILL). PDEATHSIG does not cover it:
    a worker's parent is the forkserver, which itself lives as long as its workers."""
    if not main_pid:
        return

    def watch():
        while True:
            time.sleep(interval)
            if not parent_alive(main_pid):
                os._exit(ORPHAN_EXIT)  # like a kill: nothing more is written, the stores stay consistent

    threading.Thread(target=watch, name="watch-coordinator", daemon=True).start()


def parent_alive(pid: int) -> bool:
    """Whether process ``pid`` (0: no coordinator to watch) still runs; a zombie is dead."""
    if not pid:
        return True
    try:  # a killed coordinator stays a zombie until its parent reaps it: that is dead too
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def peak_rss() -> int:
    """This process's peak resident set size, in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cpu_seconds() -> float:
    """User + system CPU time of this process so far (rounded to ms)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return round(ru.ru_utime + ru.ru_stime, 3)


def minor_faults() -> int:
    """Minor page faults of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
