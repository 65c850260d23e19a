"""The public functions, each the one declaration of its command's options.

Every keyword is in the real signature, annotated ``Annotated[T, Opt(help=...)]``
(model/optspec.py): the command line's options (cli/options.py), the pipeline's keys
(api/pipeline.py's SCHEMA) and the API reference are made from these signatures, with
their defaults and help, so that they cannot drift (tests/api/test_options_agree.py).

Each function imports its stage when called, so that ``import loader`` and the CLI's
start-up stay light; the runs (load, ingest, finalize, compact, verify) run on the engine
that ``client`` / ``engine`` / ``scheduler`` choose (api/engine.py), and load and ingest
prune the run records after success when given ``keep_runs`` (api/retention.py).

This module imports no annotation lazily (no ``from __future__ import annotations``):
the ``Opt`` records are objects of the signatures; only the return types, names of
modules not imported here, are strings.
"""

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from ..model.optspec import DEFAULT_ARRAY, DEFAULT_DIMS, Opt
from ..model.vocab import (
    BadFilePolicy,
    Compression,
    DuplicatesPolicy,
    EngineName,
    ExportFormat,
    FinalizeStrategy,
    ProgressMode,
    QueryFormat,
    RecordFormat,
)

if TYPE_CHECKING:
    import datetime

    import pyarrow

    from ..arrays.report import FinalizeReport
    from ..loading.ingest import IngestReport
    from ..loading.report import LoadReport
    from ..maintain.report import CompactReport
    from ..maintain.run_prune import PruneReport
    from ..model.layouts import Layout
    from ..model.runs import Run
    from ..read.dataset import Dataset
    from ..read.export import ExportReport
    from ..read.verifying import VerifyReport
    from ..sources.user_gen import PyGenSource
    from .pipeline import PipelineReport

R = TypeVar("R")

# -- the options several commands share (one declaration each) ---------------------------------

DATASET_HELP = "lmdb://PATH, rocksdb://PATH or mem://NAME."
#: the dataset a job writes (created by load / ingest): its shard count may be given
JobDataset = Annotated[
    str, Opt(help="lmdb://PATH, rocksdb://PATH or mem://NAME (with ?shards=K).", argument=True, section="job")
]
#: the dataset a command works on
DatasetWithHelp = Annotated[str, Opt(help=DATASET_HELP, argument=True, section="job")]
#: the dataset, with no help on the command line (as `bulkload compact --help` shows it)
DatasetArg = Annotated[str, Opt(argument=True, section="job")]

Format = Annotated[
    RecordFormat | None, Opt(help="capnp (default) or arrow; documents: block (default), raw or capnp.", section="job")
]
Shards = Annotated[int | None, Opt(help="Shard count (default: cores).", section="job")]
Workers = Annotated[int | None, Opt(help="Worker processes (default: cores).", section="job")]
BatchRecords = Annotated[
    int | None,
    Opt(help="Records per batch (default 10000; records under 96 bytes: more, up to 1.92 MB).", section="job"),
]
Progress = Annotated[
    ProgressMode,
    Opt(
        help="auto (a bar on a terminal, else log lines), bar, log or none (the CLI's --quiet)",
        flag=None,
        key=None,
    ),
]
CheckpointSeconds = Annotated[
    float | None,
    Opt(help="Seconds between checkpoints of a long run (default: the store's).", flag=None, section="job"),
]
CheckpointBytes = Annotated[
    int | None, Opt(help="Bytes written between checkpoints of a long run (default: the store's).", flag=None, key=None)
]
Client = Annotated[Any, Opt(help="A distributed.Client to run the tasks on (the dask engine).", flag=None, key=None)]
Engine = Annotated[
    EngineName | None,
    Opt(
        help="Where load, ingest, finalize, compact, verify and run run their tasks: local (the process pool, "
        "default) or dask (also BULKLOAD_ENGINE).",
        flag="--engine",
        section="job",
        group=True,
    ),
]
Scheduler = Annotated[
    str | None,
    Opt(
        help="Dask scheduler: tcp://HOST:PORT, or local:N for a LocalCluster of N worker processes (also "
        "BULKLOAD_SCHEDULER).",
        flag="--scheduler",
        section="job",
        group=True,
    ),
]
KeepSnapshots = Annotated[
    int | None,
    Opt(
        help="From now on keep the data of the last K generations readable (info --as-of); 0: only open "
        "readers keep it."
    ),
]
OnBadFile = Annotated[
    BadFilePolicy,
    Opt(
        help="Documents: fail (exit 1 naming the file, nothing loaded) or skip (load the rest, list it in the report)."
    ),
]


