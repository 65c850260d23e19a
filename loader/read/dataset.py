"""Reading a dataset: `open(uri) -> Dataset`.

A Dataset is a snapshot: it reads the manifest once, so it sees exactly the batches
committed when it was opened, whatever a writer does meanwhile. Shards are opened
read-only and lazily (readers never block a writer). The reader pins the manifest's
generation until `close` (loader/snapshots.py): data that compact / finalize replace
stays on disk while a reader may need it (loader/garbage.py). When something the
snapshot names is gone anyway, the error says why: DatasetReplacedError (``load
--replace`` swapped in a new dataset), SnapshotExpiredError (an unpinned reader's data
was collected) - both mean "open it again" - or VerifyError (the store lost data: real
corruption). `verify` re-checks a dataset that moved on while it ran instead of
reporting its vanished data as corrupt.

Documents (layout ``docs``): `Dataset.get(id)` -> `Doc` (id, created_at, text str),
`get_many(ids)` -> (DocBatch of the found ones, in the order asked; missing ids),
`scan(start_id, stop_id)` -> DocBatch of ids in [start, stop) in id order
(``.to_arrow()`` for a pyarrow RecordBatch); see loader/docs/access.py.

On Dask: `to_dask_dataframe()` / `to_dask_array()` give this snapshot as lazy Dask
collections whose tasks read it, and only it, in any process (read/dask_read.py).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import (
    BulkloadError,
    CorruptBatchError,
    DatasetReplacedError,
    SnapshotExpiredError,
    UsageError,
    VerifyError,
)
from ..infra.lock import is_held
from ..kinds import kind_class
from ..model import manifest as mf
from ..model.optspec import DEFAULT_ARRAY
from ..model.placement import batch_key
from ..model.runs import Run, as_seen
from ..serializers import get_serializer
from ..stores.base import ShardStore
from ..stores.health import batch_message, check_shard, check_value, committed_shards, shard_problems
from ..stores.read_stats import ReadStats
from ..stores.spec import parse_dataset_uri
from ..stores.values import ValueReader
from .snapshots import Snapshot, manifest_ident, read_snapshot
from .verifying import KeyedReader, Problem, Verifying

#: the runs `info` shows (the newest; `bulkload runs` lists them all)
INFO_RUNS = 20

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from ..serializers.base import Serializer
    from .scan import Box, Columns, RecordRange


class Dataset(Verifying):
    def __init__(
        self, uri: str, pin: bool = True, snapshot: Snapshot | None = None, as_of: int | str | None = None
    ) -> None:
        """The reader of the dataset at ``uri`` as it is now; or, given ``snapshot`` =
        (manifest, (device, inode) of its file while current or None, Pin or None), of that
        snapshot read earlier (a Dask task reading its graph's snapshot: read/dask_read.py)."""
        self.spec = parse_dataset_uri(uri)
        self.uri = self.spec.uri
        self._opened_as = (uri, pin)
        self.manifest, self._ident, self._pin = snapshot or read_snapshot(self.spec.root, uri, pin, as_of)
        self.layout = self.manifest.layout_obj
        self._shards: dict[int, ShardStore] = {}
        self._docs: KeyedReader | None = None
        self.closed = False
        #: stored bytes and batch values this reader has read (stores/read_stats.py)
        self.read_stats = ReadStats()

    @functools.cached_property
    def serializer(self) -> Serializer:
        """The batches' serializer (UsageError for documents: they are read through `docs`,
        loader/docs/access.py); made when first needed: its module imports numpy, which
        `info` does without (start-up)."""
        self._fixed_only("a serializer")
        return get_serializer(self.manifest.format, self.layout, self.manifest.compression)

    # --- handles -----------------------------------------------------------------
    def require_shard(self, i: int) -> None:
        """Raise MissingShardError / CorruptStoreError if shard i, which holds committed
        batches, is missing or damaged (a shard with no batches may be absent)."""
        damage = check_shard(self.spec, i, committed_shards(self.manifest).get(i))
        if damage is not None and damage.batches:
            raise damage.error()

    def shard(self, i: int, random_reads: bool = False) -> ShardStore:
        """Shard i, opened read-only on first use; ``random_reads`` (chunk and document
        reads) turns OS readahead off when this call opens it."""
        st = self._shards.get(i)
        if st is None:
            self.require_shard(i)
            opts = dict(self.spec.options)
            if (random_reads or self.layout.variable_length) and self.spec.scheme != "rocksdb":
                opts.setdefault("readahead", "0")
            st = self.spec.backend.open(self.spec.shard_path(i), write=False, options=opts)
            # after opening: if the manifest still names our dataset, the shard is ours
            # (`load --replace` swaps in a whole new directory; see replace.py)
            replaced = self._replaced()
            if replaced is not None:
                st.close()
                raise replaced
            self._shards[i] = st
        return st

    def _replaced(self) -> DatasetReplacedError | None:
        """DatasetReplacedError when ``load --replace`` swapped in another dataset, else None."""
        if mf.read_dataset_id(self.spec.root) == self.manifest.dataset_id:
            return None
        return DatasetReplacedError(
            f"dataset {self.uri} was replaced (load --replace) after it was "
            "opened; open it again to read the new content"
        )

    @property
    def pinned(self) -> bool:
        """Whether this reader holds a pin on its snapshot (loader/snapshots.py)."""
        return self._pin is not None

    def moved_on(self) -> BulkloadError | None:
        """Why data of this snapshot may be gone from the stores, as the error to raise
        (DatasetReplacedError, or SnapshotExpiredError for an unpinned reader after a
        manifest write), or None while the snapshot is whole."""
        now = manifest_ident(self.spec.root)
        if now == self._ident:
            return None
        replaced = self._replaced()
        if replaced is not None:
            return replaced
        if self.pinned:  # the same dataset, our data pinned: remember this manifest as checked
            self._ident = now
            return None
        return SnapshotExpiredError(
            f"dataset {self.uri} changed since this reader opened it (compact/finalize "
            "removed data of its snapshot); open it again"
        )

    def missing(self, problem: str) -> BulkloadError:
        """The error for data of this snapshot that a store does not have: the dataset
        moved on (see `moved_on`), or else a VerifyError saying ``problem``."""
        return self.moved_on() or VerifyError(problem)

    def close(self) -> None:
        self.closed = True
        for st in self._shards.values():
            st.close()
        self._shards.clear()
        if self._pin is not None:
            self._pin.release()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- metadata ----------------------------------------------------------------
    @property
    def records(self) -> int:
        return self.manifest.records

    def problems(self) -> list[Problem]:
        """The shards the manifest lists committed batches in that are missing or damaged
        (integrity.py): shard, path, batches, problem."""
        return [p.to_dict() for p in shard_problems(self.spec, self.manifest)]

    def _disk_bytes(self, damaged: set[int]) -> int:
        m = self.manifest
        if not m.batches:
            return 0
        return sum(
            self.shard(i).nbytes()
            for i in range(m.shards)
            if i not in damaged and os.path.isdir(self.spec.shard_path(i))
        )

    def info(self) -> dict[str, Any]:
        """What the dataset holds (layout, format, counts, bytes, runs, arrays) and its
        ``problems``: missing or damaged shards, see `problems`."""
        m = self.manifest
        problems = self.problems()
        disk = self._disk_bytes({p["shard"] for p in problems})
        if self.layout.variable_length:
            text = m.text_bytes
            return {
                "dataset": self.uri,
                "path": self.spec.root,
                "layout": m.layout,
                "record_size": "variable",
                "format": m.format,
                "compression": m.compression,
                "store": m.scheme,
                "shards": m.shards,
                "records": m.records,
                "batches": len(m.batches),
                "batch_records": m.batch_records,
                "record_bytes": text,
                "text_bytes": text,
                "stored_bytes": m.stored_bytes,
                "disk_bytes": disk,
                **self._runs(),
                "arrays": m.arrays,
                "generation": m.generation,
                "garbage": [g.to_dict() for g in m.garbage],
                "problems": problems,
            }
        return {
            "dataset": self.uri,
            "path": self.spec.root,
            "layout": m.layout,
            "record_size": self.layout.record_size,
            "format": m.format,
            "compression": m.compression,
            "store": m.scheme,
            "shards": m.shards,
            "records": m.records,
            "batches": len(m.batches),
            "batch_records": m.batch_records,
            "record_bytes": m.records * self.layout.record_size,
            "stored_bytes": m.stored_bytes,
            "disk_bytes": disk,
            **self._runs(),
            "arrays": m.arrays,
            "generation": m.generation,
            "garbage": [g.to_dict() for g in m.garbage],
            "problems": problems,
        }

    def _runs(self) -> dict[str, Any]:
        """The last `INFO_RUNS` runs as `as_seen` shows them, how many there are and how many
        of each recorded status: `info` reads a window, whatever the length of the history
        (`bulkload runs` / `loader.runs` list them all)."""
        m = self.manifest
        last = as_seen(m, is_held(self.spec.root), INFO_RUNS)
        return {"runs": [r.to_dict() for r in last], "runs_total": len(m.runs), "runs_by_status": m.runs.by_status()}

    def runs_seen(self) -> list[Run]:
        """The dataset's runs as a reader reports them: while no job holds the lock, a run
        still ``running`` is shown ``interrupted`` (model/runs.py's `as_seen`)."""
        return as_seen(self.manifest, job_running=is_held(self.spec.root))

    # --- documents (layout docs) ----------------------------------------------------
    @property
    def docs(self) -> KeyedReader:
        """The keyed reader of the layout's record kind (documents: loader/docs/access.py's
        DocReader); UsageError for fixed-size layouts."""
        if self._docs is None:
            reader: Callable[[Dataset], KeyedReader] = kind_class(self.layout).reader  # kinds/base.py: untyped
            self._docs = reader(self)
        return self._docs

    def get(self, doc_id: int) -> Any:
        """The document with this id: Doc(id, created_at, text); NotFoundError "id N not found"."""
        return self.docs.get(doc_id)

    def get_many(self, ids: Iterable[int]) -> tuple[Any, list[int]]:
        """(DocBatch of the documents found, in the order asked; list of the ids not found)."""
        return self.docs.get_many(ids)

    def scan(
        self,
        columns: Columns | int | None = None,
        records: RecordRange | int | None = None,
        box: Box | None = None,
        array: str | None = None,
        batch_rows: int | None = None,
        *,
        ids: tuple[int | None, int | None] | None = None,
    ) -> Any:
        """A streaming read of this snapshot: a ``pyarrow.RecordBatchReader`` (read/scan.py).

        ``columns``: the fields to decode (a list or ``"a,b"``; default all); ``records``:
        the half-open record range ``(a, b)`` or ``"a:b"``, of which only the batches it
        covers are read; ``box`` ({dim: (start, stop)} or ``"i0=2:5,i1=0:100"``) and
        ``array`` (default grid): the cells of that box of a finalized 2-D array, only its
        chunks read; ``batch_rows``: at most this many rows per Arrow batch. Memory: a few
        batches whatever the dataset's size. Every batch read whole has its checksum checked.

        Documents (layout docs): ``scan(ids=(lo, hi))`` or the positional ``scan(lo, hi)``
        -> a DocBatch of the documents with lo <= id < hi (hi None: to the end), in id order
        (``.to_arrow()`` gives a pyarrow RecordBatch: id, created_at, text)."""
        if self.layout.variable_length:
            span: object = (0 if columns is None else columns, records) if ids is None else ids
            if any(v is not None for v in (box, array, batch_rows)) or not isinstance(span, (tuple, list)):
                raise UsageError(f"dataset {self.uri} holds documents: scan them by id, scan(ids=(lo, hi))")
            lo, hi = span
            return self.docs.scan(0 if lo is None else lo, hi)
        if ids is not None or (isinstance(columns, int) and not isinstance(columns, bool)):
            raise UsageError(
                f"dataset {self.uri} holds fixed-size records, not documents: scan a record range "
                "with scan(records=(start, stop))"
            )
        from .scan import scan  # heavy (pyarrow): only Arrow readers need it

        return scan(self, columns, records, box, array, batch_rows)

    def batches_covering(self, a: int, b: int) -> list[mf.BatchEntry]:
        """The batch rows, in record order, holding records of the half-open range [a, b):
        the one record-range -> batches lookup of every read: a range lookup in the catalog
        (O(log n + k)), never a read of every row."""
        if b <= a:
            return []
        return self.manifest.batches.covering(a, b)

    # --- reading -----------------------------------------------------------------
    def _fixed_only(self, what: str) -> None:
        if self.layout.variable_length:
            raise UsageError(
                f"{what} reads fixed-size records; dataset {self.uri} holds documents: use get / get_many / scan"
            )

    def _value(self, b: mf.BatchEntry, rd: ValueReader | None = None, touch: bool = True) -> bytes | memoryview:
        """The stored value of batch ``b``: a copy, or through ``rd`` (an open ValueReader of
        its shard: zero-copy under LMDB, valid while ``rd`` is open; ``touch=False``: none of
        its pages read until its bytes are, `ValueReader.get`)."""
        v = self.shard(b.shard).get(batch_key(b.seq)) if rd is None else rd.get(batch_key(b.seq), touch)
        if v is None:
            raise self.moved_on() or CorruptBatchError(batch_message(self.uri, b, "missing from the store"))
        self.read_stats.add(len(v))
        return v

    def _checked_value(self, b: mf.BatchEntry) -> bytes | memoryview:
        """The batch's stored value, after checking its size and xxh3 against the manifest
        row (CorruptBatchError naming shard and batch): memory speed, before any decode."""
        v = self._value(b)
        check_value(self.uri, b, v)
        return v

    def _decode(self, b: mf.BatchEntry) -> np.ndarray:
        """The records of batch ``b``, its whole value checked first (size, xxh3), and its
        record count and first record checked against the manifest row."""
        start, recs = self.serializer.decode(self._checked_value(b))
        if len(recs) != b.count or start != b.first:
            raise CorruptBatchError(
                batch_message(
                    self.uri,
                    b,
                    f"the value holds {len(recs)} records from {start}, the manifest says {b.count} from {b.first}",
                )
            )
        return recs

    def _records_into(self, out: np.ndarray, b: mf.BatchEntry, lo: int, hi: int) -> None:
        """Write records [lo, hi) of batch ``b`` into ``out``: from its whole, checked value
        (`_decode`), or - fewer records than the batch holds, opened with ``?readahead=0``,
        in a format and a store that allow it - from its header and those records' pages
        alone (`_part_into`)."""
        if hi - lo >= b.count or not self.partial_reads or not self._part_into(out, b, lo, hi):
            out[...] = self._decode(b)[lo:hi]

    @functools.cached_property
    def partial_reads(self) -> bool:
        """Whether reads of part of a batch may skip the rest of it: only in the random-read
        mode (``?readahead=0``). There a one-record read costs a page or two instead of the
        whole ~1 MB value, and checks its size and framing but not the whole value's
        checksum (which it does not read); by default every read checks the checksum."""
        from ..stores.options import parse_bool  # cheap; only record reads ask

        return not parse_bool("readahead", dict(self.spec.options).get("readahead", True))

    def _part_into(self, out: np.ndarray, b: mf.BatchEntry, lo: int, hi: int) -> bool:
        """Records [lo, hi) of batch ``b`` into ``out`` from a zero-copy value of which only
        the header and those records' pages are read; whether it could. It cannot when the
        format does not store records flat (compressed, Arrow), the store copies values
        out (RocksDB: then the whole value is read anyway, and checked), or the value is not
        the manifest row's size or the header is not exactly the framing of its
        ``count`` records from ``first``: then the whole value is read and checked (which
        names what is wrong). The xxh3 of the whole value is not computed here."""
        if not self.serializer.reads_parts:
            return False
        with ValueReader(self.shard(b.shard), "batches") as rd:
            if rd.view is None:
                return False
            v = rd.get(batch_key(b.seq), touch=False)
            if v is None:
                raise self.moved_on() or CorruptBatchError(batch_message(self.uri, b, "missing from the store"))
            spans = self.serializer.part_spans(lo, hi, len(v), b.count) if len(v) == b.nbytes else None
            if spans is None:
                return False
            self.read_stats.add(sum(n for _, n in spans))
            recs = self.serializer.decode_part(rd.read_parts(v, spans), len(v), b.first, b.count)
        if recs is None:
            return False
        out[...] = recs
        return True

    def iter_batches(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first record index, records) of every committed batch, in record order (the
        scan's read: read/scan.py's `read_batches`)."""
        from .scan import RecordsDecoder, read_batches

        self._fixed_only("iter_batches")
        bs = self.manifest.batches
        if bs:
            yield from read_batches(self, bs[0].first, bs[-1].first + bs[-1].count, RecordsDecoder(self))

    @functools.cached_property
    def _record_count(self) -> int:
        """The snapshot's record count (from the catalog's aggregates: O(1))."""
        return self.manifest.records

    def read_records(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Records [start, stop) as a numpy structured array of the layout's dtype: the
        scan's read (read/scan.py's `read_batches`: the same batches, checks and threads)."""
        import numpy as np  # start-up: opening a dataset (info) does without numpy; reading records needs it

        from .scan import RecordsDecoder, read_batches

        self._fixed_only("read_records")
        n = self._record_count
        stop = n if stop is None else stop
        check_record_range(start, stop, n, self.uri)
        out = np.empty(stop - start, dtype=self.layout.dtype)
        for _ in read_batches(self, start, stop, RecordsDecoder(self, out, start)):
            pass
        return out

    def to_arrow(self, columns: Columns | None = None, records: RecordRange | None = None) -> pa.Table:
        """The records (or ``columns`` of ``records``: see `scan`) as one pyarrow Table;
        documents: id, created_at, text."""
        import pyarrow as pa  # heavy: only Arrow output needs it

        if self.layout.variable_length:
            return pa.Table.from_batches([self.scan().to_arrow()])
        from .scan import read_table

        return read_table(self, columns, records)

    def to_pandas(self, columns: Columns | None = None, records: RecordRange | None = None) -> Any:
        """`to_arrow` as a pandas DataFrame (pandas must be installed): datetimes keep their
        zone, nullable number and bool fields take pandas' nullable dtypes (Int16, boolean)."""
        try:
            import pandas  # noqa: F401 - pyarrow's to_pandas needs it
        except ImportError:
            raise UsageError("to_pandas needs pandas: pip install pandas") from None
        from ..model.arrow_records import frame_of_table  # with pandas: only pandas output needs it

        return frame_of_table(self.to_arrow(columns, records), self.layout)

    def to_polars(self, record_column: str | None = None) -> Any:
        """A ``polars.LazyFrame`` of this snapshot (read/frames.py): projection, filter and
        row-limit pushdown; ``record_column``: an extra column of record numbers, whose
        integer comparisons in a filter read only the batches of that range."""
        from .frames import to_polars

        return to_polars(self, record_column)

    def sql(self, query: str) -> pa.Table:
        """The DuckDB ``query`` over the table ``data`` (this snapshot) as a pyarrow Table."""
        from .frames import sql

        return sql(self, query)

    # --- 2-D arrays (see redimension.py, query.py) ---------------------------------------
    def arrays(self) -> list[dict[str, Any]]:
        """The 2-D arrays of this dataset: dims, chunking, bounds, cell counts."""
        from ..arrays.query import list_arrays  # heavy (pyarrow): only readers of arrays need it

        return list_arrays(self)

    def read_box(
        self, array: str = DEFAULT_ARRAY, attrs: Columns | None = None, **ranges: tuple[object, object]
    ) -> pa.Table:
        """Cells of ``array`` inside the half-open box, e.g. ``read_box(i0=(2, 5), i1=(0, 100))``,
        as a pyarrow.Table: dimension columns, then attributes, in row-major cell order."""
        from ..arrays.query import read_box  # heavy (pyarrow): only readers of arrays need it

        return read_box(self, array, attrs, ranges)

    # --- Dask collections (read/dask_read.py: dask is imported only there) ------------------
    def to_dask_dataframe(self, partition_bytes: int | None = None) -> Any:
        """The records of this snapshot as a lazy dask DataFrame: the layout's columns and
        dtypes, indexed by record number ("record", known divisions); each partition is a
        run of whole batches of about ``partition_bytes`` of records (default 128 MiB)."""
        from .dask_read import dask_dataframe

        return dask_dataframe(self, partition_bytes)

    def to_dask_array(
        self,
        array: str = DEFAULT_ARRAY,
        attr: str | None = None,
        fill: object = None,
        chunks: tuple[int, int] | None = None,
        box: Mapping[str, tuple[object, object]] | None = None,
    ) -> Any:
        """One attribute of a 2-D ``array`` of this snapshot as a lazy dask Array, one
        block per chunk of the array (``chunks``: multiples of them), empty cells ``fill``
        (default NaN; integer attributes need one); ``box`` {dim: (start, stop)} picks the
        cells (default: from the array's first chunk to its last cell)."""
        from .dask_read import dask_array

        return dask_array(self, array, attr, fill, chunks, box)


