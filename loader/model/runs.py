"""Run records in the manifest (`Run`): finding the run to resume, or the one that already did it.

Every `load`, `ingest` (and, written by the finalizer, `finalize` / `compact`) appends a
run to ``manifest.runs``: id, kind, status, start/end, counts, and what it loaded. Load
and ingest runs also keep their *plan* (first seq, first record, batch size, the
source's fingerprint; an ingest of raw files: its files, `PlanFile`) and, while
unfinished, their *pending* rows (batches durable in the stores but not yet committed,
see loading/commit.py).

Statuses: ``running`` (in progress - or its job died: the next writer of any kind, which
holds the lock, turns that into ``interrupted``; `info` shows it so as soon as no job
holds the lock), ``done``, ``failed`` (an error stopped it), ``interrupted`` (a signal
stopped it: SIGINT, SIGTERM, SIGHUP; or its job died), ``superseded`` (another run
started before it was resumed: its pending batches were discarded and nothing of it is
committed). ``replaced`` is never stored: `info` shows it for the runs before the last
``--replace`` (`as_seen`).

Only runs since the last ``--replace`` (inclusive) describe the current content; the
runs before stay listed as the dataset's history.

A run is a typed JSON object (model/json_object.py) of its kind's class - `LoadRun`,
`IngestRun`, `FinalizeRun`, `CompactRun` (`AnyRun`); a run of a kind this version does not
know (written by a newer one) is a plain `Run`, kept as it is. `Run` declares only the
fields every kind has; each kind's class declares its own (load and ingest runs share
theirs through `SourceRun`), so a type checker refuses reading a load run's field on a
finalize run, and at runtime the attribute is not there: code narrows by class first
(``isinstance(run, LoadRun)``), or asks what every kind answers (`Run.replaces_dataset`,
`Run.sources`, `Run.source_uri`). Its keys stay in the order
they were first written, absent ones read as None, and its JSON is exactly what the code
wrote before runs were typed (tests/model/test_runs_typed.py proves it on manifests made by
that code). The manifest's shape validates runs as a tagged union of msgspec Structs, one
per kind (`run_shapes`), on the ``kind`` key. Pure functions on the manifest in memory; the
caller saves it.
"""

from __future__ import annotations

import os
import time
import typing
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import msgspec

from ..errors import BulkloadError, Interrupted, ManifestError, WorkerError
from .json_object import Absent, JsonObject
from .vocab import (
    UNFINISHED_STATUSES,
    RunKind,
    RunStatus,
    ShownStatus,
    UnfinishedStatus,
)

if TYPE_CHECKING:
    from .manifest import Manifest

T = TypeVar("T")


class PlanFile(JsonObject):
    """One file of an ingest run's plan (loading/ingest_plan.py): its identity and its
    place in the dataset."""

    name: str
    size: int
    mtime_ns: int
    xxh3: str
    records: int
    first_seq: int
    first_record: int


class Run(JsonObject):
    """A run in ``manifest.runs``: the fields every kind of run has (absent ones read as
    None). Runs of the known kinds are of the kind's subclass, which declares the kind's
    own fields (`LoadRun`, `IngestRun`, `FinalizeRun`, `CompactRun`); a run of an unknown
    kind (a newer version's) is of this class, its other keys kept as they are.

    Code that needs a kind's field narrows first (``isinstance(run, LoadRun)``, or
    `SourceRun` for what load and ingest runs share), or asks a question every kind
    answers (`replaces_dataset`, `sources`, `source_uri`)."""

    id: str
    kind: str
    status: str  # RunStatus (ShownStatus in listings); a newer version's status is kept
    started: Absent[float] = None
    ended: float | None = None
    host: Absent[str] = None
    pid: Absent[int] = None
    error: str | None = None
    as_of: int | None = None  # listings only, never stored: the generation its last commit can be read at
    records: Absent[int] = None  # committed by the run (documents: documents)
    seconds: Absent[float] = None

    def replaces_dataset(self) -> bool:
        """Was this run built by ``--replace`` (the current content starts with it)? Only
        a load run can be (`LoadRun`)."""
        return False

    def source_uri(self) -> str | None:
        """The source this run read (`SourceRun.source`): None for the other kinds."""
        return None

    def sources(self) -> set[str]:
        """The sources this run loaded (alone or as one of its inputs): none but for load
        and ingest runs (`SourceRun`)."""
        return set()


