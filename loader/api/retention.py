"""``keep_runs=N`` of `loader.load` / `loader.ingest` (the CLI's ``--keep-runs``): once the
job succeeded, its dataset's run records are pruned to the N newest and the protected
ones (maintain/run_prune.py), so that a scheduled job's run list stays bounded.

The value is checked before the job starts (UsageError: nothing is written); the prune is
a second writer after the job (a dataset another job holds by then is a warning, not a
failure of the job that succeeded: the next run prunes). A job that fails prunes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..maintain.run_prune import prune_after_job
from ..model.run_retention import check_keep

R = TypeVar("R")


def keeping_runs(dataset: str, keep_runs: int | None, progress: str, call: Callable[[], R]) -> R:
    """``call()`` (a job on ``dataset``), then - it succeeded - the prune to ``keep_runs`` runs."""
    check_keep("--keep-runs", keep_runs)
    report = call()
    if keep_runs is not None:
        prune_after_job(dataset, keep_runs, progress)
    return report
