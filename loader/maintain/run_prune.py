"""`bulkload runs prune` / `loader.prune_runs`: forget old run records, keeping a dataset's
run list bounded (a cron job's ``[job] keep_runs``).

A writer like any other: it takes the dataset lock (busy: DatasetBusyError, exit 3), does
what every writer does first (garbage.start_writing: a dead job's ``running`` run becomes
``interrupted``), chooses the runs to drop (model/run_retention.py: the ``keep`` newest and
every protected run stay - resume, exactly-once loads, the last --replace) and writes the
new run list in one manifest write. Only run records change: no batch, file entry,
array or garbage entry, so no reader and no record is affected.

Crash behaviour: the manifest write is atomic and a stop signal waits for it
(infra/interrupts.py), so a prune killed or stopped at any point leaves the old run list
or the new one. ``dry_run`` writes nothing (not even what start_writing would).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ..errors import DatasetBusyError, UsageError
from ..infra import faults, interrupts, logs
from ..infra.lock import DatasetLock
from ..model import manifest as mf
from ..model import runs
from ..model.catalog_rows import RunList
from ..model.run_retention import check_keep, instant, plan_prune
from ..stores.spec import parse_dataset_uri
from .garbage import start_writing


@dataclass
class PruneReport:
    """What `bulkload runs prune --json` prints. ``removed``: the runs dropped (id, kind,
    status, started); ``protected``: the runs kept although the policy would drop them,
    with why; ``kept``: how many runs the dataset keeps."""

    dataset: str
    dry_run: bool
    keep: int | None
    older_than: float | None  # epoch seconds
    removed: list[dict] = field(default_factory=list)
    protected: list[dict] = field(default_factory=list)
    kept: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def check_options(keep, older_than, *, keep_option: str = "--keep", now: float | None = None) -> float | None:
    """The prune policy, checked (UsageError naming the option): at least one of ``keep``
    (runs to keep, >= 0) and ``older_than`` (an age such as 30d, or an instant); the
    cutoff in epoch seconds (None: no age limit)."""
    check_keep(keep_option, keep)
    cutoff = instant(older_than, "--older-than", now)
    if keep is None and cutoff is None:
        raise UsageError(
            f"runs prune needs {keep_option} N or --older-than AGE (e.g. {keep_option} 100 or "
            "--older-than 30d): nothing was pruned"
        )
    return cutoff


def prune_runs(
    dataset_uri: str, keep: int | None = None, older_than=None, dry_run: bool = False, progress: str = "none"
) -> PruneReport:
    """Drop the dataset's run records outside the ``keep`` newest and (when given) older
    than ``older_than`` (``"30d"``, ``"12h"``, an ISO-8601 instant, a datetime, epoch
    seconds); protected runs always stay (model/run_retention.py). ``dry_run``: report
    only."""
    t0 = time.perf_counter()
    cutoff = check_options(keep, older_than)
    spec = parse_dataset_uri(dataset_uri)
    mf.load_manifest(spec.root, dataset_uri)  # no dataset: DatasetNotFoundError before any lock file
    faults.from_env()
    with DatasetLock(spec.root) as lock:
        lock.set_job("runs prune")
        m = mf.load_manifest(spec.root, dataset_uri)
        if dry_run:
            runs.mark_interrupted(m)  # in memory only: what start_writing would record
        else:
            start_writing(spec, m, progress=progress)
        report = prune_locked(spec, m, keep, cutoff, dry_run=dry_run, progress=progress)
    report.seconds = round(time.perf_counter() - t0, 4)
    return report


def prune_after_job(dataset_uri: str, keep: int, progress: str = "none") -> PruneReport | None:
    """``[job] keep_runs`` / ``--keep-runs``: prune to ``keep`` runs after a job that
    succeeded. Another job holding the dataset by then is a warning, not a failure of the
    job that succeeded (None): the next run prunes."""
    try:
        return prune_runs(dataset_uri, keep=keep, progress=progress)
    except DatasetBusyError as e:
        logs.note(
            False,
            f"run records of {dataset_uri} not pruned ({e}); the next run prunes them",
            level="warning",
            dataset=dataset_uri,
            event="prune-busy",
        )
        return None


def prune_locked(
    spec, m: mf.Manifest, keep: int | None, cutoff: float | None, *, dry_run: bool = False, progress: str = "none"
) -> PruneReport:
    """Prune with the dataset lock held (after start_writing); saves unless ``dry_run``."""
    plan = plan_prune(m, keep, cutoff)
    report = PruneReport(
        dataset=spec.uri,
        dry_run=dry_run,
        keep=keep,
        older_than=cutoff,
        removed=[_brief(r) for r in plan.removed],
        protected=[{"id": rid, "reason": why} for rid, why in plan.protected.items()],
        kept=len(plan.kept),
    )
    if plan.removed and not dry_run:
        done = f"the prune was written: {len(plan.removed)} run record(s) removed"
        with interrupts.held(lambda: done):  # the new list is written whole, or not at all
            m.runs = RunList(plan.kept)
            m.save(spec.root)
    verb = "would remove" if dry_run else "removed"
    logs.note(
        progress == "none",
        f"runs prune {spec.uri}: {verb} {len(plan.removed)} run record(s), kept "
        f"{report.kept} ({len(plan.protected)} protected)",
        dataset=spec.uri,
        removed=len(plan.removed),
        kept=report.kept,
        event="pruned",
    )
    return report


def _brief(r) -> dict:
    return {"id": r.id, "kind": r.kind, "status": r.status, "started": r.started}
