"""One load run, with the dataset locked: match, run, commit (`load_locked`).

1. match the source against the dataset's runs (`match_previous`): finished -> nothing
   to do ("already loaded"); interrupted -> resume it (same plan, keep its durable
   batches); otherwise a new run. A file is matched by extent (file_runs.py): a grown
   file loads only its new records, a changed one is refused. Several inputs are
   matched one by one (inputs.py): the run loads those not loaded yet, one segment and
   one commit unit each;
2. start the run: its record in the manifest, its table (documents), its plan;
3. run the workers (execute.py; they checkpoint durable batches as they go, commit.py);
4. commit: list the run's batches in the manifest, atomically (a file is fingerprinted
   again first: if the bytes loaded changed meanwhile, nothing is committed).

Crash behaviour: a missing or damaged shard stops the run before anything is written
(stores/health.py); a run stopped by an error or a signal records why (``failed`` /
``interrupted``), keeps its durable batches for a resume, and commits nothing - except
bad input (the record kind says which), after which nothing of the run stays; a stop
signal during the commit waits for the manifest write (infra/interrupts.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TypeGuard

from ..errors import ChangedInputError, Interrupted, WorkerError
from ..infra import faults, interrupts
from ..maintain.garbage import held_tables
from ..model import manifest as mf
from ..model import runs
from ..model.runs import LoadRun, Run, SourceRun
from ..stores.health import require_shards
from ..stores.spec import StoreSpec
from . import inputs
from .commit import Committer, Unit, resume_points
from .execute import Work, execute, execute_stream, prewarm
from .file_runs import FilePlan, changed_while_loading, last_loaded, plan_file_run
from .job import LoadJob
from .options import fresh_manifest
from .plan import Plan, Segment
from .report import LoadReport, RunOutput, log, make_report, records_of, text_bytes_of
from .task import RunTable


@dataclass(frozen=True)
class Match:
    """What the dataset's runs say about a job's source."""

    prev: SourceRun | None  # the run to resume, or the finished run that already loaded the source
    total: int | None  # records the run loads
    fingerprint: str | None
    file_plan: FilePlan | None = None  # a file: the extent the run loads (file_runs.py)
    inputs: inputs.InputsMatch | None = None  # several inputs: those the run loads (inputs.py)


def part_of_build(run: Run, replaces: str | None) -> TypeGuard[LoadRun]:
    """Is this run part of the `--replace` build that replaces dataset ``replaces``?"""
    return isinstance(run, LoadRun) and bool(run.replace) and run.replaces == replaces


def load_locked(spec: StoreSpec, m: mf.Manifest | None, job: LoadJob) -> LoadReport:
    """The load proper, with the dataset locked (see LoadJob for ingest runs and --replace
    builds: then ``spec``/``m`` are the sibling being built)."""
    require_shards(spec, m)  # a missing or damaged shard stops every writer before it writes
    match = match_previous(m, job)
    prev, settings = match.prev, job.settings
    if prev is not None and prev.status == "done" and not job.new_run:
        src = job.planned.source
        if job.replace:  # built completely before a crash, never swapped in: just swap
            return make_report(spec, settings, prev, RunOutput(), source=src.uri, records=prev.records or 0)
        log(
            settings.progress,
            f"nothing to do: {src.uri} was already loaded into {spec.uri} by run {prev.id} "
            f"({prev.records or 0:,} records); use --new-run to load it again",
            run=prev.id,
            source=src.uri,
            event="already-loaded",
        )
        return make_report(spec, settings, prev, RunOutput(), source=src.uri, status="already-loaded")
    return _LoadRun(spec, m, job, match).run()


def match_previous(m: mf.Manifest | None, job: LoadJob) -> Match:
    """The run of the dataset this job's source continues (to resume, or already done)."""
    planned, settings = job.planned, job.settings
    src = planned.source
    considered = lambda r: not job.replace or part_of_build(r, job.replaces)
    prev: SourceRun | None
    if planned.parts and planned.source.replayable:
        return _match_inputs(m, job, considered)
    if src.by_extent and job.mode == "load":
        fplan = plan_file_run(
            m,
            src,
            settings.layout,
            new_run=job.new_run,
            considered=considered,
            resumable=lambda r: m is not None and runs.load_resumable(m, r, **settings.run_options()),
        )
        if fplan.status == "appended" and fplan.prev is not None:  # the finished run it continues
            log(
                settings.progress,
                f"{src.uri} grew since run {fplan.prev.id} loaded its first {fplan.offset:,} "
                f"records: loading the {fplan.count:,} new ones",
                run=fplan.prev.id,
                source=src.uri,
                event="appended",
            )
        prev = fplan.prev if fplan.status in ("resume", "already-loaded") else None
        return Match(prev, fplan.count, fplan.fingerprint, fplan)
    if m is None:
        prev = None
    elif job.mode == "load":  # also as one of several inputs of a run
        prev = last_loaded(m, src.uri, planned.fingerprint)
    else:
        prev = runs.last_matching(m, job.mode, src.uri, planned.fingerprint)
    if job.replace and prev is not None and not part_of_build(prev, job.replaces):
        prev = None  # history of the dataset being replaced
    if job.mode == "ingest" and prev is not None and prev.status == "done":
        prev = None  # only an unfinished ingest run is taken up again
    return Match(prev, planned.total, planned.fingerprint)


