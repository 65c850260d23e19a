"""Run records in the manifest: finding the run to resume, or the one that already did it.

Every `load`, `ingest` (and, written by the finalizer, `finalize` / `compact`) appends a
run to ``manifest.runs``: id, kind, status, start/end, counts, and what it loaded. Load
and ingest runs also keep their *plan* (first seq, first record, batch size, the
source's fingerprint, the files) and, while unfinished, their *pending* rows (batches
durable in the stores but not yet committed, see commit.py).

Statuses: ``running`` (in progress - or its job died: the next writer of any kind, which
holds the lock, turns that into ``interrupted``; `info` shows it so as soon as no job
holds the lock), ``done``, ``failed`` (an error stopped it), ``interrupted`` (a signal
stopped it: SIGINT, SIGTERM, SIGHUP; or its job died), ``superseded`` (another run
started before it was resumed: its pending batches were discarded and nothing of it is
committed).

Only runs since the last ``--replace`` (inclusive) describe the current content.
"""

from __future__ import annotations

import time

UNFINISHED = ("running", "failed", "interrupted")


def current(m) -> list[dict]:
    """The runs that describe the dataset's current content (since the last --replace)."""
    runs = m.runs
    for i in range(len(runs) - 1, -1, -1):
        if runs[i].get("replace"):
            return runs[i:]
    return runs


def mark_interrupted(m) -> bool:
    """Runs still ``running`` while we hold the lock belong to a job that died."""
    return _interrupt(m.runs)


def as_seen(m, job_running: bool) -> list[dict]:
    """The runs as a reader reports them: while no job holds the dataset lock
    (``job_running`` False), a run still ``running`` is one whose job died: shown
    ``interrupted`` (the next writer records it so)."""
    if job_running:
        return m.runs
    shown = [dict(r) for r in m.runs]
    _interrupt(shown)
    return shown


def _interrupt(runs: list[dict]) -> bool:
    changed = False
    for r in runs:
        if r.get("status") == "running":
            r["status"] = "interrupted"
            r["error"] = r.get("error") or "the job stopped without finishing (killed or crashed)"
            changed = True
    return changed


def last_matching(m, kind: str, source: str, fingerprint: str | None) -> dict | None:
    if fingerprint is None:
        return None
    for r in reversed(current(m)):
        if r.get("kind") == kind and r.get("source") == source and r.get("fingerprint") == fingerprint:
            return r
    return None


def options_match(run: dict, **opts) -> bool:
    return all(run.get(k) == v for k, v in opts.items())


def compacted_since(m, run: dict) -> bool:
    """A compaction after ``run`` may have rewritten the stores: its pending rows are void."""
    after = False
    for r in m.runs:
        if r is run:
            after = True
        elif after and r.get("kind") == "compact" and r.get("status") == "done":
            return True
    return False


def load_resumable(m, run: dict, **opts) -> bool:
    """Can this unfinished load run be resumed on the dataset as it is now?"""
    return (run.get("status") in UNFINISHED and run.get("resumable", False)
            and run.get("first_seq") == m.next_seq and run.get("first_record") == m.next_record
            and options_match(run, **opts) and not compacted_since(m, run))


def supersede(m, keep: dict | None, by: str) -> list[str]:
    """Unfinished runs other than ``keep`` lose their pending batches (the new run's
    workers delete them); returns their ids."""
    ids = []
    for r in m.runs:
        if r is keep or r.get("status") not in UNFINISHED or r.get("kind") not in ("load", "ingest"):
            continue
        if r.get("pending") or r.get("resumable"):
            if r.get("pending"):
                r["status"] = "superseded"
                r["superseded_by"] = by
            r["pending"] = []
            r["resumable"] = False
            ids.append(r["id"])
    return ids


def restart(run: dict) -> None:
    """An unfinished run is being resumed by this job."""
    import os
    import socket

    run.update(status="running", ended=None, error=None, pid=os.getpid(), host=socket.gethostname())
    run["attempts"] = run.get("attempts", 1) + 1
    run.setdefault("resumed", []).append(time.time())


def finish(run: dict, status: str, **fields) -> None:
    run.update(status=status, ended=time.time(), **fields)
    if status == "done":
        run.pop("pending", None)
        run["resumable"] = False
        run["error"] = None


def fail(run: dict, exc: BaseException) -> None:
    """``run`` stopped before it was done: ``interrupted`` by a signal (KeyboardInterrupt,
    Interrupted), else ``failed``; either way an unfinished run, resumed by the same command."""
    from ..errors import BulkloadError, Interrupted

    if isinstance(exc, KeyboardInterrupt):
        run.update(status="interrupted", ended=time.time(), error=str(Interrupted.of(exc)))
        return
    err = str(exc) if isinstance(exc, BulkloadError) else f"{type(exc).__name__}: {exc}"
    run.update(status="failed", ended=time.time(), error=err)


def stop(run: dict, exc: BaseException, outcome: str) -> BaseException:
    """Record why ``run`` stopped (see `fail`) and return the exception to raise: a signal
    as ``Interrupted``, or the error itself; a signal and a dead worker carry ``outcome``
    (what of the run was committed: only the run knows, not the pool)."""
    from ..errors import Interrupted, WorkerError

    if isinstance(exc, KeyboardInterrupt):
        exc = Interrupted.of(exc)
        exc.outcome = outcome
    elif isinstance(exc, WorkerError) and exc.died:
        exc.outcome = outcome
    fail(run, exc)
    return exc
