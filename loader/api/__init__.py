"""The public Python API: one function per command, each returning a typed report.

    loader.load(source, dataset, ...)        -> LoadReport       (bulkload load)
    loader.generator(fn, n, start, layout)   -> a source for load (gen://MODULE:FUNCTION)
    loader.ingest(dataset, from_dir, ...)    -> IngestReport     (bulkload ingest)
    loader.finalize(dataset, dims=..., ...)  -> FinalizeReport   (bulkload finalize)
    loader.compact(dataset, ...)             -> CompactReport    (bulkload compact)
    loader.verify(dataset)                   -> VerifyReport     (bulkload verify)
    loader.export(dataset, out, format)      -> ExportReport     (bulkload export)
    loader.query(dataset, box, ...)          -> pyarrow.Table    (bulkload query)
    loader.info(dataset)                     -> dict             (bulkload info --json)
    loader.runs(dataset, status=, kind=, ...) -> list[Run]       (bulkload runs --json)
    loader.prune_runs(dataset, keep=, ...)   -> PruneReport      (bulkload runs prune)
    loader.run(pipeline_file, sets)          -> PipelineReport   (bulkload run)
    loader.open(dataset)                     -> Dataset          (a reader's snapshot)

Keyword options are named as the CLI's (``--batch-records`` -> ``batch_records``); every
report has ``to_dict()``, which is what ``--json`` prints. The CLI (loader/cli/) is a thin
layer over exactly these functions.

The api layer sits above every stage (it may import any of them; only cli and bench sit
above it). Names resolve lazily, so ``import loader`` stays light: a worker process or
``bulkload --help`` never imports the stages it does not use.
"""

from __future__ import annotations

import importlib

#: public name -> (module, attribute)
PUBLIC = {
    "load": ("loader.loading.load", "load"),
    "generator": ("loader.sources.user_gen", "generator"),
    "ingest": ("loader.loading.ingest", "ingest"),
    "finalize": ("loader.arrays.finalize", "finalize"),
    "compact": ("loader.maintain.compact", "compact"),
    "verify": ("loader.api.commands", "verify"),
    "export": ("loader.api.commands", "export"),
    "query": ("loader.api.commands", "query"),
    "info": ("loader.api.commands", "info"),
    "runs": ("loader.api.commands", "runs"),
    "prune_runs": ("loader.maintain.run_prune", "prune_runs"),
    "run": ("loader.api.pipeline", "run"),
    "open": ("loader.read.dataset", "open"),
}

#: the runs that take ``client=`` / ``engine=`` / ``scheduler=`` (api/engine.py): name -> the
#: position of their dataset argument
ENGINE_RUNS = {"load": 1, "ingest": 0, "finalize": 0, "compact": 0, "verify": 0}

#: the jobs that take ``keep_runs=`` (prune the run records after success): name -> the
#: position of their dataset argument
KEEP_RUNS = {"load": 1, "ingest": 0}

__all__ = sorted(PUBLIC)


def __getattr__(name: str):
    try:
        module, attr = PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    if name in KEEP_RUNS:  # keep_runs= (api/retention.py)
        from .retention import with_keep_runs

        value = with_keep_runs(value, KEEP_RUNS[name])
    if name in ENGINE_RUNS:  # imported here, like the stages: only for a run
        from .engine import with_engine

        value = with_engine(value, ENGINE_RUNS[name])
    globals()[name] = value
    return value