def _match_inputs(m: mf.Manifest | None, job: LoadJob, considered) -> Match:
    """Several inputs: those the run loads (inputs.py); all of them loaded before: the
    match of an "already loaded" run."""
    settings = job.settings
    found = inputs.match_inputs(
        m,
        job.planned,
        settings.layout,
        new_run=job.new_run,
        considered=considered,
        resumable=lambda r: m is not None and resumable_inputs(m, r, settings),
    )
    if found.loaded_by and found.todo:
        log(
            settings.progress,
            f"{len(found.loaded_by)} of the {len(job.planned.parts)} inputs were already loaded "
            f"(by run {', '.join(sorted(set(found.loaded_by)))}): loading the other {len(found.todo)}",
            event="already-loaded-inputs",
            runs=sorted(set(found.loaded_by)),
        )
    prev = found.resume
    if not found.todo:  # every input was loaded before
        prev = LoadRun(id=found.loaded_by[-1], kind="load", status="done", records=found.loaded_records)
    return Match(prev, found.total, job.planned.fingerprint, inputs=found)


def resumable_inputs(m: mf.Manifest, run: Run, settings) -> bool:
    """Can this unfinished run of several inputs be taken up again (where its committed
    inputs end: inputs.py checks that)?"""
    return (
        isinstance(run, SourceRun)
        and run.status in runs.UNFINISHED
        and bool(run.resumable)
        and runs.options_match(run, **settings.run_options())
        and not runs.compacted_since(m, run)
    )


def of_inputs(run: SourceRun) -> LoadRun:
    """``run``, of several inputs: a load run (only load jobs match inputs: inputs.py)."""
    assert isinstance(run, LoadRun), f"run {run.id} of several inputs is a {run.kind} run"
    return run