def _keep_runs(job: str) -> Opt:
    return Opt(
        help=f"After the {job} succeeded, prune the run records to the N newest (and the protected ones: "
        "bulkload runs prune).",
        section="job",
    )


def _job(
    dataset: str,
    call: Callable[[], R],
    client: Any,
    engine: str | None,
    scheduler: str | None,
    keep_runs: int | None = None,
    progress: str = "none",
) -> R:
    """``call()`` on the engine chosen (api/engine.py); then, with ``keep_runs``, the prune
    of the run records (api/retention.py)."""
    from .engine import on_engine

    if keep_runs is None:
        return on_engine(dataset, call, client, engine, scheduler)
    from .retention import keeping_runs

    return on_engine(dataset, lambda: keeping_runs(dataset, keep_runs, progress, call), client, engine, scheduler)


# -- the commands -------------------------------------------------------------------------------


def load(
    source: Annotated[
        Any,
        Opt(
            help="One or more of: gen://LAYOUT?n=N&start=S; a file of raw records, an .npy file, an Arrow IPC "
            "file (.arrow, .feather) or a Parquet file (.parquet); a quoted glob ('parts/*.bin', in name "
            "order); - for stdin, a FIFO, /dev/stdin, /dev/fd/N; or (--layout docs) a directory of <id>.json "
            "documents. Several inputs are loaded by one run in the order given, each committed whole and "
            "recognised on a re-run (loaded before: left out). Streams (stdin, FIFOs) are not replayable: "
            "every load of them is a new run, never resumed, and nothing of a failed one is committed (re-run "
            "the producers); several FIFOs are read in parallel, their batches numbered as they arrive. A "
            "generator of yours: gen://PKG.MODULE:FUNCTION?n=N&start=S[&layout=NAME] (FUNCTION(start, n) "
            "returns a numpy structured array; the module is imported from the working directory or "
            "PYTHONPATH) or gen://c:PATH:SYMBOL?n=N&start=S&layout=NAME (a shared library's int SYMBOL(void "
            "*buf, uint64_t start, uint64_t n) writes the records into buf and returns 0); each worker "
            "generates its own ranges.",
            argument=True,
            cli_type=list[str] | None,
            cli_default=None,
            show_default=False,
        ),
    ],
    dataset: JobDataset,
    *,
    layout: Annotated[
        str | None, Opt(help="Layout of the records (default: the source's or scidb96).", section="job")
    ] = None,
    format: Format = None,
    compression: Annotated[
        Compression | None,
        Opt(help="none, lz4 or zstd (arrow); documents: zstd (default) or none.", section="job"),
    ] = None,
    shards: Shards = None,
    workers: Workers = None,
    batch_records: BatchRecords = None,
    new_run: Annotated[bool, Opt(help="Load the source again even if it was loaded before.")] = False,
    replace: Annotated[bool, Opt(help="Start the dataset over with this source (atomic swap).")] = False,
    on_bad_file: OnBadFile = "fail",
    keep_runs: Annotated[int | None, _keep_runs("load")] = None,
    progress: Progress = "none",
    stdin: Annotated[
        Any, Opt(help="The binary stream that source '-' reads (default: standard input).", flag=None, key=None)
    ] = None,
    checkpoint_seconds: CheckpointSeconds = None,
    checkpoint_bytes: CheckpointBytes = None,
    client: Client = None,
    engine: Engine = None,
    scheduler: Scheduler = None,
) -> "LoadReport":
    """Load the records of ``source`` into ``dataset`` (appending to it if it exists).

    Re-running the same source (same URI and content fingerprint) resumes its
    interrupted run, or loads nothing if it already finished, unless ``new_run``;
    ``replace`` starts the dataset over, atomically. A stream (stdin, a FIFO) cannot be
    replayed: each load of it is a new run.

    Args:
        source: a SOURCE string as the CLI's (gen://..., a file, a glob, ``-``), a list of
            them, a source of `loader.generator`, or a Python object: a numpy structured
            array, a pandas DataFrame, a pyarrow Table / RecordBatch / RecordBatchReader,
            or an iterable of those or of bytes.
        dataset: lmdb://PATH, rocksdb://PATH or mem://NAME (with ?shards=K).
        layout: the records' layout (default: the dataset's, else the source's, else scidb96).
        format: capnp (default) or arrow; documents: block (default), raw or capnp.
        compression: none, lz4 or zstd (arrow); documents: zstd (default) or none.
        shards: shard count of a new dataset (default: cores).
        workers: worker processes (default: cores).
        batch_records: records per batch (default 10000; records under 96 bytes: 10000 x
            (96 / size)^2, at most 1.92 MB).
        new_run: load the source again even if it was loaded before.
        replace: start the dataset over with this source (atomic swap).
        on_bad_file: documents: ``fail`` (BadFileError naming the file, nothing loaded) or
            ``skip`` (the report lists the skipped files).
        keep_runs: after success, prune the run records to the N newest (and the protected ones).
        progress: ``auto``, ``bar``, ``log`` or ``none``.
        stdin: the binary stream source ``-`` reads (default: standard input).
        checkpoint_seconds: seconds between checkpoints of a long run.
        checkpoint_bytes: bytes written between checkpoints of a long run.
        client: a ``distributed.Client`` to run the tasks on.
        engine: ``local`` or ``dask`` (default: BULKLOAD_ENGINE, else local).
        scheduler: with the dask engine: ``tcp://HOST:PORT`` or ``local:N``.

    Returns:
        The run's LoadReport (``to_dict()``: what ``--json`` prints).
    """
    if client is None:  # before the loading modules' import (~0.2 s), which it overlaps
        from ..loading.early_pool import prewarm_early

        prewarm_early(dataset, source, workers, engine, scheduler)
    from ..loading.load import load as load_records

    return _job(
        dataset,
        lambda: load_records(
            source,
            dataset,
            layout=layout,
            format=format,
            compression=compression,
            shards=shards,
            workers=workers,
            batch_records=batch_records,
            progress=progress,
            stdin=stdin,
            new_run=new_run,
            replace=replace,
            checkpoint_seconds=checkpoint_seconds,
            checkpoint_bytes=checkpoint_bytes,
            on_bad_file=on_bad_file,
        ),
        client,
        engine,
        scheduler,
        keep_runs,
        progress,
    )


