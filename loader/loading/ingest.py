"""`ingest`: load each new file of a directory exactly once, in name order.

    bulkload ingest DATASET --from DIR [--pattern '*.bin'] [--on-bad-file fail|skip]

(This module: files of fixed-size records. A documents dataset - layout ``docs``, given
by ``--layout docs`` or the dataset's manifest - is ingested by the documents plug-in,
loader/docs/ingest.py, through its record kind's ``ingest_directory``.) One run:

1. lists DIR and, with the dataset locked, sorts its files: already ingested, changed
   (refused), still being written (deferred), bad, new (ingest_scan.py);
2. loads the new files as one plan (one segment per file, consecutive batch seqs,
   ingest_plan.py) and commits each file as soon as all its batches are durable
   (commit.py): a file counts as ingested exactly when its batches are committed, in the
   same manifest write;
3. bad files: ``fail`` (default) loads the files before the first bad one, then exits 1
   naming it (and the byte offset of a partial record); ``skip`` reports it and loads
   the others (a file found bad while the workers read it is left out and the files
   after it are planned again). A bad file is looked at again by every run until it is
   fixed or removed.

Crash behaviour: a crashed run is resumed by the next one: first the rest of its plan
(files still unchanged), keeping the batches that were already durable, then any newer
files. So the dataset ends byte-identical to an uninterrupted run. A run with nothing to
do writes nothing (a cron job every minute does not grow the manifest).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import asdict, dataclass, field

from ..errors import (
    InputError,
    Interrupted,
    MissingPathError,
    PartialRecordError,
    SourceVanishedError,
    UnreadableInputError,
    UsageError,
    WorkerError,
)
from ..infra import faults, interrupts
from ..infra.lock import DatasetLock
from ..maintain.garbage import start_writing
from ..model import manifest as mf
from ..model import runs
from ..model.engine_keys import EngineKeys
from ..model.layouts import get_layout
from ..model.runs import IngestRun, PlanFile
from ..sources import refuse_pseudo_file
from ..stores.health import require_shards
from ..stores.spec import StoreSpec, parse_dataset_uri
from .commit import Committer, resume_points
from .execute import Work, execute
from .ingest_plan import file_unit, number_files, resumable_plan, segments_of
from .ingest_scan import Candidate, Scan, classify, list_dir, listing_for
from .job import Request, RunSettings
from .options import (
    check_bad_file_policy,
    check_compatible,
    checkpoint_settings,
    fresh_manifest,
    prepare_root,
    resolve_options,
)
from .plan import Plan
from .report import log


@dataclass
class IngestReport(EngineKeys):
    """The report of `ingest`, of fixed-size records and of documents alike."""

    dataset: str
    directory: str
    pattern: str | None  # None for documents (every <id>.json is read)
    run_id: str | None
    status: str  # done | nothing-to-do | failed
    layout: str | None = None  # the layout of the records (files of raw records are read as it)
    # ingested by this run: name, records (fixed-size records: batches, first_record too)
    files: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # bad files: name, reason
    deferred: list[dict] = field(default_factory=list)  # still being written: name, reason
    already: int = 0  # files present that were ingested before
    records: int = 0
    batches: int = 0
    bytes: int = 0
    resumed_records: int = 0
    seconds: float = 0.0
    mb_per_s: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict:
        """What ``--json`` prints: ``pattern`` only for fixed-size records."""
        out = asdict(self)
        for key in ("pattern", "layout"):
            if out[key] is None:
                del out[key]
        return out | self.engine


def ingest(
    dataset: str,
    from_dir: str,
    *,
    pattern: str = "*",
    on_bad_file: str = "fail",
    layout: str | None = None,
    format: str | None = None,
    compression: str | None = None,
    shards: int | None = None,
    workers: int | None = None,
    batch_records: int | None = None,
    progress: str = "none",
    checkpoint_seconds: float | None = None,
    checkpoint_bytes: int | None = None,
) -> IngestReport:
    """Ingest the new files of ``from_dir``; an IngestReport."""
    t_start = time.perf_counter()
    request = Request(
        format=format,
        compression=compression,
        shards=shards,
        workers=workers,
        batch_records=batch_records,
        progress=progress,
        fault=faults.from_env(),
        t_start=t_start,
        checkpoint_seconds=checkpoint_seconds,
        checkpoint_bytes=checkpoint_bytes,
    )
    spec, settings, directory, _ = _checked(dataset, from_dir, pattern, on_bad_file, layout, request)
    kind = settings.kind()
    if kind.own_ingest:  # e.g. documents: <id>.json files (loader/docs/ingest.py)
        return kind.ingest_directory(spec, directory, pattern=pattern, settings=settings, on_bad_file=on_bad_file)
    return _ingest(spec, settings, directory, pattern, on_bad_file)


def check(
    dataset: str,
    from_dir: str,
    *,
    pattern: str = "*",
    on_bad_file: str = "fail",
    layout: str | None = None,
    format: str | None = None,
    compression: str | None = None,
    shards: int | None = None,
    workers: int | None = None,
    batch_records: int | None = None,
    checkpoint_seconds: float | None = None,
) -> RunSettings:
    """What `ingest` checks before it writes, without ingesting: the run's settings, or the
    error the ingest would raise (a pipeline checks its [ingest] with it before its first
    step: api/pipeline_check.py)."""
    request = Request(
        format=format,
        compression=compression,
        shards=shards,
        workers=workers,
        batch_records=batch_records,
        checkpoint_seconds=checkpoint_seconds,
    )
    spec, settings, _, existing = _checked(dataset, from_dir, pattern, on_bad_file, layout, request)
    if existing is not None:
        check_compatible(existing, spec, settings)
    return settings


def _checked(
    dataset: str, from_dir: str, pattern: str, on_bad_file: str, layout: str | None, request: Request
) -> tuple[StoreSpec, RunSettings, str, mf.Manifest | None]:
    """(dataset spec, run settings, the directory's absolute path, the dataset's manifest or
    None), every option checked."""
    check_bad_file_policy(on_bad_file)
    if not pattern:
        raise UsageError("--pattern must not be empty (use '*' for every file)")
    directory = os.path.abspath(from_dir)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(
            f"--from {from_dir} is a file, not a directory: ingest loads the new files of a "
            "directory; give the directory the files arrive in, or load one file with "
            "bulkload load FILE DATASET"
        )
    if not os.path.isdir(directory):
        raise MissingPathError(f"directory {from_dir} does not exist (--from); create it or fix the path")
    refuse_pseudo_file(from_dir)
    spec = parse_dataset_uri(dataset)
    existing = mf.load_manifest(spec.root, spec.uri) if mf.exists(spec.root) else None
    settings, spec = resolve_options(spec, existing, get_layout(layout) if layout else None, request)
    checkpoints = checkpoint_settings(request.checkpoint_seconds, request.checkpoint_bytes)
    return spec, dataclasses.replace(settings, checkpoints=checkpoints), directory, existing


def _ingest(spec: StoreSpec, settings: RunSettings, directory: str, pattern: str, on_bad_file: str) -> IngestReport:
    """Files of fixed-size records: list, sort, and load the new ones, with the dataset locked."""
    progress = settings.progress
    report = IngestReport(spec.uri, directory, pattern, None, "nothing-to-do", layout=settings.layout.name)
    listing = list_dir(directory, pattern)
    prepare_root(spec)
    with DatasetLock(spec.root) as lock:
        lock.set_job(f"ingest {directory}/{pattern}")
        m = mf.load_manifest(spec.root, spec.uri) if mf.exists(spec.root) else None
        start_writing(spec, m, progress=progress)
        if m is not None:
            check_compatible(m, spec, settings)
        require_shards(spec, m)
        # the interrupted run's plan, as far as its files are unchanged
        prev, kept_plan = resumable_plan(m, directory, pattern, settings.run_options()) if m is not None else (None, [])
        scan = classify(listing, m, {e.name for e in kept_plan}, settings.layout.record_size)
        report.already, report.deferred = scan.already, scan.deferred
        first_bad = _set_bad_aside(report, scan, on_bad_file, progress)
        if not kept_plan and not scan.new:
            if first_bad is not None:
                raise first_bad
            report.seconds = round(time.perf_counter() - settings.t_start, 4)
            log(
                progress,
                f"ingest {directory}: nothing new ({report.already} files already ingested)",
                event="nothing-to-do",
                already=report.already,
            )
            return report
        b = runs.need(prev, "batch_records", prev.batch_records) if prev is not None else settings.batch_records
        if m is None or not m.batches:
            m = fresh_manifest(m, spec, settings, b)
        ingest_run = _IngestRun(spec, settings, m, report, directory, pattern, on_bad_file, b)
        return ingest_run.run(prev, kept_plan, scan.new, first_bad)


def _set_bad_aside(report: IngestReport, scan: Scan, on_bad_file: str, progress: str) -> InputError | None:
    """``fail``: the first bad file's error (the files after it are not loaded); ``skip``:
    the bad files are reported. Logs the deferred files."""
    first_bad = None
    if scan.bad and on_bad_file == "fail":
        c, first_bad = min(scan.bad, key=lambda x: x[0].name)
        scan.new = [n for n in scan.new if n.name < c.name]
    else:
        for c, e in scan.bad:
            report.skipped.append({"name": c.name, "reason": str(e)})
            log(progress, f"skipping bad file {c.name}: {e}", level="warning", file=c.name, event="skipped")
    for d in report.deferred:
        log(
            progress,
            f"leaving {d['name']} for the next run: it is still being written",
            file=d["name"],
            event="deferred",
        )
    return first_bad


@dataclass
class _Started:
    """An attempt of the run as `_IngestRun.start` set it up: the run record (the interrupted
    one, restarted, or a new one), its plan, resume points, file units and committer."""

    run: IngestRun
    plan: Plan
    resume: tuple
    units: list
    committer: Committer


@dataclass
class _Attempt:
    """How an attempt at the run ended (`_IngestRun.attempt`)."""

    receipts: list = field(default_factory=list)
    late: BaseException | None = None  # an error after every file was committed
    retry: list[Candidate] | None = None  # a bad file was set aside (skip): plan these files again


class _IngestRun:
    """The run of an ingest: attempts (a bad file found by the workers is set aside under
    ``skip`` and the files after it planned again), then the commit."""

    def __init__(
        self,
        spec: StoreSpec,
        settings: RunSettings,
        m: mf.Manifest,
        report: IngestReport,
        directory: str,
        pattern: str,
        on_bad_file: str,
        b: int,
    ):
        self.spec, self.settings, self.m, self.report = spec, settings, m, report
        self.directory, self.pattern, self.on_bad_file, self.b = directory, pattern, on_bad_file, b
        self.excluded: set[str] = set()  # bad files the workers found (skip)

    def run(
        self, prev: IngestRun | None, kept_plan: list[PlanFile], new: list[Candidate], first_bad: InputError | None
    ) -> IngestReport:
        while True:
            plan = number_files(
                kept_plan,
                [c for c in new if c.name not in self.excluded],
                self.m,
                self.b,
                self.settings.layout.record_size,
            )
            st = self.start(prev, plan, len(kept_plan))
            got = self.attempt(st, plan)
            if got.retry is None:
                return self.commit(st, got, first_bad)
            new, kept_plan, prev = got.retry, [], st.run  # the rest is renumbered: nothing kept
            st.run.pending = []

    def start(self, prev: IngestRun | None, plan: list[PlanFile], nkept: int) -> _Started:
        """The run record (the interrupted one, restarted, or a new one) and its committer."""
        m, settings, progress = self.m, self.settings, self.settings.progress
        if prev is not None:
            run = prev
            runs.restart(run)
        else:
            run = runs.new_run(
                "ingest",
                source=f"{self.directory}/{self.pattern}",
                directory=self.directory,
                pattern=self.pattern,
                workers=settings.nworkers,
            )
            run.update(batch_records=self.b, resumable=True, **settings.run_options())
            m.runs.append(run)
        run.update(plan=plan, first_seq=m.next_seq, first_record=m.next_record, workers=settings.nworkers)
        self.report.run_id = run.id
        gone = runs.supersede(m, run, by=run.id)
        if gone:
            log(progress, f"discarding the unfinished run(s) {', '.join(gone)}", superseded=gone)
        work_plan = Plan(tuple(segments_of(plan, self.directory)), self.b, settings.shards, m.next_seq, m.next_record)
        if prev is not None:
            resume, keep = resume_points(self.spec, work_plan, run.pending or [])
            self.report.resumed_records = sum(e.count for e in keep)
            log(
                progress,
                f"resuming ingest run {run.id}: {nkept} file(s) of its plan unchanged, "
                f"{len(keep)} durable batches kept",
                run=run.id,
                event="resume",
            )
        else:
            resume, keep = (), []
        log(
            progress,
            f"ingest {len(plan)} file(s) from {self.directory} into {self.spec.uri}: run {run.id}",
            run=run.id,
            files=[e.name for e in plan],
            event="start",
        )
        units = [file_unit(e, self.b, run.id, self.directory) for e in plan]
        return _Started(run, work_plan, resume, units, Committer(self.spec.root, m, run, units, keep))

    def attempt(self, st: _Started, plan: list[PlanFile]) -> _Attempt:
        """Run the workers. A bad file under ``skip`` is set aside (retry the files after
        it); an error that is not bad input stops the run (raised, the run recorded)."""
        committer, run, settings = st.committer, st.run, self.settings
        try:
            committer.save()
            work = Work(settings, st.plan, settings.nworkers, "ingest", st.resume)
            return _Attempt(receipts=execute(self.spec, self.m, committer, work))
        except BaseException as e:
            _collect(self.report, committer)
            if committer.complete:  # every file was committed before the error
                log(
                    settings.progress, f"run {run.id}: every file was committed before this error: {e}", level="warning"
                )
                return _Attempt(late=e)
            name, err = _bad_input(e, self.directory) if isinstance(e, WorkerError) else (None, None)
            if name is None or self.on_bad_file == "fail" or name in self.excluded:
                e = runs.stop(run, err or e, _committed(self.report, committer))
                committer.save_quietly()
                raise e from None
            # skip it and go on with the files after it (renumbered: nothing kept)
            self.report.skipped.append({"name": name, "reason": str(err)})
            log(settings.progress, f"skipping bad file {name}: {err}", level="warning", file=name, event="skipped")
            self.excluded.add(name)
            committed = {u.name for u in committer.committed_units}
            return _Attempt(retry=listing_for(plan, self.directory, committed, self.excluded))

    def finished(self, run: IngestRun) -> str:
        report = self.report
        return f"run {run.id} had finished: {len(report.files)} file(s) ({report.records:,} records) were committed"

    def commit(self, st: _Started, got: _Attempt, first_bad: InputError | None) -> IngestReport:
        """Commit the files whose batches are all durable; record the run; the report."""
        run, report, committer, units = st.run, self.report, st.committer, st.units
        with interrupts.held(
            functools.partial(self.finished, run)
        ):  # the commit is written whole; a stop signal waits for it
            faults.hit("commit")
            committer.finish(got.receipts)
            _collect(report, committer)
            if committer.stopped:
                for u in units[committer.next :]:
                    report.deferred.append(
                        {
                            "name": u.name,
                            "reason": committer.stopped
                            if u is units[committer.next]
                            else "after a file that changed while being loaded; left for the next run",
                        }
                    )
            seconds = time.perf_counter() - self.settings.t_start
            runs.finish(
                run,
                "done",
                seconds=round(seconds, 3),
                files=len(report.files),
                skipped=[s["name"] for s in report.skipped],
                deferred=[d["name"] for d in report.deferred],
            )
            if first_bad is not None:
                runs.fail(run, first_bad)
                run.drop("pending")
                run.resumable = False
            self.m.save(self.spec.root)
        report.status = "failed" if first_bad is not None else "done"
        report.seconds = round(seconds, 4)
        report.mb_per_s = round(report.bytes / seconds / 1e6, 2) if seconds > 0 else 0.0
        log(
            self.settings.progress,
            f"ingested {len(report.files)} file(s), {report.records:,} records of layout "
            f"{self.settings.layout.name} into {self.spec.uri} (run {run.id})",
            run=run.id,
            stage="ingest",
            layout=self.settings.layout.name,
            files=len(report.files),
            records=report.records,
            event="done",
        )
        if isinstance(got.late, KeyboardInterrupt):
            late = Interrupted.of(got.late)
            late.outcome = self.finished(run)
            raise late from None
        if first_bad is not None:
            raise first_bad
        return report


def _committed(report: IngestReport, committer: Committer) -> str:
    """What of this run is committed, for the message of an error or signal that stops it
    (after ``_collect``): files and records, and what to do."""
    total = len(report.files) + len(committer.units) - committer.next
    if not report.files:
        return f"none of its {total} file(s) was committed; re-run the same command to resume"
    return (
        f"{len(report.files)} of {total} file(s) ({report.records:,} records) were committed; re-run the "
        "same command to load the rest"
    )


def _collect(report: IngestReport, committer: Committer) -> None:
    """Add the files the committer has committed to the report."""
    seen = {f["name"] for f in report.files}
    for u in committer.committed_units:
        if u.name not in seen:
            report.files.append(
                {"name": u.name, "records": u.records, "batches": u.nbatches, "first_record": u.first_record}
            )
            report.records += u.records
            report.batches += u.nbatches
    if report.files:
        rs = committer.m.layout_obj.record_size
        report.bytes = report.records * rs


def _bad_input(e: WorkerError, directory: str) -> tuple[str | None, InputError | None]:
    """A worker failed on a source file: (its name, the input error it raised)."""
    err = e.raised(PartialRecordError, SourceVanishedError, UnreadableInputError)
    if not isinstance(err, InputError):  # None: not one of them
        return None, None
    path = str(err).split(":", 1)[0]  # these errors name their file first
    name = os.path.relpath(path, directory) if path.startswith(directory + os.sep) else None
    return name, err
