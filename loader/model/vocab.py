"""The option vocabularies: each closed set of names a user, a manifest or a run may hold.

Each vocabulary is a `typing.Literal` alias, the type of the option in signatures and
fields; the tuple of its allowed values (for checks and messages, in this order) is derived
from the alias with `typing.get_args`, so the type and the runtime check cannot drift.
Add a name to the alias, never to the tuple.

Pure data: nothing here touches a dataset.
"""

from __future__ import annotations

from typing import Literal, TypeGuard, get_args

# --- record formats and compression ----------------------------------------------------
#: formats of the fixed-size records' serializers (loader/serializers/)
SerializerFormat = Literal["capnp", "arrow"]
#: formats of the documents plug-in's batches (loader/docs/kind.py)
DocumentFormat = Literal["block", "raw", "capnp"]
#: any record format a manifest may hold
RecordFormat = Literal[SerializerFormat, DocumentFormat]
#: compression of a batch value (serializers and documents)
Compression = Literal["none", "lz4", "zstd"]
#: RocksDB's own block compression (``?compression=`` of a rocksdb:// store)
RocksdbCompression = Literal["none", "lz4", "zstd", "zstd-dict"]

# --- stores ----------------------------------------------------------------------------
#: the URI scheme of a store (``mem``: LMDB on /dev/shm)
StoreScheme = Literal["lmdb", "rocksdb", "mem"]
#: the engine behind a scheme
StoreBackend = Literal["lmdb", "rocksdb"]

# --- runs ------------------------------------------------------------------------------
#: what a run did (model/runs.py)
RunKind = Literal["load", "ingest", "finalize", "compact"]
#: a run's stored status
RunStatus = Literal["running", "done", "failed", "interrupted", "superseded"]
#: statuses of a run that a later job may resume
UnfinishedStatus = Literal["running", "failed", "interrupted"]
#: a status as `info` shows it: ``replaced`` is never stored (runs before the last --replace)
ShownStatus = Literal[RunStatus, "replaced"]

# --- arrays (finalize) -----------------------------------------------------------------
#: what finalize does with two records in one cell
DuplicatesPolicy = Literal["error", "first", "last", "keep"]
#: how finalize builds an array
FinalizeStrategy = Literal["auto", "direct", "spill"]

# --- manifest garbage, ingestion, times ------------------------------------------------
#: kinds of ``manifest.garbage`` entries (model/garbage_entry.py)
GarbageKind = Literal["batches", "array", "doc-tables"]
#: what ingestion does with a file it cannot read
BadFilePolicy = Literal["fail", "skip"]
#: units of datetime64 / timedelta64 fields
TimeUnit = Literal["s", "ms", "us", "ns"]

# --- how a command runs ------------------------------------------------------------------
#: progress reporting (infra/progress.py); the CLI's --quiet is "none"
ProgressMode = Literal["auto", "bar", "log", "none"]
#: where a run's tasks run (api/engine.py)
EngineName = Literal["local", "dask"]

# --- outputs ---------------------------------------------------------------------------
#: formats `bulkload export` writes
ExportFormat = Literal["arrow", "parquet", "npy", "capnp", "csv", "jsonl"]
#: formats `bulkload scan` writes
ScanFormat = Literal["arrow", "parquet", "csv", "jsonl", "npy"]
#: formats of a query's result
QueryFormat = Literal["table", "csv", "json", "arrow", "parquet", "npy"]

# --- the allowed values, derived from the aliases --------------------------------------
SERIALIZER_FORMATS: tuple[SerializerFormat, ...] = get_args(SerializerFormat)
DOCUMENT_FORMATS: tuple[DocumentFormat, ...] = get_args(DocumentFormat)
RECORD_FORMATS: tuple[RecordFormat, ...] = get_args(RecordFormat)
COMPRESSIONS: tuple[Compression, ...] = get_args(Compression)
PROGRESS_MODES: tuple[ProgressMode, ...] = get_args(ProgressMode)
ENGINE_NAMES: tuple[EngineName, ...] = get_args(EngineName)
ROCKSDB_COMPRESSIONS: tuple[RocksdbCompression, ...] = get_args(RocksdbCompression)
STORE_SCHEMES: tuple[StoreScheme, ...] = get_args(StoreScheme)
STORE_BACKENDS: tuple[StoreBackend, ...] = get_args(StoreBackend)
RUN_KINDS: tuple[RunKind, ...] = get_args(RunKind)
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
UNFINISHED_STATUSES: tuple[UnfinishedStatus, ...] = get_args(UnfinishedStatus)
SHOWN_STATUSES: tuple[ShownStatus, ...] = get_args(ShownStatus)
DUPLICATES_POLICIES: tuple[DuplicatesPolicy, ...] = get_args(DuplicatesPolicy)
FINALIZE_STRATEGIES: tuple[FinalizeStrategy, ...] = get_args(FinalizeStrategy)
GARBAGE_KINDS: tuple[GarbageKind, ...] = get_args(GarbageKind)
BAD_FILE_POLICIES: tuple[BadFilePolicy, ...] = get_args(BadFilePolicy)
TIME_UNITS: tuple[TimeUnit, ...] = get_args(TimeUnit)
EXPORT_FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)
SCAN_FORMATS: tuple[ScanFormat, ...] = get_args(ScanFormat)
QUERY_FORMATS: tuple[QueryFormat, ...] = get_args(QueryFormat)


def is_run_kind(value: object) -> TypeGuard[RunKind]:
    return value in RUN_KINDS


def is_run_status(value: object) -> TypeGuard[RunStatus]:
    return value in RUN_STATUSES


def is_compression(value: object) -> TypeGuard[Compression]:
    return value in COMPRESSIONS


def is_store_scheme(value: object) -> TypeGuard[StoreScheme]:
    return value in STORE_SCHEMES


def is_duplicates_policy(value: object) -> TypeGuard[DuplicatesPolicy]:
    return value in DUPLICATES_POLICIES