def ingest(
    dataset: JobDataset,
    from_dir: Annotated[
        str,
        Opt(
            help="Directory of files of raw records, or of <id>.json documents (layout docs).",
            flag="--from",
            key="from",
        ),
    ],
    *,
    pattern: Annotated[
        str,
        Opt(help="Shell pattern of the file names, e.g. '*.bin' (not for documents: every <id>.json is read)."),
    ] = "*",
    on_bad_file: Annotated[
        BadFilePolicy, Opt(help="fail (exit 1 naming the file) or skip (report it, load the rest).")
    ] = "fail",
    layout: Annotated[
        str | None,
        Opt(
            help="Layout of the records (default: the dataset's or scidb96); docs for a directory of <id>.json "
            "documents.",
            section="job",
        ),
    ] = None,
    format: Format = None,
    compression: Annotated[Compression | None, Opt(help="none, lz4 or zstd (arrow).", section="job")] = None,
    shards: Shards = None,
    workers: Workers = None,
    batch_records: BatchRecords = None,
    keep_runs: Annotated[int | None, _keep_runs("ingest")] = None,
    progress: Progress = "none",
    checkpoint_seconds: CheckpointSeconds = None,
    checkpoint_bytes: CheckpointBytes = None,
    client: Client = None,
    engine: Engine = None,
    scheduler: Scheduler = None,
) -> "IngestReport":
    """Load each new file of a directory exactly once, in name order (for cron / timers).

    Documents (layout docs): loads the <id>.json files whose id is not stored yet; a file
    whose id is stored is already ingested if its content is the stored document, else a
    bad file (documents are immutable).

    Args:
        dataset: lmdb://PATH, rocksdb://PATH or mem://NAME (with ?shards=K).
        from_dir: the directory (the CLI's ``--from``, the pipeline's ``[ingest] from``).
        pattern: shell pattern of the file names (not for documents).
        on_bad_file: ``fail`` (BadFileError naming the file) or ``skip`` (report it, load the rest).
        layout, format, compression, shards, workers, batch_records, keep_runs, progress,
            checkpoint_seconds, checkpoint_bytes, client, engine, scheduler: as `load`'s.

    Returns:
        An IngestReport.
    """
    from ..loading.ingest import ingest as ingest_files

    return _job(
        dataset,
        lambda: ingest_files(
            dataset,
            from_dir,
            pattern=pattern,
            on_bad_file=on_bad_file,
            layout=layout,
            format=format,
            compression=compression,
            shards=shards,
            workers=workers,
            batch_records=batch_records,
            progress=progress,
            checkpoint_seconds=checkpoint_seconds,
            checkpoint_bytes=checkpoint_bytes,
        ),
        client,
        engine,
        scheduler,
        keep_runs,
        progress,
    )


