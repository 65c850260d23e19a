"""Record kinds: what a batch is, for the one load pipeline.

The stages, shards, checkpoints, commit, resume and verify (loading/, read/) are the same
for every layout; what differs is how a batch is produced, turned into store items,
checked again later, and what a few whole-dataset operations mean for it. A *record
kind* is that strategy, chosen by the layout's ``kind`` name (`kind_for`):

- ``fixed`` (`kinds/fixed.py`, fixed-size layouts such as ``scidb96``): one value per
  batch under its big-endian seq in table ``batches``, checksum xxh3_64 of the value;
- ``docs`` (the documents plug-in, loader/docs/kind.py): id-keyed documents in run tables.

`Kind` holds the defaults of every hook (those of the fixed kind); a plug-in's kind
overrides what differs and registers itself with `register_kind`. Unknown kind names
load the plug-ins (model/plugins.py) before they are an error.

Batch -> shard is seq mod K for every kind (model/placement.py).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, overload

from ..errors import UsageError
from ..model.plugins import load_plugins

#: the most record bytes in one batch (a worker holds QUEUE_DEPTH of them in memory)
MAX_BATCH_BYTES = 256 << 20
#: records a batch holds when `--batch-records` is not given, for records of scidb96's 96
#: bytes or more; smaller records take more, up to DEFAULT_BATCH_BYTES (`Kind.default_batch_records`)
DEFAULT_BATCH_RECORDS = 10_000
DEFAULT_BATCH_SIZE = 96
DEFAULT_BATCH_BYTES = 1_920_000

_KINDS: dict[str, type[Kind]] = {}


def register_kind(cls: type[Kind]) -> type[Kind]:
    """Register a kind class under its ``name`` (usable as a class decorator)."""
    _KINDS[cls.name] = cls
    return cls


class RecordLayout(Protocol):
    """What picks a record kind: a layout (model/layouts.py `Layout`, or a plug-in's own,
    e.g. the documents' `DocsLayout`); its ``kind`` name, if any, says which (else fixed)."""

    @property
    def name(self) -> str: ...


def kind_class(layout: RecordLayout) -> type[Kind]:
    """The kind class of a layout (plug-ins loaded on a miss)."""
    name = getattr(layout, "kind", "fixed")
    while name not in _KINDS and load_plugins():
        pass
    try:
        return _KINDS[name]
    except KeyError:
        raise UsageError(
            f"layout {layout.name!r} needs the record kind {name!r}, which no installed plug-in provides"
        ) from None


@overload
def kind_for(layout: RecordLayout) -> type[Kind]: ...
@overload
def kind_for(layout: RecordLayout, fmt: str, compression: str | None = None) -> Kind: ...
def kind_for(layout: RecordLayout, fmt: str | None = None, compression: str | None = None) -> type[Kind] | Kind:
    """The record kind of a layout (the class when fmt is None, else an instance; no
    compression: the format's default)."""
    cls = kind_class(layout)
    if fmt is None:
        return cls
    return cls(layout, fmt, cls.compression_for(fmt) if compression is None else compression)


class Kind:
    """The hooks of a record kind, with the defaults of fixed-size records."""

    name = ""
    keyed = False  #: batches are id-keyed documents in run tables (else one value per batch)
    formats: tuple[str, ...] = ()
    compressions: tuple[str, ...] = ()
    default_format = ""
    default_compression = "none"
    #: a format's own default compression, where it differs from default_compression
    default_compressions: ClassVar[dict[str, str]] = {}
    #: ingest / compact are the kind's own (`ingest_directory`, `compact_dataset`)
    own_ingest = False
    own_compaction = False

    def __init__(self, layout, fmt: str, compression: str):
        self.layout, self.format, self.compression = layout, fmt, compression

    @classmethod
    def compression_for(cls, fmt: str) -> str:
        """The compression of a new dataset in format ``fmt`` when none is asked for."""
        return cls.default_compressions.get(fmt, cls.default_compression)

    @classmethod
    def check(cls, layout, fmt: str, compression: str) -> None:
        """Raise UsageError for a format / compression this kind cannot store."""

    # --- coordinator side -----------------------------------------------------------
    def record_bytes(self) -> int:
        """Bytes of one record (progress, size hints)."""
        raise NotImplementedError

    def max_batch_records(self) -> int:
        """Most records per batch: a worker holds a few batches in memory (MAX_BATCH_BYTES)."""
        return MAX_BATCH_BYTES // max(1, self.record_bytes())

    def default_batch_records(self) -> int:
        """Records per batch when none is given: DEFAULT_BATCH_RECORDS for records of
        DEFAULT_BATCH_SIZE (scidb96's 96) bytes or more; smaller records take
        DEFAULT_BATCH_RECORDS x (96 / size)^2, at most DEFAULT_BATCH_BYTES (1.92 MB: ticks'
        41 bytes, 46,829; 48 bytes, 40,000), so the count does not jump at 96 bytes. A batch has
        fixed costs (its Python, a block's sample, a thread's hand-offs, and a dictionary's
        values - inserted, stored and hashed once a batch, whatever its count), which small
        records, cheap to encode, pay over few bytes: 20M 41-byte ticks records loaded in
        0.47 s as 2,000 batches, 0.39 - 0.41 s as 855 (960 KB each), ~0.35 s as 426 (1.92 MB);
        scidb96 loaded and read as fast in batches of 20,000 records as of 10,000 (ad hoc)."""
        size = max(1, self.record_bytes())
        want = DEFAULT_BATCH_RECORDS
        if size < DEFAULT_BATCH_SIZE:
            want = min(DEFAULT_BATCH_RECORDS * DEFAULT_BATCH_SIZE**2 // size**2, DEFAULT_BATCH_BYTES // size)
        return max(1, min(self.max_batch_records(), want))

    def store_options(self, scheme: str) -> tuple:
        """Store options this kind's values want (e.g. RocksDB's own compression)."""
        return ()

    def run_table(self, run_id: str) -> str:
        """The table a run writes."""
        return "batches"

    def choose_table(self, run_id: str, batches, span) -> tuple[str, int]:
        """(table, clear_from) of a new run; see the documents' kind for shared tables."""
        return self.run_table(run_id), -1

    def check_table_limit(self, spec, m, table: str) -> None:
        """Refuse, before anything is written, a run whose table a store could not open
        (the default: one table, ``batches``, always fits)."""

    def stored_problem(self, store, entry) -> str | None:
        """Why the stored batch of a manifest entry (BatchEntry) is not intact, or None."""
        raise NotImplementedError

    def min_stored_bytes(self, source, records: int) -> int:
        """A lower bound of the bytes ``records`` records of ``source`` take in the stores
        (the up-front space check, infra/space.py)."""
        raise NotImplementedError

    # --- the kind's own commands (`own_ingest`, `own_compaction`) --------------------------
    def ingest_directory(self, spec: Any, directory: str, *, pattern: str, **options: Any) -> Any:
        """`bulkload ingest` of the kind's own files (when `own_ingest`)."""
        raise NotImplementedError

    def compact_dataset(self, spec: Any, m: Any, **options: Any) -> dict[str, Any]:
        """`bulkload compact` of the kind's own tables (when `own_compaction`): its report
        (maintain/report.py `CompactReport.from_kind`)."""
        raise NotImplementedError

    def vet_new(self, spec, m, planned):
        """The planned source of a load, less what the dataset may not take twice
        (documents: ids already stored). The default takes everything."""
        return planned

    def input_error(self, e: BaseException):
        """The bad-input error a run of this kind stopped on, or None (then nothing of the
        run is discarded: its durable batches are kept for a resume)."""
        return None

    def discard_run(self, spec, nshards: int, table: str, clear_from: int) -> None:
        """Remove what a run that failed on bad input wrote (the default: nothing; the next
        writer removes uncommitted batches)."""

    def drop_table(self, store, table: str) -> None:
        """Drop one of this kind's tables from a shard (garbage collection)."""
        store.drop_table(table)

    @classmethod
    def reader(cls, ds):
        """The keyed reader of a dataset of this kind (`Dataset.docs`); fixed-size records
        have none."""
        raise UsageError(
            f"dataset {ds.uri} holds fixed-size {ds.layout.name} records, not documents; "
            "use read_records / iter_batches"
        )

    # --- worker side -----------------------------------------------------------------
    def writer(self, task):
        """The worker-side writer of this kind (one per worker process)."""
        raise NotImplementedError
