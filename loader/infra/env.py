"""The BULKLOAD_* environment variables of the loader: one place that reads and checks them.

Each variable is read through `number` or `flag`, which turn a value that cannot be used
(``abc``, ``-1``, ``nan``) into EnvironmentVariableError (exit 2) naming the variable and
saying what it takes - never a ValueError from deep inside a run. The CLI calls `check`
once at start-up, so a bad value stops every command before it touches anything.

  BULKLOAD_CHECKPOINT_SECONDS  seconds between worker checkpoints (a number >= 0)
  BULKLOAD_CHECKPOINT_BYTES    bytes written between worker checkpoints (a number >= 0)
  BULKLOAD_FAULT               scripted crash points for the fault tests (faults.py)
  BULKLOAD_DEBUG               1: print the traceback of an unexpected error (cli.py)
  BULKLOAD_SCHEMAS             colon-separated directories of layout files (layouts.py;
                               a search path: directories that do not exist are skipped)
  BULKLOAD_ENGINE              where runs execute: local (the process pool) or dask
  BULKLOAD_SCHEDULER           the Dask scheduler: tcp://HOST:PORT (or another Dask
                               scheme: tls, ws, wss, ucx, inproc), or local:N (a
                               LocalCluster of N worker processes for the job)
  BULKLOAD_PROGRESS_SECONDS    seconds between progress log lines when stderr is not a
                               terminal (a number >= 0; default 2)
  BULKLOAD_DASK_TIMEOUT        seconds to wait for a Dask scheduler's handshake, and
                               for its first worker (a number >= 0; default 5)
  BULKLOAD_SCAN_THREADS        decoding threads of a scan (read/scan.py; a whole number,
                               0 or unset: the cores this process may use, at most 4)

Pipeline keys (``BULKLOAD_DATASET``, ``BULKLOAD_INGEST_FROM``, ...) are read and checked by
pipeline.py against the pipeline's schema. Reading has no side effect.
"""

from __future__ import annotations

import math
import os
from typing import Literal, overload

from ..errors import EnvironmentVariableError
from . import faults

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
CHECKPOINT_SECONDS = 10.0
CHECKPOINT_BYTES = 1 << 30


@overload
def number(name: str, default: float, *, integer: Literal[False] = False) -> float: ...
@overload
def number(name: str, default: int, *, integer: Literal[True]) -> int: ...
def number(name: str, default: float, *, integer: bool = False) -> float:
    """The non-negative finite number in ``$name`` (``1e9`` and ``1_000`` style), else ``default``."""
    text = os.environ.get(name)
    if text is None:
        return default
    what = "a whole number" if integer else "a number"
    try:
        value = float(text.strip().replace("_", ""))
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (integer and value != int(value)):
        raise EnvironmentVariableError(
            f"environment variable {name}={text!r} is not {what} >= 0 (e.g. {name}="
            f"{int(default) if integer else format(default, 'g')}); "
            f"fix or unset it"
        )
    return int(value) if integer else value


def flag(name: str) -> bool:
    """``$name`` as a boolean: 1/true/yes/on or 0/false/no/off (unset: false)."""
    text = os.environ.get(name, "").strip().lower()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise EnvironmentVariableError(f"environment variable {name}={os.environ[name]!r} is not 1 or 0; fix or unset it")


def checkpoint() -> tuple[float, int]:
    """(seconds, bytes) between worker checkpoints: the variables, else 10 s and 1 GiB."""
    return (
        number("BULKLOAD_CHECKPOINT_SECONDS", CHECKPOINT_SECONDS),
        number("BULKLOAD_CHECKPOINT_BYTES", CHECKPOINT_BYTES, integer=True),
    )


ENGINES = ("local", "dask")
#: the address schemes Dask's comms know (distributed.comm.registry), without importing it
DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx", "inproc")
SCHEDULER_FORMS = "tcp://HOST:PORT (or tls, ws, wss, ucx, inproc://), or local:N"
DASK_TIMEOUT = 5.0
PROGRESS_SECONDS = 2.0


def engine() -> str:
    """``$BULKLOAD_ENGINE``: local (unset) or dask."""
    text = os.environ.get("BULKLOAD_ENGINE", "").strip().lower() or "local"
    if text not in ENGINES:
        raise EnvironmentVariableError(
            f"environment variable BULKLOAD_ENGINE={os.environ['BULKLOAD_ENGINE']!r} "
            "is not local or dask; fix or unset it"
        )
    return text


def scheduler() -> str:
    """``$BULKLOAD_SCHEDULER`` ("" unset), checked: tcp://HOST:PORT (any Dask address) or local:N."""
    text = os.environ.get("BULKLOAD_SCHEDULER", "").strip()
    if text and not scheduler_ok(text):
        raise EnvironmentVariableError(
            f"environment variable BULKLOAD_SCHEDULER={text!r} is not a Dask scheduler "
            f"address: {SCHEDULER_FORMS} (N >= 1); fix or unset it"
        )
    return text


def scheduler_ok(text: str) -> bool:
    """Whether ``text`` is ``local:N`` (N >= 1; its upper bound is --workers': api/engine.py)
    or ``SCHEME://HOST[:PORT]`` with a scheme Dask knows."""
    if text.startswith("local:"):
        n = text[len("local:") :]
        return n.isdigit() and int(n) >= 1
    proto, sep, rest = text.partition("://")
    return bool(sep and proto.lower() in DASK_SCHEMES and rest)


def progress_seconds() -> float:
    """``$BULKLOAD_PROGRESS_SECONDS``: seconds between progress log lines (not a terminal)."""
    return number("BULKLOAD_PROGRESS_SECONDS", PROGRESS_SECONDS)


def dask_timeout() -> float:
    """``$BULKLOAD_DASK_TIMEOUT``: seconds to wait for a scheduler's handshake and first worker."""
    return number("BULKLOAD_DASK_TIMEOUT", DASK_TIMEOUT)


def scan_threads() -> int:
    """``$BULKLOAD_SCAN_THREADS``: a scan's decoding threads (0, the default: the cores, at most 4)."""
    n = scan_threads_given()
    if n:
        return n
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(4, cores))


def scan_threads_given() -> int:
    """``$BULKLOAD_SCAN_THREADS`` as set (0: not set, or 0)."""
    return int(number("BULKLOAD_SCAN_THREADS", 0, integer=True))


def check() -> None:
    """Check every variable this module lists (the CLI's first step; imports nothing heavy)."""
    checkpoint()
    faults.parse(os.environ.get(faults.ENV))
    flag("BULKLOAD_DEBUG")
    engine()
    scheduler()
    dask_timeout()
    progress_seconds()
    scan_threads()