def check_record_range(start: int, stop: int, n: int, uri: str) -> None:
    """UsageError unless 0 <= start <= stop <= n, saying which bound is wrong: a range that
    goes past the end names the dataset's record count; a stop below the start is most
    likely a count (the range is half-open, [start, stop))."""
    where = f"{uri} holds {n:,} records (indices 0..{n - 1:,})" if n else f"{uri} holds no records"
    if start < 0 or stop < 0:
        raise UsageError(f"record range {start}..{stop} has a negative bound; {where}")
    if start > n:
        raise UsageError(f"record range {start:,}..{stop:,} starts past the end: {where}")
    if stop < start:
        meant = (
            f"{start:,}..{start + stop:,} would go past the end: {where}"
            if start + stop > n
            else f"for {stop:,} records from {start:,} use read_records({start}, {start + stop}); {where}"
        )
        raise UsageError(
            f"record range {start:,}..{stop:,}: stop is below start (the range is half-open "
            f"[start, stop), not (start, count)); {meant}"
        )
    if stop > n:
        raise UsageError(f"record range {start:,}..{stop:,} goes past the end: {where}; read at most to {n:,}")


def open(uri: str, pin: bool = True, as_of: int | str | None = None) -> Dataset:
    """A snapshot reader of the dataset at ``uri`` (close it, or use ``with``). ``pin=False``
    reads without pinning the snapshot: a compaction may then remove its data (reads
    raise SnapshotExpiredError), but the reader never holds garbage back. ``as_of`` (a
    generation number or a run id) reads the dataset as it stood after that commit, while
    its data has not been garbage-collected (else SnapshotExpiredError naming the oldest
    readable generation; model/catalog_history.py)."""
    return Dataset(uri, pin, as_of=as_of)