def finalize(
    dataset: DatasetWithHelp,
    dims: Annotated[
        str | Sequence[tuple[str, int]] | None,
        Opt(
            help="Two integer or time fields with chunk lengths, row-major: FIELD:CHUNK,FIELD:CHUNK, a time "
            f"field's chunk a duration (ts:1h,size:1000) (default: {DEFAULT_DIMS['scidb96']} for scidb96; "
            "required for other layouts).",
            show_default=False,
        ),
    ] = None,
    array: Annotated[str, Opt(help="Array name (several arrays may coexist).")] = DEFAULT_ARRAY,
    duplicates: Annotated[DuplicatesPolicy, Opt(help="error, first, last or keep.")] = "error",
    workers: Annotated[
        int | None,
        Opt(
            help="Workers (default: cores): processes, or threads of this one for a dataset of at most 128 MiB.",
            inherit=True,
        ),
    ] = None,
    compact: Annotated[
        bool, Opt(help="Skip compaction before redimensioning.", flag="--no-compact", negated=True)
    ] = True,
    progress: Progress = "none",
    memory_budget: Annotated[int | str | None, Opt(help="Buffer bytes per worker (e.g. 512m, 2g).")] = None,
    strategy: Annotated[
        FinalizeStrategy,
        Opt(
            help="auto, direct (read windows of chunks straight from the batches) or spill (partition into "
            "spill runs first)."
        ),
    ] = "auto",
    compression: Annotated[
        Compression | None,
        Opt(
            help="The array's chunk pieces: none (default, whatever the records use: queries read them "
            "zero-copy), lz4 or zstd."
        ),
    ] = None,
    force: Annotated[bool, Opt(help="Rebuild the array even if it is up to date.")] = False,
    keep_snapshots: KeepSnapshots = None,
    client: Client = None,
    engine: Engine = None,
    scheduler: Scheduler = None,
) -> "FinalizeReport":
    """Compact (unless ``compact=False``), then redimension the records into a 2-D chunked array.

    An array that is up to date is not rebuilt unless ``force`` (the report's ``status``
    is then ``nothing-to-do``). Raises UsageError for bad dims or options (nothing
    touched), DuplicateCellError under ``duplicates="error"`` (nothing committed).

    Args:
        dataset: lmdb://PATH, rocksdb://PATH or mem://NAME.
        dims: two integer or time fields with chunk lengths, row-major
            (``"FIELD:CHUNK,FIELD:CHUNK"`` or ``[(FIELD, CHUNK), ...]``); None: the layout's
            default (scidb96 only).
        array: the array's name (several arrays may coexist).
        duplicates: ``error``, ``first``, ``last`` or ``keep`` (cells of several records).
        workers: processes, or threads of this one for a dataset of at most 128 MiB (default: cores).
        compact: compact the dataset first (the CLI's ``--no-compact``: False).
        progress: ``auto``, ``bar``, ``log`` or ``none``.
        memory_budget: buffer bytes per worker (an int, or a size such as ``"512m"``).
        strategy: ``auto``, ``direct`` or ``spill``.
        compression: of the array's chunk pieces: ``none`` (default), ``lz4`` or ``zstd``.
        force: rebuild the array even if it is up to date.
        keep_snapshots: from now on keep the data of the last K generations readable.
        client, engine, scheduler: where the tasks run (as `load`'s).

    Returns:
        A FinalizeReport.
    """
    from ..arrays.finalize import finalize as build
    from ..model.options import size_option

    budget = size_option(memory_budget, "memory_budget")
    return _job(
        dataset,
        lambda: build(
            dataset,
            dims=dims,
            array=array,
            duplicates=duplicates,
            workers=workers,
            compact=compact,
            progress=progress,
            memory_budget=budget,
            strategy=strategy,
            compression=compression,
            force=force,
            keep_snapshots=keep_snapshots,
        ),
        client,
        engine,
        scheduler,
    )


