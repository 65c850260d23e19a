"""`--scheduler` naming what is no usable Dask scheduler: a TCP service that is not Dask (it
sends garbage, or nothing), a real scheduler without workers, a stop signal while a
local:N cluster starts or while the handshake waits. Each ends within seconds as one line,
before anything is written (real sockets on 127.0.0.1, a real distributed.Scheduler)."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from helpers import run_cli, tool, wait_until

import loader
from loader.errors import EngineError

FAST = {"BULKLOAD_DASK_TIMEOUT": "2"}


@pytest.fixture
def service(request):
    """tcp://127.0.0.1:PORT of a plain TCP server that accepts and sends ``request.param``
    (b"": nothing) on every connection, then holds it open."""
    server = socket.create_server(("127.0.0.1", 0))
    held, stop = [], threading.Event()

    def serve():
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            held.append(conn)
            if request.param:
                with contextlib.suppress(OSError):
                    conn.sendall(request.param)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    server.close()


@pytest.fixture
def idle_scheduler():
    """The address of a real distributed.Scheduler (its own process) with no workers."""
    code = (
        "import asyncio\nfrom distributed import Scheduler\n"
        "async def main():\n"
        "    async with Scheduler(host='127.0.0.1', port=0, dashboard_address=None) as s:\n"
        "        print(s.address, flush=True)\n"
        "        await asyncio.get_running_loop().run_in_executor(None, input)\n"
        "asyncio.run(main())\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield p.stdout.readline().strip()
    finally:
        p.kill()
        p.wait()


def snapshot(path):
    """Every file under ``path`` with its bytes (what a refused run must leave as it was)."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), path)] = f.read()
    return out


@pytest.mark.parametrize("service", [b"\xff" * 4096, b""], ids=["garbage", "silent"], indirect=True)
def test_a_service_that_is_not_a_dask_scheduler_is_one_line_within_seconds(tmp_path, service):
    start = time.monotonic()
    p = run_cli(
        "--engine",
        "dask",
        "--scheduler",
        service,
        "load",
        "gen://scidb96?n=100",
        f"lmdb://{tmp_path}/ds",
        env=FAST,
        timeout=60,
    )
    assert time.monotonic() - start < 20
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("bulkload: error: ") and service in p.stderr, p.stderr
    assert "unexpected" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert not (tmp_path / "ds").exists()


def test_a_scheduler_without_workers_is_named_within_seconds_and_nothing_is_written(tmp_path, idle_scheduler):
    new, old = f"lmdb://{tmp_path}/new", f"lmdb://{tmp_path}/old"
    assert run_cli("load", "gen://scidb96?n=100", old, "-q").returncode == 0
    before = snapshot(tmp_path / "old")
    for uri in (new, old):
        start = time.monotonic()
        p = run_cli(
            "--engine", "dask", "--scheduler", idle_scheduler, "load", "gen://scidb96?n=100", uri, env=FAST, timeout=60
        )
        assert time.monotonic() - start < 20
        assert p.returncode == 1, p.stderr
        assert p.stderr == (
            f"bulkload: error: the Dask scheduler at {idle_scheduler} has no workers (waited 2 s); "
            f"start some (dask worker {idle_scheduler}) or raise BULKLOAD_DASK_TIMEOUT\n"
        )
    assert not (tmp_path / "new").exists()
    assert snapshot(tmp_path / "old") == before
    from distributed import Client

    os.environ.update(FAST)
    try:
        with Client(idle_scheduler, timeout=10) as client, pytest.raises(EngineError, match="has no workers"):
            loader.load("gen://scidb96?n=100", new, client=client)
    finally:
        del os.environ["BULKLOAD_DASK_TIMEOUT"]
    assert not (tmp_path / "new").exists()


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in os.listdir(f"/proc/{p}/task") if os.path.exists(f"/proc/{p}/task") else ():
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            todo.extend(k for k in kids if k not in out)
            out.update(kids)
    return out


def _stray(pids) -> list[int]:
    """The processes of ``pids`` still running (not zombies), but multiprocessing's resource
    tracker (it exits by itself once it has removed the killed processes' semaphores)."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rpartition(")")[2].split()[0] == "Z"
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                tracker = b"resource_tracker" in f.read()
        except OSError:
            continue
        if not zombie and not tracker:
            out.append(pid)
    return out


@pytest.mark.parametrize("service", [b""], ids=["silent"], indirect=True)
@pytest.mark.parametrize("where", ["local:16", "silent service"])
def test_a_stop_signal_while_the_engine_starts_ends_the_command_within_2_s(tmp_path, service, where):
    scheduler = service if where == "silent service" else where
    env = dict(os.environ, BULKLOAD_DASK_TIMEOUT="60")
    p = subprocess.Popen(
        [
            tool("bulkload"),
            "--engine",
            "dask",
            "--scheduler",
            scheduler,
            "load",
            "gen://scidb96?n=100",
            f"lmdb://{tmp_path}/ds",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline, started = time.monotonic() + 30, set()
    while time.monotonic() < deadline and p.poll() is None:  # the cluster's processes are starting
        started = _descendants(p.pid)  # (16 on 2 cores take seconds to start)
        if len(started) >= 3 if where == "local:16" else time.monotonic() > deadline - 29:
            break
        time.sleep(0.02)
    assert p.poll() is None
    p.send_signal(signal.SIGTERM)
    start = time.monotonic()
    try:
        err = p.communicate(timeout=2.5)[1]
    finally:
        os.killpg(p.pid, signal.SIGKILL) if p.poll() is None else None
    assert time.monotonic() - start < 2.5
    assert (p.returncode, err) == (143, "bulkload: error: interrupted by SIGTERM\n")
    wait_until(lambda: not _stray(started), 10, "the cluster's processes to exit")
    assert not (tmp_path / "ds").exists()