class _LoadRun:
    """One run from its start to its commit; the state its steps share."""

    def __init__(self, spec: StoreSpec, m: mf.Manifest | None, job: LoadJob, match: Match):
        self.spec, self.job, self.match, self.settings = spec, job, match, job.settings
        self.kind = job.settings.kind()
        self.resume = self._resumable(m, match.prev)
        self.b = (
            runs.need(self.resume, "batch_records", self.resume.batch_records)
            if self.resume is not None
            else self.settings.batch_records
        )
        self.m = m if m is not None and m.batches else fresh_manifest(m, spec, self.settings, self.b)
        self.planned, self.total, self.skipped = job.planned, match.total, list(job.planned.skipped)
        if job.mode == "load":  # what the dataset may not take twice (documents: ids already stored)
            self.planned = self.kind.vet_new(spec, self.m, self.planned)
            if self.planned.entries is not None:
                self.total, self.skipped = self.planned.total, list(self.planned.skipped)
        self.stream = not self.planned.source.replayable
        self.run_record = self._start_record()
        self.table = self._table()
        self.src = self.planned.for_run(spec.root, self.run_record.id)  # a directory: its plan file

    def _resumable(self, m: mf.Manifest | None, prev: SourceRun | None) -> SourceRun | None:
        """``prev`` if this job resumes it (logging a batch size it keeps), else None."""
        settings = self.settings
        checked = self.match.inputs is not None  # several inputs: inputs.match_inputs checked it
        if (
            prev is None
            or self.job.new_run
            or m is None
            or not (checked or runs.load_resumable(m, prev, **settings.run_options()))
        ):
            return None
        if settings.batch_records_given and prev.batch_records != settings.batch_records:
            log(
                settings.progress,
                f"resuming run {prev.id} with its batch size {prev.batch_records} "
                f"(not --batch-records {settings.batch_records}); use --new-run to start over with another size",
            )
        return prev

    def _start_record(self) -> SourceRun:
        """The run's record in the manifest: the resumed one, restarted, or a new one."""
        m = self.m
        run: SourceRun
        if self.resume is not None:
            run = self.resume
            runs.restart(run)
        else:
            run = self._new_record()
            m.runs.append(run)
        if self.match.inputs is not None:
            inputs.start(of_inputs(run), self.match.inputs, self.b)
        gone = runs.supersede(m, run, by=run.id)
        if gone:
            log(
                self.settings.progress,
                f"discarding the unfinished run(s) {', '.join(gone)}: their pending batches "
                "are overwritten by this run",
                superseded=gone,
            )
        run.workers = self.settings.nworkers
        if self.skipped:
            run.skipped = self.skipped
        return run

    def _new_record(self) -> SourceRun:
        """A new run of the job's kind, its plan recorded."""
        m, job, src, fplan = self.m, self.job, self.planned.source, self.match.file_plan
        run = runs.new_run(job.mode, source=src.uri, fingerprint=self.match.fingerprint, workers=None)
        run.update(
            first_seq=m.next_seq,
            first_record=m.next_record,
            total=self.total,
            batch_records=self.b,
            resumable=self.match.fingerprint is not None,
            **self.settings.run_options(),
        )
        if isinstance(run, LoadRun):  # a file's extent, a --replace build: load jobs only (LoadJob)
            if fplan is not None:
                run.source_offset = fplan.offset
            if job.replace:
                run.update(replace=True, replaces=job.replaces)
        return run

    def _table(self) -> RunTable:
        """The table the run writes (keyed records: a run above every stored id shares the
        table of the highest ones) and the tables that are not leftovers."""
        kind, run, m = self.kind, self.run_record, self.m
        table, clear_from = kind.run_table(run.id), -1
        if kind.keyed:
            if not run.has("table") and self.resume is not None:  # a run from before shared tables
                run.table, run.clear_from = table, -1
            elif not run.has("table"):
                run.table, run.clear_from = kind.choose_table(run.id, m.batches, self.planned.id_span())
                kind.check_table_limit(self.spec, m, run.table)
            table, clear_from = run.table, -1 if run.clear_from is None else run.clear_from
        # fixed-size records keep no tables of their own: only documents read the rows here
        listed = {e.table for e in m.batches if e.table} if kind.keyed else set()
        keep = tuple(sorted(listed | held_tables(m)))
        return RunTable(table, keep, clear_from)

    # --- running ---------------------------------------------------------------------------
    def run(self) -> LoadReport:
        run, settings = self.run_record, self.settings
        plan = self._plan()
        resume, keep = self._resume_points(plan)
        committer = Committer(self.spec.root, self.m, run, self._units(), keep, record_pending=not self.stream)
        run.records, run.batches = 0, 0
        work = Work(
            settings,
            plan,
            settings.nworkers,
            self.job.mode,
            resume,
            self.table,
            self.kind.store_options(self.spec.scheme),
        )
        late = None  # an error after every batch was committed
        if not self.stream:  # (again for a resumed or replacing run: nothing when it runs already)
            prewarm(self.spec, settings, plan.records_from(resume))
        try:
            committer.save()
            receipts = self._execute(committer, work)
        except BaseException as e:
            if not committer.complete:
                raise self._stopped(e, committer, self._outcome(committer)) from None
            # everything was committed (at checkpoints) before this error, e.g. a worker died after
            # its last one: the run is done; only its figures are incomplete
            log(settings.progress, f"run {run.id}: every batch was committed before this error: {e}", level="warning")
            receipts, late = [], e
        with interrupts.held(self._finished):  # the commit is written whole; a stop signal waits for it
            report = self._commit(committer, RunOutput(tuple(receipts), tuple(keep), settings.nworkers))
        if isinstance(late, KeyboardInterrupt):
            late = Interrupted.of(late)
            late.outcome = self._finished()
            raise late from None
        return report

    def _entries(self) -> list[dict]:
        """What the run loads, one entry per input (``run.inputs``'s shape, inputs.py):
        of several inputs those not committed yet; of one source, the run's extent of it."""
        run = self.run_record
        if self.match.inputs is not None:
            return inputs.unloaded(of_inputs(run))
        return [
            {
                "source": self.src.uri,
                "fingerprint": run.fingerprint,
                "total": self.total,
                "source_offset": (run.source_offset if isinstance(run, LoadRun) else None) or 0,
                "first_seq": run.first_seq,
                "first_record": run.first_record,
            }
        ]

    def _part(self, entry: dict):
        """The source an entry of `_entries` reads."""
        if self.match.inputs is None:
            return self.src
        return next(p.source for p in self.planned.parts if p.source.uri == entry["source"])

    def _plan(self) -> Plan:
        """One segment per entry; the plan starts where the first one does (a resumed run of
        several inputs: after those it committed)."""
        entries = [] if self.stream else self._entries()
        segments = tuple(
            Segment(self._part(e), e["total"], e["first_seq"], e["first_record"], offset=e["source_offset"])
            for e in entries
        )
        run = self.run_record
        first_seq, first_record = (
            (entries[0]["first_seq"], entries[0]["first_record"])
            if entries
            else (runs.need(run, "first_seq", run.first_seq), runs.need(run, "first_record", run.first_record))
        )
        return Plan(segments, self.b, self.settings.shards, first_seq, first_record)

    def _resume_points(self, plan: Plan) -> tuple[tuple, list]:
        run, progress = self.run_record, self.settings.progress
        if self.resume is None:
            log(
                progress,
                f"{self.job.mode} {self.src.uri} into {self.spec.uri}: run {run.id}",
                run=run.id,
                source=self.src.uri,
                event="start",
            )
            return (), []
        resume, keep = resume_points(self.spec, plan, run.pending or [], self.kind)
        kept = sum(e.count for e in keep)
        left = "" if self.total is None else f", {self.total - kept:,} records to load"  # None: a stream
        log(
            progress,
            f"resuming run {run.id} of {self.src.uri}: {len(keep):,} batches ({kept:,} records) "
            f"already durable are kept{left}",
            run=run.id,
            kept_batches=len(keep),
            kept_records=kept,
            event="resume",
        )
        return resume, keep

    def _units(self) -> list[Unit]:
        """What becomes visible at once: each entry - the whole run of one source, each
        input of several (a stream's: known once it is read)."""
        return [] if self.stream else [self._unit(e) for e in self._entries()]

    def _unit(self, entry: dict) -> Unit:
        """An entry's commit unit: a file is committed only if the bytes loaded are the ones
        fingerprinted when the run began (file_runs.py); an input of several is then marked
        committed in the run record, in the same manifest write."""
        run, job, part, layout = self.run_record, self.job, self._part(entry), self.settings.layout
        end = entry["source_offset"] + entry["total"]

        def on_commit(m: mf.Manifest, unit: Unit) -> None:
            entry["committed"] = True
            if job.on_commit is not None:
                job.on_commit(m, unit, run)

        def check(unit: Unit) -> str | None:
            return changed_while_loading(part, layout, entry["fingerprint"], end)

        return Unit(
            entry["source"],
            entry["first_seq"],
            -(-entry["total"] // self.b),
            entry["first_record"],
            entry["total"],
            on_commit=on_commit,
            check=check if part.by_extent and job.mode == "load" else None,
        )

    def _execute(self, committer: Committer, work: Work) -> list:
        if not self.stream:
            return execute(self.spec, self.m, committer, work)
        receipts, self.total = execute_stream(self.spec, self.m, committer, work, self.src, self.job.stdin)
        run = self.run_record
        committer.units = [
            Unit(
                self.src.uri,
                runs.need(run, "first_seq", run.first_seq),
                sum(len(rc.batches) for rc in receipts),
                runs.need(run, "first_record", run.first_record),
                self.total,
            )
        ]
        run.total = self.total
        return receipts

    def _outcome(self, committer: Committer) -> str:
        """What of the run was committed when it stopped, and what to do."""
        if self.match.inputs is not None:
            return inputs.outcome(committer.next, len(committer.units))
        return "nothing from this run was committed; " + (
            "a stream cannot be replayed: re-run the whole producer pipeline"
            if self.stream
            else "re-run the same command to resume it"
        )

    def _finished(self) -> str:
        run = self.run_record
        return f"run {run.id} had finished: its {run.records:,} records were committed"

    def _stopped(self, e: BaseException, committer: Committer, outcome: str) -> BaseException:
        """The run stopped before its commit: record why, save; the exception to raise."""
        run, kind = self.run_record, self.kind
        bad = kind.input_error(e.error if isinstance(e, WorkerError) and e.error is not None else e)
        if bad is not None:  # bad input: nothing of this run stays in the stores
            run.pending, run.resumable = [], False
            kind.discard_run(self.spec, self.settings.shards, self.table.name, self.table.clear_from)
            e = bad
        e = runs.stop(run, e, outcome)
        committer.save_quietly()
        return e

    # --- committing ------------------------------------------------------------------------
    def _commit(self, committer: Committer, output: RunOutput) -> LoadReport:
        """Commit what the workers wrote (nothing if the file changed meanwhile); the report."""
        run = self.run_record
        try:
            faults.hit("commit")
            committer.finish(output.receipts)
        except BaseException as e:
            raise self._stopped(e, committer, self._outcome(committer)) from None
        if committer.stopped:  # a file changed while it was loaded: its batches are not kept
            run.pending, run.resumable = [], False
            outcome = (
                inputs.outcome(committer.next, len(committer.units), rest="load the rest as it is now")
                if self.match.inputs is not None
                else "nothing from this run was committed; re-run the same command to load the file as it is now"
            )
            raise self._stopped(ChangedInputError(f"{committer.stopped}; {outcome}"), committer, outcome) from None
        if committer.next < len(committer.units):  # cannot happen: every batch has a receipt
            raise WorkerError("the workers did not write every planned batch; nothing was committed")
        return self._write_commit(output)

    def _write_commit(self, output: RunOutput) -> LoadReport:
        """Write the commit (every batch is in the manifest's list, the run done); the report."""
        run, settings, src = self.run_record, self.settings, self.src
        seconds = time.perf_counter() - settings.t_start
        skipped = sorted(self.skipped + output.skipped, key=lambda f: f["path"])
        if skipped:
            run.skipped = skipped
            for f in skipped:
                log(
                    settings.progress,
                    f"skipped bad file {f['path']}: {f['reason']}",
                    level="warning",
                    file=f["path"],
                    event="skipped",
                )
        if self.kind.keyed:
            run.text_bytes = text_bytes_of(output.written + list(output.keep))
        runs.finish(
            run,
            "done",
            seconds=round(seconds, 3),
            written_records=records_of(output.written),
            kept_records=records_of(output.keep),
            map_grows=output.map_grows,
        )
        src.committed()  # e.g. a directory's plan file is removed
        self.m.save(self.spec.root)
        log(
            settings.progress,
            f"loaded {run.records:,} records of layout {settings.layout.name} from {src.uri} into "
            f"{self.spec.uri} (run {run.id})",
            run=run.id,
            stage="load",
            layout=settings.layout.name,
            records=run.records,
            seconds=round(seconds, 3),
            event="done",
        )
        report = make_report(self.spec, settings, run, output, source=src.uri, status=self._status())
        report.skipped = skipped
        return report

    def _status(self) -> str:
        if self.resume is not None:
            return "resumed"
        fplan = self.match.file_plan
        return "appended" if fplan is not None and fplan.status == "appended" else "loaded"