def compact(
    dataset: DatasetArg,
    target_batch_records: Annotated[
        int | None, Opt(help="Records per merged batch (default: the dataset's batch size).")
    ] = None,
    progress: Progress = "none",
    workers: Workers = None,
    force: Annotated[bool, Opt(help="Compact every shard even if it looks compact.")] = False,
    keep_snapshots: KeepSnapshots = None,
    *,
    client: Client = None,
    engine: Engine = None,
    scheduler: Scheduler = None,
) -> "CompactReport":
    """Merge small batches into large ones and compact every shard store.

    Documents (layout docs): fold each shard's document tables into one (id-sorted).

    Args:
        dataset: lmdb://PATH, rocksdb://PATH or mem://NAME.
        target_batch_records: records per merged batch (default: the dataset's batch size).
        progress: ``auto``, ``bar``, ``log`` or ``none``.
        workers: worker processes (default: cores).
        force: compact every shard even if it looks compact.
        keep_snapshots: from now on keep the data of the last K generations readable.
        client, engine, scheduler: where the tasks run (as `load`'s).

    Returns:
        A CompactReport.
    """
    from ..maintain.compact import compact as compact_dataset

    return _job(
        dataset,
        lambda: compact_dataset(
            dataset,
            target_batch_records=target_batch_records,
            progress=progress,
            workers=workers,
            force=force,
            keep_snapshots=keep_snapshots,
        ),
        client,
        engine,
        scheduler,
    )


def verify(
    dataset: DatasetArg, *, client: Client = None, engine: Engine = None, scheduler: Scheduler = None
) -> "VerifyReport":
    """Recompute every stored batch's checksum and count (and the arrays' chunk indexes).

    Args:
        dataset: lmdb://PATH, rocksdb://PATH or mem://NAME.
        client, engine, scheduler: where the tasks run (as `load`'s; one task per shard off the local pool).

    Returns:
        A VerifyReport: ``ok`` is False and ``problems`` lists each damage.
    """
    from .commands import verify as verify_dataset

    return _job(dataset, lambda: verify_dataset(dataset), client, engine, scheduler)


Columns = Annotated[str | Sequence[str] | None, Opt(help="Fields to read, e.g. d0,i1 (default: all).")]
Records = Annotated[
    str | tuple[int | None, int | None] | None,
    Opt(help="Half-open record range START:STOP (either side may be empty)."),
]


def export(
    dataset: DatasetArg,
    out: Annotated[str, Opt(help="Output file; - for stdout (the report then goes to stderr).", flag="--out")],
    format: Annotated[ExportFormat, Opt(help="arrow, parquet, csv, jsonl, npy or capnp.")] = "arrow",
    *,
    columns: Columns = None,
    records: Records = None,
    box: Annotated[
        str | dict[str, tuple[int, int]] | None,
        Opt(help="A box of a finalized array, e.g. 'i0=2:5,i1=0:1000' (with --array)."),
    ] = None,
    array: Annotated[
        str | None, Opt(help=f"The finalized 2-D array to read a box of (default {DEFAULT_ARRAY}).")
    ] = None,
    compression: Annotated[
        str | None,
        Opt(help="arrow: none, lz4, zstd; parquet: none, snappy (default), gzip, brotli, lz4, zstd."),
    ] = None,
    row_group_rows: Annotated[
        int | None, Opt(help="parquet: rows per row group (default: one row group per stored batch).")
    ] = None,
    formats: Annotated[
        Sequence[str] | None,
        Opt(help="The formats accepted (default: every export format; bulkload scan's: fewer).", flag=None, key=None),
    ] = None,
) -> "ExportReport":
    """Write the records (or some columns, a record range, a box of an array), in order, to a file.

    Args:
        dataset: lmdb://PATH, rocksdb://PATH or mem://NAME.
        out: the output file; ``-`` for standard output.
        format: arrow, parquet, csv, jsonl, npy or capnp.
        columns: fields to read (``"d0,i1"`` or a list; default: all).
        records: half-open record range ``"START:STOP"`` or ``(start, stop)``.
        box: a box of a finalized array (``"i0=2:5,i1=0:1000"`` or ``{"i0": (2, 5), ...}``).
        array: the finalized 2-D array to read the box of.
        compression: arrow: none, lz4, zstd; parquet: none, snappy (default), gzip, brotli, lz4, zstd.
        row_group_rows: parquet: rows per row group (default: one per stored batch).
        formats: the formats accepted (default: every export format).

    Returns:
        An ExportReport.
    """
    from .commands import export as export_records

    return export_records(
        dataset,
        out,
        format,
        columns=columns,
        records=records,
        box=box,
        array=array,
        compression=compression,
        row_group_rows=row_group_rows,
        formats=formats,
    )


