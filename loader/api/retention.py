"""``keep_runs=N`` of `loader.load` / `loader.ingest` (the CLI's ``--keep-runs``): once the
job succeeded, its dataset's run records are pruned to the N newest and the protected
ones (maintain/run_prune.py), so that a scheduled job's run list stays bounded.

The value is checked before the job starts (UsageError: nothing is written); the prune is
a second writer after the job (a dataset another job holds by then is a warning, not a
failure of the job that succeeded: the next run prunes). A job that fails prunes nothing.
"""

from __future__ import annotations

import functools
import inspect

from ..maintain.run_prune import prune_after_job
from ..model.run_retention import check_keep


def with_keep_runs(run, dataset_arg: int = 0):
    """``run`` with the keyword ``keep_runs`` (its dataset: positional argument
    ``dataset_arg`` or the keyword ``dataset``); its signature says so."""

    @functools.wraps(run)
    def call(*args, keep_runs: int | None = None, **kw):
        check_keep("--keep-runs", keep_runs)
        report = run(*args, **kw)
        if keep_runs is not None:
            dataset = args[dataset_arg] if len(args) > dataset_arg else kw.get("dataset")
            prune_after_job(dataset, keep_runs, kw.get("progress", "none"))
        return report

    sig = inspect.signature(run)
    keep = inspect.Parameter("keep_runs", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="int | None")
    call.__signature__ = sig.replace(parameters=[*sig.parameters.values(), keep])
    return call
