"""Scripted crash points for the fault-injection tests (tests/system/test_faults.py).

``BULKLOAD_FAULT="POINT:N[,POINT:N...]"`` makes the process that reaches POINT for the
N-th time kill itself with SIGKILL - no cleanup, no flush, exactly like a power cut of
that process. The coordinator reads the variable once per job and hands the spec to its
workers inside their tasks (workers are forked from the forkserver, whose environment is
not the job's). Points (see `hit` calls):

  coordinator  ``save`` (before a manifest write), ``saved`` (after it), ``checkpoint``
               (a worker checkpoint arrived, before it is recorded), ``commit`` (before
               the final commit), ``swap`` / ``swapped`` (around --replace's directory
               exchange), ``hashed`` (ingest: a file was fingerprinted)
  workers      ``flush`` (a group was written, not yet synced), ``sync`` (synced, not
               yet reported), ``batch`` (a batch was serialized); prefix ``wN.`` to aim at
               worker N only, e.g. ``w1.flush:3``

  finalize     coordinator: ``scanned`` (chunk histogram done), ``spilled`` (spill runs
               written), ``built`` (every chunk written and synced), ``indexed`` (index
               file written, manifest not switched), ``switched`` (manifest switched, the
               replaced build listed as garbage, not yet dropped), ``dropping`` (the
               replaced build dropped from some shards only); workers: ``spill`` (a spill
               run was written), ``chunks`` (a group of chunks was put, not yet synced),
               ``synced`` (a shard's chunks synced, not yet reported)
  compact      coordinator: ``merged`` (merged batches written, manifest not switched),
               ``merge-switched`` (switched, old batches listed as garbage, not yet
               deleted), ``deleting`` (old batches deleted from some shards only),
               ``compact-copied`` (an LMDB shard's compacted copy is complete, not swapped
               in), ``compact-swapped`` (swapped in, the old copy not yet removed);
               workers: ``merge`` (a group of merged batches was put, not yet synced)
  compact of documents (loader/docs_compact.py): coordinator ``docs-folded`` (new tables
               synced, manifest not switched), ``docs-switched`` (switched, old tables
               listed as garbage, not dropped), ``docs-dropping`` (old tables dropped from
               some shards only); workers ``fold`` (a window was put, not yet synced)
  catalog      (model/catalog*.py, every commit): ``catalog-commit`` (a commit's changes
               written in its LMDB transaction, not committed); the first commit of a new
               or version-1 dataset: ``catalog-built`` (built and synced beside, as
               catalog.tmp-PID), ``catalog-renamed`` (renamed into place, manifest.json
               not yet the pointer), ``pointer`` (before manifest.json is replaced)
  garbage      (loader/garbage.py, in every writer): ``collect`` (entries no reader needs
               are due, nothing deleted yet), ``collected`` (their data deleted, the
               manifest still lists them); ``deleting`` / ``dropping`` /
               ``docs-dropping`` above are its points between shards

Unset (the normal case), `hit` is one dict lookup.
"""

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