def query(
    dataset: DatasetArg,
    box: Annotated[
        str | dict[str, tuple[int, int]],
        Opt(help="Half-open box, e.g. 'i0=2:5,i1=1000000:1001000'.", flag="--box"),
    ],
    *,
    array: Annotated[str, Opt(help="Array name.")] = DEFAULT_ARRAY,
    attrs: Annotated[str | None, Opt(help="Attributes to return, e.g. d0,d3 (default: all).")] = None,
    format: Annotated[
        QueryFormat | None,
        Opt(help="table, csv, json, arrow, parquet or npy.", cli_default="table", key_default="csv"),
    ] = None,
    out: Annotated[str | None, Opt(help="Write to this file (default: stdout).")] = None,
) -> "pyarrow.Table":
    """The cells of a half-open box of a 2-D array as a pyarrow Table.

    Args:
        dataset: lmdb://PATH, rocksdb://PATH or mem://NAME.
        box: ``"i0=2:5,i1=0:1000"`` or ``{"i0": (2, 5), ...}``.
        array: the array's name.
        attrs: attributes to return, e.g. ``"d0,d3"`` (default: all).
        format: also write the cells as table, csv, json, arrow, parquet or npy (None: only
            return them; the CLI prints a table, a pipeline writes csv).
        out: the file to write (None: standard output).

    Returns:
        The cells, a pyarrow Table.
    """
    from .commands import query as query_box

    return query_box(dataset, box, array=array, attrs=attrs, format=format, out=out)


def info(
    dataset: DatasetArg,
    as_of: Annotated[
        int | str | None,
        Opt(
            help="The dataset as it stood after this commit: a generation number or a run id (while its data "
            "was not garbage-collected)."
        ),
    ] = None,
) -> dict[str, Any]:
    """What ``bulkload info --json`` prints: layout, format, shards, records, bytes, runs,
    arrays, problems (missing or damaged shards).

    Args:
        dataset: lmdb://PATH, rocksdb://PATH or mem://NAME.
        as_of: a generation or a run id: the dataset as it stood after that commit.
    """
    from .commands import info as describe

    return describe(dataset, as_of)


def runs(
    dataset: DatasetWithHelp,
    status: Annotated[
        str | None,
        Opt(
            help="Only runs of this status: running, done, failed, interrupted, superseded or replaced (as "
            "`info` shows them)."
        ),
    ] = None,
    kind: Annotated[str | None, Opt(help="Only runs of this kind: load, ingest, finalize or compact.")] = None,
    since: Annotated[
        "str | float | datetime.datetime | None",
        Opt(
            help="Only runs started since: an age (30d, 12h, 90m) or an ISO-8601 instant (2026-11-01T08:00:00Z; "
            "no offset: UTC)."
        ),
    ] = None,
    limit: Annotated[int | None, Opt(help="At most N runs (the newest).")] = None,
) -> "list[Run]":
    """The dataset's run records, newest first (``bulkload runs --json``).

    Args:
        dataset: lmdb://PATH, rocksdb://PATH or mem://NAME.
        status: only runs of this status (running, done, failed, interrupted, superseded, replaced).
        kind: only runs of this kind (load, ingest, finalize, compact).
        since: only runs started since: an age (``"30d"``), an ISO-8601 instant, a datetime or epoch seconds.
        limit: at most N runs (the newest).

    Returns:
        Each a `Run` (``to_dict()``: what ``bulkload runs --json`` prints).
    """
    from .commands import runs as run_records

    return run_records(dataset, status=status, kind=kind, since=since, limit=limit)


