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

The functions are api/public.py's: real functions with every keyword in their signature,
each keyword annotated with its help (model/optspec.py's ``Opt``), from which the CLI's
options (``--batch-records`` -> ``batch_records``) and the pipeline's keys are made. Every
report has ``to_dict()``, which is what ``--json`` prints. The CLI (loader/cli/) is a
thin layer over exactly these functions.

The api layer sits above every stage (it may import any of them; only cli and bench sit
above it). Each function imports its stage when called, so ``import loader`` stays light:
a worker process or ``bulkload --help`` never imports the stages it does not use.
"""

from __future__ import annotations

from .public import *  # noqa: F403 - the public functions (public.__all__)
from .public import PUBLIC as PUBLIC