class SourceRun(Run):
    """What load and ingest runs share: the source, the options a resume must share
    (runs.options_match), the plan, and while unfinished, the pending batches."""

    workers: int | None = None
    source: Absent[str] = None
    fingerprint: str | None = None
    format: Absent[str] = None
    compression: Absent[str] = None
    layout: Absent[str] = None
    shards: Absent[int] = None
    batch_records: Absent[int] = None
    resumable: Absent[bool] = None
    # ... their plan: batches first_seq.. from record first_record, `total` records
    first_seq: Absent[int] = None
    first_record: Absent[int] = None
    total: int | None = None
    table: Absent[str] = None  # documents: the table the run writes
    clear_from: Absent[int] = None
    # ... while unfinished: batch rows durable but not committed (loading/commit.py)
    pending: Absent[list[list[int | str | None]]] = None
    batches: Absent[int] = None
    skipped: Absent[list[dict[str, Any] | str]] = None  # bad files: {path, reason} (documents), names (ingest)
    text_bytes: Absent[int] = None
    written_records: Absent[int] = None
    kept_records: Absent[int] = None
    map_grows: Absent[int] = None
    attempts: Absent[int] = None  # resumed runs
    resumed: Absent[list[float]] = None
    superseded_by: Absent[str] = None

    def source_uri(self) -> str | None:
        return self.source

    def sources(self) -> set[str]:
        return set() if self.source is None else {self.source}


class LoadRun(SourceRun):
    """A ``bulkload load`` run."""

    _tag = "load"
    kind: Literal["load"]
    source_offset: Absent[int] = None  # a file: its first record the run loads (loading/file_runs.py)
    inputs: Absent[list[dict[str, Any]]] = None  # several inputs: one entry each (loading/inputs.py)
    replace: Absent[bool] = None  # built by --replace (loading/replace.py) ...
    replaces: str | None = None  # ... of the dataset with this id

    def replaces_dataset(self) -> bool:
        return bool(self.replace)

    def sources(self) -> set[str]:
        of_inputs = {e.get("source") for e in self.inputs or [] if isinstance(e, dict)}
        return super().sources() | {s for s in of_inputs if isinstance(s, str)}


class IngestRun(SourceRun):
    """A ``bulkload ingest`` run: of raw files (loading/ingest.py) or documents."""

    _tag = "ingest"
    kind: Literal["ingest"]
    # of raw files (loading/ingest.py)
    directory: Absent[str] = None
    pattern: Absent[str] = None
    plan: Absent[list[PlanFile]] = None
    files: Absent[int] = None
    deferred: Absent[list[str]] = None


class FinalizeRun(Run):
    """A ``bulkload finalize`` run (arrays/finalize.py)."""

    _tag = "finalize"
    kind: Literal["finalize"]
    workers: int | None = None
    array: Absent[str] = None
    dims: Absent[str] = None
    duplicates: Absent[str] = None  # DuplicatesPolicy
    strategy: Absent[str] = None  # FinalizeStrategy
    cells: Absent[int] = None
    chunks: Absent[int] = None
    spill_runs: Absent[int] = None


class CompactRun(Run):
    """A ``bulkload compact`` run (maintain/compact.py; documents: docs/compact.py)."""

    _tag = "compact"
    kind: Literal["compact"]
    target_batch_records: Absent[int] = None
    batches_before: Absent[int] = None
    batches_after: Absent[int] = None
    bytes_before: Absent[int] = None
    bytes_after: Absent[int] = None
    # documents (docs/compact.py)
    layout: Absent[str] = None  # "docs"
    shards_folded: Absent[list[int]] = None
    table: Absent[str] = None
    documents_rewritten: Absent[int] = None
    text_bytes_rewritten: Absent[int] = None
    fold_seconds: Absent[float] = None