def prune_runs(
    dataset: DatasetWithHelp,
    keep: Annotated[int | None, Opt(help="Keep the N newest runs (and every protected run).")] = None,
    older_than: Annotated[
        "str | float | datetime.datetime | None",
        Opt(
            help="Remove runs that ended before: an age (30d, 12h, 90m) or an ISO-8601 instant. With --keep: "
            "only runs outside the N newest and older than this."
        ),
    ] = None,
    dry_run: Annotated[bool, Opt(help="Say what would be removed; write nothing.")] = False,
    progress: Progress = "none",
) -> "PruneReport":
    """Remove old run records (``bulkload runs prune``); protected runs always stay.

    Args:
        dataset: lmdb://PATH, rocksdb://PATH or mem://NAME.
        keep: keep the N newest runs (and every protected run).
        older_than: remove runs that ended before: an age (``"30d"``), an ISO-8601 instant,
            a datetime or epoch seconds.
        dry_run: report only; write nothing.
        progress: ``auto``, ``bar``, ``log`` or ``none``.

    Returns:
        A PruneReport.
    """
    from ..maintain.run_prune import prune_runs as prune

    return prune(dataset, keep=keep, older_than=older_than, dry_run=dry_run, progress=progress)


def run(
    path: Annotated[str, Opt(help="A pipeline file, e.g. pipelines/scidb.toml.", argument=True, cli_name="pipeline")],
    sets: Annotated[
        list[str] | None,
        Opt(help="Override a key: section.key=value (repeatable).", flag="--set", cli_type=list[str] | None),
    ] = None,
    *,
    progress: Progress = "auto",
    env: Annotated[
        "dict[str, str] | None",
        Opt(help="The environment variables to read (default: os.environ).", flag=None, key=None),
    ] = None,
    client: Client = None,
    engine: Engine = None,
    scheduler: Scheduler = None,
    check: Annotated[bool, Opt(help="Check every value of every step; run nothing.")] = False,
) -> "PipelineReport":
    """Parse and run a pipeline file (api/pipeline.py): load or ingest, then compact / finalize / query.

    Args:
        path: the pipeline file.
        sets: ``section.key=value`` overrides (the CLI's ``--set``).
        progress: ``auto``, ``bar``, ``log`` or ``none``.
        env: the environment variables to read (default: ``os.environ``).
        client, engine, scheduler: where the tasks run (over the file's [job] keys).
        check: check every value of every step; run nothing.

    Returns:
        A PipelineReport, one entry per step.
    """
    from .pipeline import run as run_pipeline

    return run_pipeline(
        path, sets, progress=progress, env=env, client=client, engine=engine, scheduler=scheduler, check=check
    )


def open(uri: str, pin: bool = True, as_of: int | str | None = None) -> "Dataset":
    """A snapshot reader of the dataset at ``uri`` (close it, or use ``with``).

    Args:
        uri: lmdb://PATH, rocksdb://PATH or mem://NAME.
        pin: pin the snapshot (False: a compaction may remove its data; reads then raise
            SnapshotExpiredError, but the reader never holds garbage back).
        as_of: a generation number or a run id: the dataset as it stood after that commit.
    """
    from ..read.dataset import open as open_dataset

    return open_dataset(uri, pin, as_of=as_of)


def generator(
    fn: Callable[[int, int], Any], n: int, start: int = 0, layout: "str | Layout | None" = None
) -> "PyGenSource":
    """The source of ``fn(start, n)`` for `load`: records start..start+n-1.

    Args:
        fn: returns the numpy structured array of records start..start+n-1 (a module-level
            function is called by name in the workers; any other is sent with cloudpickle).
        n: the number of records.
        start: the first record's index.
        layout: a layout name, .toml path or Layout (None: the dataset's, or the dtype of fn's records).
    """
    from ..sources.user_gen import generator as make

    return make(fn, n, start, layout)


#: the public functions, by name (loader/__init__.py, loader/api/__init__.py)
__all__ = [
    "compact",
    "export",
    "finalize",
    "generator",
    "info",
    "ingest",
    "load",
    "open",
    "prune_runs",
    "query",
    "run",
    "runs",
    "verify",
]
PUBLIC = tuple(__all__)
#: the commands whose options are declared here: public name -> its function
COMMANDS: dict[str, Callable[..., Any]] = {
    name: globals()[name] for name in PUBLIC if name not in ("open", "generator")
}
