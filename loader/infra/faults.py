"""Scripted crash points for the fault-injection tests (tests/system/test_faults.py):
``BULKLOAD_FAULT="POINT:N[,POINT:N...]"`` SIGKILLs the process that reaches POINT for the
N-th time. Every point and where it lies: docs/design/faults.md."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading

from ..errors import EnvironmentVariableError

ENV = "BULKLOAD_FAULT"

_points: dict[str, int] = {}
_counts: dict[str, int] = {}
_prefix = ""  # this process's role (a pool worker's)
_thread = threading.local()  # .prefix: the role of a task run in this thread (take_role)
#: a point aimed at one worker: ``wN.POINT``
_WORKER_POINT = re.compile(r"w\d+\.")


def parse(spec: str | None) -> dict[str, int]:
    out = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, _, n = part.partition(":")
        if not name.strip() or not (n or "1").strip().isdecimal() or int(n or 1) < 1:
            raise EnvironmentVariableError(
                f"environment variable {ENV}={spec!r}: {part!r} is not POINT:N "
                "(N >= 1; e.g. flush:3,w1.sync:2); fix or unset it"
            )
        out[name.strip()] = int(n or 1)
    return out


def configure(spec: str | None, prefix: str = "") -> None:
    """Arm the points of ``spec``; ``prefix`` is this process's role (e.g. ``w1.``)."""
    global _points, _prefix
    _points = parse(spec)
    _counts.clear()
    _prefix = prefix


def take_role(prefix: str) -> None:
    """Aim the armed points hit in this thread at ``prefix`` too, counts kept: a worker run
    in its coordinator's process (infra/executors.InProcessExecutor, ThreadExecutor: one
    thread per task) shares its points and counts."""
    _thread.prefix = prefix


@contextlib.contextmanager
def role_kept():
    """The role (prefix) of this thread before the block is its role after it."""
    before = getattr(_thread, "prefix", None)
    try:
        yield
    finally:
        _thread.prefix = before


def aims_at_worker(spec: str | None) -> bool:
    """Whether ``spec`` arms a point of one worker (``wN.POINT``): only a worker process of
    its own can be killed alone, so such a run keeps the pool."""
    return any(_WORKER_POINT.match(name) for name in parse(spec))


def from_env() -> str:
    spec = os.environ.get(ENV, "")
    configure(spec)
    return spec


def hit(point: str) -> None:
    if not _points:
        return
    prefix = getattr(_thread, "prefix", None) or _prefix
    for name in (point, prefix + point) if prefix else (point,):
        n = _points.get(name)
        if n is None:
            continue
        c = _counts[name] = _counts.get(name, 0) + 1
        if c == n:
            os.kill(os.getpid(), signal.SIGKILL)