#: a run of a kind this version knows
AnyRun = LoadRun | IngestRun | FinalizeRun | CompactRun
#: the class of each kind of run
RUN_CLASSES: dict[str, type[Run]] = {
    "load": LoadRun,
    "ingest": IngestRun,
    "finalize": FinalizeRun,
    "compact": CompactRun,
}
Run._by_tag = RUN_CLASSES  # Run.from_dict builds the run of its kind's class


def run_shapes() -> Any:
    """The tagged union (on ``kind``) of the msgspec Structs of the known kinds of runs:
    the type of each run in a manifest whose runs are all of known kinds."""
    shapes: tuple[type[msgspec.Struct], ...] = tuple(cls.shape() for cls in RUN_CLASSES.values())
    return typing.Union[shapes]  # noqa: UP007  # a union built at runtime


@overload
def new_run(kind: Literal["load"], **details: Any) -> LoadRun: ...
@overload
def new_run(kind: Literal["ingest"], **details: Any) -> IngestRun: ...
@overload
def new_run(kind: Literal["finalize"], **details: Any) -> FinalizeRun: ...
@overload
def new_run(kind: Literal["compact"], **details: Any) -> CompactRun: ...
@overload
def new_run(kind: Literal["load", "ingest"], **details: Any) -> LoadRun | IngestRun: ...
@overload
def new_run(kind: RunKind, **details: Any) -> AnyRun: ...
@overload
def new_run(kind: str, **details: Any) -> Run: ...
def new_run(kind: str, **details: Any) -> Run:
    """A run that starts now, in this process, of its kind's class."""
    return RUN_CLASSES.get(kind, Run)(
        id=uuid.uuid4().hex[:12],
        kind=kind,
        status="running",
        started=time.time(),
        ended=None,
        host=os.uname().nodename,
        pid=os.getpid(),
        **details,
    )  # = socket.gethostname(), lighter


def need(run: Run, name: str, value: T | None) -> T:
    """``value``, run ``run``'s field ``name``, which its kind always records (a load run
    its plan, a finalize run its strategy): ManifestError if the run lacks it."""
    if value is None:
        raise ManifestError(
            f"run {run.id} ({run.kind}) has no `{name}`, which every {run.kind} run records: the "
            "dataset's metadata is damaged; restore it from a backup, or rebuild the dataset with --replace"
        )
    return value


UNFINISHED: tuple[UnfinishedStatus, ...] = UNFINISHED_STATUSES
#: how `info` shows a run of the dataset a --replace started over (`as_seen`)
REPLACED: ShownStatus = "replaced"


def current(m: Manifest) -> list[Run]:
    """The runs that describe the dataset's current content (since the last --replace):
    the catalog indexes the last --replace, so this reads only those runs."""
    return m.runs.since_replace()


def recent(m: Manifest) -> Iterator[Run]:
    """`current` newest first, read lazily (stop at the run you look for)."""
    return m.runs.recent()


def mark_interrupted(m: Manifest) -> bool:
    """Runs still ``running`` while we hold the lock belong to a job that died (the
    catalog indexes the unfinished runs: the others are not read)."""
    return _interrupt(m.runs.unfinished())


def as_seen(m: Manifest, job_running: bool, last: int | None = None) -> list[Run]:
    """The runs (the ``last`` ones only, reading only those) as a reader reports them:
    while no job holds the dataset lock (``job_running`` False), a run still ``running`` is
    one whose job died: shown ``interrupted`` (the next writer records it so). Runs before
    the last --replace (the history of the dataset it started over, kept in the list) are
    shown ``replaced``: none of their records is in the dataset."""
    runs, first = m.runs.tail(len(m.runs) if last is None else last)
    shown = [r.copy() for r in runs]
    if not job_running:
        _interrupt(shown)
    replace_at = m.runs.last_replace()
    for i, r in enumerate(shown):
        if first + i < replace_at:
            r.status = REPLACED
    return shown


def _interrupt(runs: list[Run]) -> bool:
    changed = False
    for r in runs:
        if r.status == "running":
            r.status = "interrupted"
            r.error = r.error or "the job stopped without finishing (killed or crashed)"
            changed = True
    return changed


