"""Opening a Dask client within bounds: every wait before a run's first write ends in seconds.

Imported only when the engine is dask. What ``--scheduler`` names may be no Dask scheduler
at all, a scheduler without workers, or a LocalCluster too big to start; none of them may
hang the command, crash it with a Dask internal error, or outlive a stop signal:

- `probe(address, timeout)`: a Dask handshake with the scheduler at ``address`` in a
  thread, bounded by ``timeout`` (Dask's own ``connect`` bounds the TCP connect but then
  waits for the peer's handshake forever; a peer that sends garbage makes it allocate a
  frame of the size it read: "Unable to allocate 2.82 EiB"). EngineError naming the
  address for no answer, a refused connection or an answer that is not Dask's.
- `wait_for_workers(client, address, timeout)`: EngineError when the scheduler still has
  no worker after ``timeout`` (a run's tasks would wait for one forever).
- `local_cluster(n)`: a LocalCluster of ``n`` worker processes run by a host process in
  a process group of its own (infra/dask_local.py), closed on the way out. A stop signal
  or error while it starts or runs kills that group at once (SIGKILL, reaped) instead of
  Dask's graceful close, which waits for nannies still starting (seconds to minutes) and
  prints tracebacks at exit. The host exits when its stdin ends: a coordinator killed
  with SIGKILL leaves no cluster behind. Its stderr (Dask's logs) is shown only with
  BULKLOAD_DEBUG=1: the command's own errors are one line.

The caller's main thread only ever waits in short slices, so a stop signal (the CLI
raises ``Interrupted`` in it) ends every wait here within a fraction of a second.
Crash behaviour: nothing here writes anything; a probe thread left waiting on a dead peer
is a daemon and holds only its socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import IO

from distributed.comm import connect
from distributed.security import Security

from ..errors import EngineError
from . import env

#: seconds a local:N cluster's host is given to close its cluster before it is killed
CLOSE_WAIT_S = 5.0
#: the part of the probe's timeout that Dask's own connect (and its retries) may take
CONNECT_SHARE = 0.8
#: what a user may fix when a scheduler does not answer in time
ADVICE = (
    "start it (dask scheduler) or fix --scheduler / BULKLOAD_SCHEDULER; BULKLOAD_DASK_TIMEOUT sets the seconds to wait"
)


def probe(address: str, timeout: float) -> None:
    """Handshake with the Dask scheduler at ``address`` (see the module docstring)."""
    if address.startswith("inproc://"):
        return  # in this process: nothing on the wire to wait for
    args = Security().get_connection_args("client")

    async def handshake():
        # Dask's connect retries a refused connection until its own timeout, then raises
        # OSError ("cannot reach"); it ends before this wait_for's (a silent peer: "no
        # answer"), so that which error is told never depends on which deadline won
        connect_s = timeout * CONNECT_SHARE
        comm = await asyncio.wait_for(connect(address, timeout=connect_s, **args), timeout)
        await comm.close()

    out: dict = {}

    def target():
        try:
            asyncio.run(handshake())
        except BaseException as e:
            out["error"] = e
        out["done"] = True

    thread = threading.Thread(target=target, name="bulkload-dask-probe", daemon=True)
    thread.start()
    _wait(lambda: "done" in out, timeout + 1.0)
    error = out.get("error")
    if "done" not in out or isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        raise EngineError(f"no Dask scheduler answered at {address} within {timeout:g} s; {ADVICE}")
    if isinstance(error, OSError):
        raise EngineError(f"cannot reach the Dask scheduler at {address}: {error}; {ADVICE}")
    if error is not None:
        raise EngineError(
            f"the service at {address} is not a Dask scheduler (its handshake failed: "
            f"{type(error).__name__}); fix --scheduler / BULKLOAD_SCHEDULER"
        )


def wait_for_workers(client, address: str, timeout: float) -> None:
    """EngineError unless the scheduler at ``address`` has a worker within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not client.scheduler_info(n_workers=1).get("workers"):
        if time.monotonic() >= deadline:
            raise EngineError(
                f"the Dask scheduler at {address} has no workers (waited {timeout:g} s); start "
                f"some (dask worker {address}) or raise BULKLOAD_DASK_TIMEOUT"
            )
        time.sleep(0.1)


def _wait(ready, seconds: float) -> None:
    """Wait until ``ready()`` or ``seconds`` passed, in slices a stop signal interrupts."""
    deadline = time.monotonic() + seconds
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.05)


@contextlib.contextmanager
def local_cluster(n: int):
    """The scheduler address of a LocalCluster of ``n`` worker processes for the block, run
    by a host process of its own (infra/dask_local.py): on the way out the host is told to
    close it (a few seconds at most), and on a stop signal or error its whole process group
    is killed at once; either way nothing of it outlives the block."""
    host = subprocess.Popen(
        [sys.executable, "-m", "loader.infra.dask_local", str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
        stderr=None if env.flag("BULKLOAD_DEBUG") else subprocess.DEVNULL,
    )
    try:
        line = _first_line(host)
        word, _, rest = line.partition(" ")
        if word != "address":
            raise EngineError(
                f"the Dask LocalCluster of local:{n} did not start: "
                f"{rest or 'its host exited with ' + str(host.poll())}"
            )
        yield rest
    except BaseException:
        _end(host, graceful=False)
        raise
    _end(host, graceful=True)


def _first_line(host: subprocess.Popen[bytes]) -> str:
    """The host's first stdout line ("" if it exited first), waited for in short slices."""
    out = _pipe(host.stdout)
    while True:
        ready, _, _ = select.select([out], [], [], 0.1)
        if ready:
            return out.readline().decode(errors="replace").strip()
        if host.poll() is not None:
            return ""


def _pipe(f: IO[bytes] | None) -> IO[bytes]:
    """A pipe of the host, which is started with stdin and stdout pipes."""
    if f is None:
        raise ValueError("the Dask host was started without its pipes")
    return f


def _end(host: subprocess.Popen[bytes], graceful: bool) -> None:
    """End the host: close its stdin (graceful: it closes its cluster, up to CLOSE_WAIT_S),
    then SIGKILL whatever is left of its process group (`_kill_group`), and reap the host."""
    with contextlib.suppress(OSError):
        _pipe(host.stdin).close()
    if graceful:
        with contextlib.suppress(subprocess.TimeoutExpired):
            host.wait(CLOSE_WAIT_S)
    _kill_group(host.pid)
    host.wait()
    _pipe(host.stdout).close()


def _kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid`` but multiprocessing's resource tracker, which
    removes the named semaphores of the killed nannies once they are gone, then exits."""
    for stat in glob.glob("/proc/[0-9]*/stat"):
        pid = stat.split("/")[2]
        try:
            with open(stat) as f:
                group = int(f.read().rpartition(")")[2].split()[2])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                tracker = b"resource_tracker" in f.read()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if group == pgid and not tracker:
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
