"""Running a run's workers: one load task per worker, the pool, progress, checkpoints; small
runs in the coordinator's own process (the limits and the measurements behind them, crash
behaviour: docs/design/loading.md)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from ..infra import executors
from ..infra.progress import Progress
from ..kinds import kind_for
from ..model import manifest as mf
from ..stores.health import existing_shards
from ..stores.registry import open_in_this_process
from ..stores.spec import StoreSpec
from .commit import Committer
from .early_pool import in_process_limit
from .feeder import run_stream
from .job import RunSettings
from .messages import LoadReceipt
from .options import checkpoint_settings
from .plan import Plan
from .task import LoadTask, RunTable, WriteSettings
from .worker import load_worker


@dataclass(frozen=True)
class Work:
    """What `execute` runs: the plan from the per-shard resume seqs on, by ``nworkers``
    workers, shown as ``label`` in progress lines."""

    settings: RunSettings
    plan: Plan
    nworkers: int
    label: str  # load | ingest
    resume: tuple = ()  # per shard: the first seq to write; () = all of the plan
    table: RunTable = RunTable()
    store_options: tuple = ()


def execute(spec: StoreSpec, m: mf.Manifest, committer: Committer, work: Work) -> list[LoadReceipt]:
    """Run the workers over the plan; their receipts ([] when nothing is left to write)."""
    todo = work.plan.records_from(work.resume)
    if not todo:
        return []
    rs = _record_bytes(m, work)
    tasks = _tasks(spec, m, work, shard_bytes_hint=todo * rs // work.plan.nshards)
    ex = executor_for(spec, work.settings, todo * rs, runs_user_code(work.plan))
    with Progress(work.label, todo, rs, mode=work.settings.progress) as prog:
        carried: dict[int, dict] = {}  # worker -> {seq: batch} its dead attempts made durable (Dask)
        receipts = ex.run(
            load_worker,
            tasks,
            on_progress=prog.advance,
            on_message=committer.on_message,
            on_retry=lambda task, messages: resumed_task(task, messages, carried),
        )
    return [with_carried(rc, carried.get(rc.worker, {})) for rc in receipts]


def prewarm(spec: StoreSpec, settings: RunSettings, records: int | None, user_code: bool = False) -> None:
    """Start the local pool's forkserver in the background when a run of ``records``
    fixed-size records (None or 0: not known) will use it, so that its start-up (a Python
    process importing the workers' modules, ~0.14 s) overlaps what the coordinator does
    before its pool starts (locking, opening the catalog, the run's first commit, the tasks).
    Documents start it when their pool starts."""
    if not records or settings.kind().keyed:
        return
    nbytes = records * settings.layout.record_size
    if type(executor_for(spec, settings, nbytes, user_code)) is executors.LocalExecutor:
        from ..infra import pool

        pool.prewarm()


def runs_user_code(plan: Plan) -> bool:
    """Whether a source of ``plan`` runs the user's code (a generator: sources/user_gen.py)."""
    return any(getattr(s.source, "runs_user_code", False) for s in plan.segments)


def executor_for(spec: StoreSpec, settings: RunSettings, nbytes: int, user_code: bool = False):
    """The executor in effect, or an in-process one for a small run (module docstring) -
    never for ``user_code``, whose death must not be the coordinator's. A compressed run of
    fixed-size records runs its tasks at once, a thread each (their shuffle and codec release
    the GIL); the others in turn."""
    ex = executors.current()
    keyed = settings.kind().keyed
    if (
        type(ex) is executors.LocalExecutor
        and not settings.workers_given
        and not user_code
        and nbytes <= in_process_limit(settings.compression, keyed)
        and not open_in_this_process(spec)
    ):
        if settings.compression != "none" and not keyed:
            return executors.ThreadExecutor()
        return executors.InProcessExecutor()
    return ex


def execute_stream(
    spec: StoreSpec, m: mf.Manifest, committer: Committer, work: Work, source, stdin=None
) -> tuple[list[LoadReceipt], int]:
    """Run the workers over the records of a stream ``source``; (receipts, records read)."""
    tasks = _tasks(spec, m, work, shard_bytes_hint=0)
    with Progress(work.label, None, _record_bytes(m, work), mode=work.settings.progress) as prog:
        return run_stream(tasks, prog, source, work.settings.layout, committer.on_message, stdin)


def resumed_task(task: LoadTask, messages: list, carried: dict) -> LoadTask:
    """A retried attempt of ``task`` (infra/executors.py): it resumes each shard after the
    batches its earlier attempts reported durable (the committer holds them already; they
    go into ``carried[task.worker]`` for the receipt)."""
    resume = list(task.resume or [task.plan.first_seq] * task.nshards)
    done = carried.setdefault(task.worker, {})
    for msg in messages:
        for e in getattr(msg, "entries", ()):  # Checkpoint: a prefix of each shard's batches
            resume[e.shard] = max(resume[e.shard], e.seq + task.nshards)
            done[e.seq] = e
    return dataclasses.replace(task, resume=tuple(resume))


def with_carried(rc: LoadReceipt, carried: dict) -> LoadReceipt:
    """A receipt with the batches its task's dead attempts made durable (written by this job too)."""
    if not carried:
        return rc
    batches = {e.seq: e for e in rc.batches} | carried
    return dataclasses.replace(rc, batches=tuple(batches[s] for s in sorted(batches)))


def _record_bytes(m: mf.Manifest, work: Work) -> int:
    return kind_for(work.settings.layout, m.format, m.compression).record_bytes()


def _tasks(spec: StoreSpec, m: mf.Manifest, work: Work, shard_bytes_hint: int) -> list[LoadTask]:
    settings = work.settings
    write = WriteSettings(
        store=spec,
        layout=settings.layout.to_dict(),
        format=m.format,
        compression=m.compression,
        checkpoints=settings.checkpoints or checkpoint_settings(),
        table=work.table,
        store_options=tuple(work.store_options),
        shard_bytes_hint=shard_bytes_hint,
        must_exist=existing_shards(m),
    )
    return [
        LoadTask(
            worker=w,
            workers=work.nworkers,
            plan=work.plan,
            write=write,
            resume=tuple(work.resume),
            main_pid=os.getpid(),
            fault=settings.fault,
        )
        for w in range(work.nworkers)
    ]