def last_matching(m: Manifest, kind: str, source: str, fingerprint: str | None) -> SourceRun | None:
    if fingerprint is None:
        return None
    for r in recent(m):
        if isinstance(r, SourceRun) and r.kind == kind and r.source == source and r.fingerprint == fingerprint:
            return r
    return None


def options_match(run: SourceRun, **opts: object) -> bool:
    return all(getattr(run, k) == v for k, v in opts.items())


def compacted_since(m: Manifest, run: Run) -> bool:
    """A compaction after ``run`` may have rewritten the stores: its pending rows are void
    (the catalog indexes the last done compaction)."""
    return m.runs.compacted_after(run)


def load_resumable(m: Manifest, run: Run, **opts: object) -> bool:
    """Can this unfinished load run be resumed on the dataset as it is now?"""
    return (
        isinstance(run, SourceRun)
        and run.status in UNFINISHED
        and bool(run.resumable)
        and run.first_seq == m.next_seq
        and run.first_record == m.next_record
        and options_match(run, **opts)
        and not compacted_since(m, run)
    )


def supersede(m: Manifest, keep: Run | None, by: str) -> list[str]:
    """Unfinished load and ingest runs other than ``keep`` lose their pending batches (the
    new run's workers delete them); returns their ids."""
    ids = []
    for r in m.runs.unfinished():
        if r is keep or r.status not in UNFINISHED or not isinstance(r, SourceRun):
            continue
        if r.pending or r.resumable:
            if r.pending and not committed_any(r):  # one that committed inputs stays failed / interrupted
                r.status = "superseded"
                r.superseded_by = by
            r.pending = []
            r.resumable = False
            ids.append(r.id)
    return ids


def committed_any(run: Run) -> bool:
    """Did ``run`` commit records (a run of several inputs: some of its inputs) before it
    stopped?"""
    inputs = run.inputs or [] if isinstance(run, LoadRun) else []
    return bool(run.records) or any(e.get("committed") for e in inputs)


def restart(run: SourceRun) -> None:
    """An unfinished run is being resumed by this job."""
    run.update(status="running", ended=None, error=None, pid=os.getpid(), host=os.uname().nodename)
    run.attempts = (run.attempts or 1) + 1
    run.resumed = [*(run.resumed or []), time.time()]


def finish(run: SourceRun, status: RunStatus, **fields: Any) -> None:
    run.update(status=status, ended=time.time(), **fields)
    if status == "done":
        run.drop("pending")
        run.resumable = False
        run.error = None


def fail(run: Run, exc: BaseException) -> None:
    """``run`` stopped before it was done: ``interrupted`` by a signal (KeyboardInterrupt,
    Interrupted), else ``failed``; either way an unfinished run, resumed by the same command."""
    if isinstance(exc, KeyboardInterrupt):
        run.update(status="interrupted", ended=time.time(), error=str(Interrupted.of(exc)))
        return
    err = str(exc) if isinstance(exc, BulkloadError) else f"{type(exc).__name__}: {exc}"
    run.update(status="failed", ended=time.time(), error=err)


def save_stopped(m: Manifest, root: str) -> None:
    """Save manifest ``m`` that records a stopped run. If that write fails too (the full
    disk that stopped the run), the run's own error is still the one to raise: the
    manifest on disk is the previous one, whose run the next writer finds unfinished."""
    try:
        m.save(root)
    except (BulkloadError, OSError):
        pass


def stop(run: Run, exc: BaseException, outcome: str) -> BaseException:
    """Record why ``run`` stopped (see `fail`) and return the exception to raise: a signal
    as ``Interrupted``, or the error itself; a signal and a dead worker carry ``outcome``
    (what of the run was committed: only the run knows, not the pool)."""
    if isinstance(exc, KeyboardInterrupt):
        exc = Interrupted.of(exc)
        exc.outcome = outcome
    elif isinstance(exc, WorkerError) and exc.died:
        exc.outcome = outcome
    fail(run, exc)
    return exc
