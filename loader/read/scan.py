"""`Dataset.scan`: a streaming read of a snapshot as a ``pyarrow.RecordBatchReader``.

Fixed-size records: the batches covering ``records=(a, b)`` (`Dataset.batches_covering`,
the one record-range lookup), read in record order. The reading thread fetches each stored
value; `scan_threads` threads (default: the cores, at most 4) check its size and xxh3
against the manifest row, decompress it and decode only the ``columns`` asked for
(`Serializer.decode_columns`: byte-shuffled Cap'n Proto values unshuffle only those
fields' byte planes, Arrow values read only those buffers; ``_validity`` too when a
nullable field is asked for), and model/arrow_records.py's `record_batch` makes the Arrow
batch (native types, real nulls); xxhash, lz4, zstd and the unshuffle release the GIL. Results are taken
in order with up to `READAHEAD` batches in flight per thread: memory stays a few batches
whatever the dataset's size. A batch of which only part is read (the ends of a record
range) takes `Dataset._records_into` (checked whole by default; in the random-read mode
only the records' pages, see `Dataset.partial_reads`). Under LMDB a value is read zero-copy
and a Cap'n Proto value decoded where it lies: its shard's read transaction is lent to the
batches in flight (`_Leases`) and renewed every `LEASE_VALUES` values.

That loop, `read_batches`, is the one read of fixed-size records: a `BatchDecoder` says
what each batch becomes - Arrow columns (`ColumnsDecoder`: scans, and through them
to_arrow, to_pandas, export, Polars, DuckDB, Dask partitions), numpy records of the
layout's dtype (`RecordsDecoder`: `read_records` into one array, `iter_batches`), columns
allocated once for the whole output (`TableDecoder`: `to_arrow`, `read_table`), or the
checked stored values (export's capnp). Each value it fetches counts in
`Dataset.read_stats`.

``box=`` / ``array=``: the cells of that box of a finalized 2-D array (only the chunks that
overlap it are read: arrays/query.py), as one stream of batches.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeAlias, TypeVar

from ..errors import CorruptBatchError, UsageError, VerifyError
from ..infra import env
from ..model.optspec import DEFAULT_ARRAY
from ..stores.health import batch_message, check_value
from ..stores.values import ValueReader

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    import numpy as np
    import pyarrow as pa

    from ..model import manifest as mf
    from .dataset import Dataset

#: the fields a scan decodes: names, or the CLI's ``"a,b"`` (None: all)
Columns: TypeAlias = "str | Sequence[str]"
#: a half-open record range: (start, stop) (None: open on that side), or the CLI's ``"a:b"``
RecordRange: TypeAlias = "tuple[int | None, int | None] | str"
#: a box of an array: {dim: (start, stop)}, or the CLI's ``"i0=2:5,i1=0:100"``
Box: TypeAlias = "Mapping[str, tuple[object, object]] | str"

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
R = TypeVar("R")

#: batches in flight per decoding thread
READAHEAD = 2
PAGE = 4096


def _resident_bytes() -> int:
    """`RESIDENT_BYTES`: a sixteenth of the machine's memory, within 256 MiB - 1 GiB."""
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        ram = 0
    return min(max(ram // 16, 256 << 20), 1 << 30)


#: bytes of stored values a scan reads before it releases each value's mapped pages once
#: used: the resident set a pass over a store larger than memory keeps of it (clean file
#: pages, which the kernel may reclaim). Released pages are faulted in again by the next
#: read of them (page cache hits, but a fault per 4 KiB page): releasing from the first
#: byte cost 40 % of a repeated 192 MB uncompressed scan (ad hoc); keeping every page kept
#: 264 MB resident for it. Three columns of 20M random-valued scidb96 records (~490 MB of
#: their values' pages), scanned again and again: 0.068 s a scan releasing past 256 MiB,
#: 0.059 s past 1 GiB (ad hoc, medians of 30).
RESIDENT_BYTES = _resident_bytes()
#: decoded bytes of a batch below which the reading thread decodes it itself, threads or not:
#: handing it to a thread and back costs more than its decode (see `read_batches`)
THREADED_BATCH_BYTES = 512 << 10


def scan_threads() -> int:
    """Decoding threads of a scan: ``BULKLOAD_SCAN_THREADS`` (infra/env.py), or the cores
    this process may use (at most 4). One: decoded in the reading thread (an uncompressed
    Cap'n Proto value then from a zero-copy view). Measured ad hoc on a busy 2-core machine
    (2M records, medians of 5; lz4, zstd, random-valued, uncompressed, Arrow), 2 threads
    read faster than one in 20 of 22 pairs: a batch's decompression, checksum and
    unshuffle release the GIL. The columns are allocated in the reading thread: a decoding
    thread's own heap (a glibc arena) would be returned to the kernel and faulted in again."""
    return env.scan_threads()


def check_columns(ds: Dataset, columns: object) -> list[str]:
    """The field names asked for (`Columns`), in the order asked (None: all of the layout's);
    UsageError naming an unknown one and the layout's fields."""
    names = ds.layout.names
    if columns is None:
        return list(names)
    if isinstance(columns, str):
        columns = [c for c in columns.split(",") if c.strip()]
    if not isinstance(columns, Iterable):
        raise UsageError(f'columns={columns!r} names no fields; give a list of field names or "a,b"')
    cols = [str(c).strip() for c in columns]
    bad = [c for c in cols if c not in names]
    if bad:
        raise UsageError(
            f"column {bad[0]!r} is not a field of layout {ds.layout.name!r} of {ds.uri}; "
            f"its fields are {', '.join(names)}"
        )
    if len(set(cols)) != len(cols):
        raise UsageError(f"columns {', '.join(cols)} name a field twice; give each once")
    if not cols:
        raise UsageError("columns names no field; give at least one, or none for all")
    return cols


def parse_records(records: object) -> tuple[int, int | None] | None:
    """``records`` (`RecordRange`): None, (a, b) (b None: to the end) or the CLI's ``"a:b"`` (either side may
    be empty)."""
    if records is None:
        return None
    if isinstance(records, str):
        a, sep, b = records.partition(":")
        try:
            if not sep:
                raise ValueError
            return int(a) if a.strip() else 0, int(b) if b.strip() else None
        except ValueError:
            raise UsageError(
                f"--records {records!r} is not a record range; give START:STOP "
                "(half-open, either side may be empty), e.g. 1000:2000"
            ) from None
    try:
        if not isinstance(records, Iterable):
            raise TypeError
        lo, hi = records
    except (TypeError, ValueError):
        raise UsageError(f"records={records!r} is not a record range; give (start, stop)") from None
    return (0 if lo is None else int(lo)), (None if hi is None else int(hi))


class BatchDecoder(Protocol[T_co]):
    """How `read_batches` turns batches into results: `whole` decodes a batch's whole
    stored value (in a decoding thread when there are several: it must release the GIL
    for its heavy work and touch nothing shared but ``out``), `part` reads records
    [lo, hi) of a batch of which only part is wanted (in the reading thread)."""

    #: whether `whole` may decode a zero-copy view of the value (its result never views it)
    zero_copy: bool
    #: bytes of the output allocated whole in advance (`read_table`, `read_records`; 0: a
    #: stream of batches): the read keeps up to that many bytes of the values it read mapped
    output_bytes: int
    #: bytes `whole` writes per record (the decoded columns' widths)
    row_bytes: int

    def alloc(self, b: mf.BatchEntry, threaded: bool) -> Any:
        """The memory `whole` fills for batch ``b`` (allocated in the reading thread: see
        `scan_threads`), or None for `whole` to allocate."""
        ...

    def whole(self, b: mf.BatchEntry, value: Any, out: Any) -> T_co:
        """Batch ``b`` from its whole stored value: checked (size, xxh3, framing), decoded."""
        ...

    def part(self, b: mf.BatchEntry, lo: int, hi: int) -> T_co:
        """Records [lo, hi) of batch ``b`` (fewer than it holds)."""
        ...


def threaded(dec: BatchDecoder[Any], todo: list[mf.BatchEntry], threads: int) -> bool:
    """Whether `read_batches` hands the batches ``todo`` to ``threads`` decoding threads: with
    several of both, when ``BULKLOAD_SCAN_THREADS`` is set or a batch decodes to at least
    `THREADED_BATCH_BYTES`. A narrow scan's batch (one column of 10,000 scidb96 records:
    80 KB, ~10 us to decode) costs more to hand over and back than to decode. 20M scidb96
    records, 2 threads / the reading thread alone (ad hoc, quiet, medians of 5): 1 column
    0.114 / 0.062 s, 3 columns 0.148 / 0.090, 6 doubles (480 KB a batch) 0.200 / 0.181, 8
    (640 KB) 0.232 / 0.247, to_arrow (960 KB) 0.25 / 0.38."""
    if threads < 2 or len(todo) < 2:
        return False
    wide = max(b.count for b in todo[:4]) * dec.row_bytes >= THREADED_BATCH_BYTES
    return wide or bool(env.scan_threads_given())


def read_batches(ds: Dataset, start: int, stop: int, dec: BatchDecoder[T]) -> Iterator[T]:
    """``dec``'s results for the batches holding records [start, stop), in record order:
    the one read loop of fixed-size records (scan, `read_records`, `iter_batches`, export,
    Polars, DuckDB). Batches are looked up once (`Dataset.batches_covering`); every batch
    read whole has its value checked by ``dec.whole``; a batch of which only part is read
    takes ``dec.part`` (`Dataset._records_into`: checked whole by default, in the
    random-read mode only the records' pages). Decoded by `scan_threads` threads (the
    process's `decoding_pool`), in order, at most `READAHEAD` batches in flight per thread;
    the next batch due that no thread has started yet is decoded by the reading thread
    itself, not waited for (the threads may be busy with another scan's batches; and a
    handoff costs tens of microseconds a batch on a busy machine); each value's bytes are counted in
    `Dataset.read_stats`. UsageError when the dataset is closed (its pin released) while
    this is still being read."""
    todo = ds.batches_covering(start, stop)
    threads = scan_threads()
    pending: deque[tuple[_Done[T] | Future[T], _Lease | None, Callable[[], T] | None]] = deque()
    mapped = [0]  # bytes of values read through the map so far
    readers = _Leases(ds)
    keep = max(RESIDENT_BYTES, dec.output_bytes)  # see fetched
    # a decoder of under half of each record's bytes reads only part of a value (BLZ3: the
    # blocks of its columns, each hashed as it is decoded): its value's pages are left for
    # the decode to fault in, not all touched first (20M random-valued records, one column
    # of 14: 0.24 -> 0.07 s, ad hoc); a whole read touches them (faster: 0.27 against 0.33)
    record_size = ds.layout.record_size
    touch = dec.row_bytes * 2 >= record_size

    def whole(b: mf.BatchEntry, view: Any, value: Any, out: Any, rd: ValueReader) -> T:
        result = dec.whole(b, value, out)
        if mapped[0] > keep:
            rd.release(view)
        return result

    def fetched(b: mf.BatchEntry) -> tuple[_Done[T] | Future[T], _Lease | None, Callable[[], T] | None]:
        """Batch ``b`` decoded (or, with threads, being decoded) from its value read through
        a zero-copy view, and the lease of that view's transaction (None: done with). A
        decoder whose result would view the value gets a copy. Past `RESIDENT_BYTES` of
        values, each value's mapped pages are released once decoded: a scan's resident set
        stays bounded, not the part of the store it has read. A read into an output allocated
        whole keeps as many bytes of values mapped as that output holds (at most twice its
        size resident): released, the next read of them faulted every 4 KiB page in again,
        20-33 % of a repeated full read of 20M ticks or random-valued scidb96 records (ad hoc)."""
        lease = readers.lease(b.shard)
        rd = lease.rd
        view = ds._value(b, rd, touch)
        # the bytes of the value the decode maps in: all, or about its columns' share (and
        # the head's page) - a narrow scan's own pages do not count as the whole values'
        mapped[0] += len(view) if touch else len(view) * dec.row_bytes // record_size + PAGE
        v = bytes(view) if rd.view is not None and not dec.zero_copy else view
        if pool is None:
            try:
                return _Done(whole(b, view, v, dec.alloc(b, False), rd)), None, None
            finally:
                readers.done(lease)
        task = functools.partial(whole, b, view, v, dec.alloc(b, True), rd)  # alloc here: see scan_threads
        return pool.submit(task), lease, task

    pool = decoding_pool(threads) if threaded(dec, todo, threads) else None
    try:
        it = iter(todo)
        while True:
            while len(pending) < threads * READAHEAD:
                b = next(it, None)
                if b is None:
                    break
                if ds.closed:  # its pin is released: compact/finalize may remove what it reads
                    raise UsageError(
                        f"dataset {ds.uri} was closed before its scan was read; read it (the scan, the "
                        "frame, read_records) before closing the dataset (inside its `with` block)"
                    )
                lo, hi = max(start, b.first) - b.first, min(stop, b.first + b.count) - b.first
                if hi - lo < b.count:
                    pending.append((_Done(dec.part(b, lo, hi)), None, None))
                else:
                    pending.append(fetched(b))
            if not pending:
                return
            done, lease, task = pending.popleft()
            # not started yet (the threads are busy, or not yet awake): decoded here, not waited for
            result = task() if task is not None and done.cancel() else done.result()
            if lease is not None:
                readers.done(lease)
            yield result
    finally:
        for f, _, _ in pending:
            f.cancel()
        if pool is not None:  # the decodes still running read values of these transactions
            from concurrent.futures import wait

            wait([f for f, _, _ in pending if not isinstance(f, _Done)])
        readers.close()


_pools: dict[int, ThreadPoolExecutor] = {}  # threads -> pool
_pools_lock = threading.Lock()


def _forked() -> None:
    """In a forked child: its parent's pools have no threads here (and the lock may be held)."""
    global _pools_lock
    _pools.clear()
    _pools_lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)


def decoding_pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` decoding threads, started by its first scan of more
    than one batch and kept for the next ones (shared by concurrent scans: each takes its own
    results, in order). A pool per scan cost each scan its threads' start and join: 1.2 ms, a
    third of a 20-batch scan's time (ad hoc). A forked child starts its own (its parent's
    threads are not in it)."""
    pool = _pools.get(threads)
    if pool is None:
        with _pools_lock:
            pool = _pools.get(threads)
            if pool is None:
                from concurrent.futures import ThreadPoolExecutor  # 9 ms to import: one batch does without

                pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="bulkload-scan")
    return pool


#: values a scan reads through one read transaction of a shard before the next values
#: come through a new one (the old one ends once the batches decoded from it are done)
LEASE_VALUES = 64


class _Lease:
    """A shard's value reader lent to the batches being decoded from its values."""

    __slots__ = ("busy", "left", "rd")

    def __init__(self, rd: ValueReader) -> None:
        self.rd, self.left, self.busy = rd, LEASE_VALUES, 0


class _Leases:
    """The shards' value readers of a scan: a zero-copy value stays valid until the batch
    decoded from it is done (no copy of it), and no read transaction lasts longer than
    `LEASE_VALUES` values and the batches in flight (a long scan never holds the pages a
    writer frees meanwhile)."""

    def __init__(self, ds: Dataset) -> None:
        self.ds = ds
        self.current: dict[int, _Lease] = {}
        self.retired: list[_Lease] = []

    def lease(self, shard: int) -> _Lease:
        le = self.current.get(shard)
        if le is None or le.left == 0:
            if le is not None:
                self.retired.append(le)
                self._sweep()
            le = self.current[shard] = _Lease(ValueReader(self.ds.shard(shard), "batches").__enter__())
        le.left -= 1
        le.busy += 1
        return le

    def done(self, le: _Lease) -> None:
        le.busy -= 1
        if le.busy == 0 and self.retired:
            self._sweep()

    def _sweep(self) -> None:
        for le in [le for le in self.retired if le.busy == 0]:
            self.retired.remove(le)
            le.rd.__exit__()

    def close(self) -> None:
        for le in [*self.current.values(), *self.retired]:
            le.rd.__exit__()
        self.current.clear()
        self.retired.clear()


def check_count(ds: Dataset, b: mf.BatchEntry, first: int, n: int) -> None:
    """CorruptBatchError unless a decoded value holds the manifest row's records."""
    if n != b.count or first != b.first:
        raise CorruptBatchError(
            batch_message(
                ds.uri, b, f"the value holds {n} records from {first}, the manifest says {b.count} from {b.first}"
            )
        )


def checked_columns(
    ds: Dataset, b: mf.BatchEntry, value: Any, decode: list[str], out: dict[str, np.ndarray] | None
) -> dict[str, np.ndarray]:
    """The columns ``decode`` of batch ``b``'s stored ``value`` (into ``out`` where it fits),
    its size and checksum checked against the manifest row first - a BLZ3 value's head,
    then the hash of each block as it is decoded: only the blocks of those columns
    (infra/checksums.py) - then its record count and first record (CorruptBatchError
    naming shard and batch)."""
    check_value(ds.uri, b, value, whole=False)
    first, n, cols = named(ds, b, ds.serializer.decode_columns, value, decode, out)
    check_count(ds, b, first, n)
    return cols


def named(ds: Dataset, b: mf.BatchEntry, decode: Callable[..., R], *args: Any) -> R:
    """``decode(*args)`` of batch ``b``'s value; a VerifyError it raises (a damaged block or
    framing) as a CorruptBatchError naming the shard and batch."""
    try:
        return decode(*args)
    except CorruptBatchError:
        raise
    except VerifyError as e:
        raise CorruptBatchError(batch_message(ds.uri, b, str(e))) from None


#: a narrow scan's output batch holds the records of several stored batches, up to this many
#: bytes (`ColumnsDecoder`): its consumer pays per batch. DuckDB's GROUP BY over 3 columns of
#: 20M scidb96 records took 0.243 s in 2,000 batches of 200 KB, 0.151 s in 200 of 2 MB,
#: 0.199 s in 40 of 10 MB (its own table: 0.09 s; ad hoc, medians of 5)
MERGED_BYTES = 2 << 20


class _Group:
    """The columns of one output batch that several stored batches are decoded into, and
    how many rows of them are handed out (`ColumnsDecoder.alloc`)."""

    def __init__(self, cols: dict[str, np.ndarray], capacity: int) -> None:
        self.cols, self.capacity, self.rows = cols, capacity, 0

    def batch(self, dec: ColumnsDecoder) -> pa.RecordBatch:
        from ..model.arrow_records import record_batch

        return record_batch({n: c[: self.rows] for n, c in self.cols.items()}, dec.ds.layout, dec.names, dec.planned)


class _Slice:
    """Where one stored batch is decoded: its rows of a `_Group`'s columns."""

    def __init__(self, group: _Group, cols: dict[str, np.ndarray]) -> None:
        self.group, self.cols = group, cols


class ColumnsDecoder:
    """Arrow record batches of the fields ``names`` (`record_batches`). A narrow Cap'n Proto
    batch (its columns under a quarter of `MERGED_BYTES`) is decoded into its slice of an output
    batch of up to `MERGED_BYTES` (and ``batch_rows``) that the next such batches share; its
    result is then that `_Group`, which `record_batches` makes one RecordBatch of once the
    stream has moved past it."""

    def __init__(self, ds: Dataset, names: list[str], batch_rows: int | None = None) -> None:
        from ..model.arrow_records import batch_plan, decoded_names

        self.ds, self.names = ds, names
        self.decode = decoded_names(ds.layout, names)  # a nullable field's nulls are bits of _validity
        self.dtypes = [(n, ds.layout.dtype[n]) for n in self.decode]
        # Cap'n Proto columns are always new memory (decompressed, or gathered): they may be
        # decoded from a zero-copy value (Arrow columns are views of the value: not those)
        self.zero_copy = ds.manifest.format == "capnp"
        self.output_bytes = 0  # a stream
        self.row_bytes = sum(dt.itemsize for _n, dt in self.dtypes)
        self.planned = batch_plan(ds.layout, tuple(names))
        self.quarter = MERGED_BYTES // 4 // max(self.row_bytes, 1)  # rows: a batch of more is its own
        self.merged_rows = min(4 * self.quarter, batch_rows or 4 * self.quarter)
        self.group: _Group | None = None  # the output batch being filled

    def alloc(self, b: mf.BatchEntry, threaded: bool) -> dict[str, np.ndarray] | _Slice | None:
        if not self.zero_copy:
            return None  # Arrow: views of the value
        if b.count > self.quarter or b.count > self.merged_rows:
            self.group = None
            return pooled_columns(self.dtypes, b.count)
        g = self.group
        if g is None or g.rows + b.count > g.capacity:
            g = self.group = _Group(pooled_columns(self.dtypes, self.merged_rows), self.merged_rows)
        at, g.rows = g.rows, g.rows + b.count
        return _Slice(g, {n: c[at : g.rows] for n, c in g.cols.items()})

    def whole(
        self, b: mf.BatchEntry, value: Any, out: dict[str, np.ndarray] | _Slice | None
    ) -> pa.RecordBatch | _Group:
        from ..model.arrow_records import record_batch

        if not isinstance(out, _Slice):
            cols = checked_columns(self.ds, b, value, self.decode, out)
            return record_batch(cols, self.ds.layout, self.names, self.planned)
        copy_into(out.cols, checked_columns(self.ds, b, value, self.decode, out.cols))
        return out.group

    def part(self, b: mf.BatchEntry, lo: int, hi: int) -> pa.RecordBatch:
        import numpy as np

        from ..model.arrow_records import record_batch

        recs = pooled_columns([("", self.ds.layout.dtype)], hi - lo)[""]
        self.ds._records_into(recs, b, lo, hi)
        cols = pooled_columns(self.dtypes, hi - lo)
        for n, col in cols.items():
            np.copyto(col, recs[n])
        return record_batch(cols, self.ds.layout, self.names, self.planned)


#: alignment of each column `pooled_columns` carves (Arrow's buffer alignment)
ALIGN = 64


def pooled_columns(dtypes: Sequence[tuple[str, np.dtype]], n: int) -> dict[str, np.ndarray]:
    """Empty columns of ``n`` values of each of ``dtypes`` (name -> numpy array), carved out
    of one buffer of Arrow's memory pool (each `ALIGN`-aligned), freed when the last of them
    is. A scan's batch columns: numpy's own ~1 MB arrays are a fresh mmap each (or a glibc heap
    trimmed back to the kernel), so every batch faulted its pages in again - about half of a
    20-batch scan's time (ad hoc); the pool (mimalloc or jemalloc) keeps freed pages for the
    next batches. Memory stays what the batches alive hold."""
    import numpy as np
    import pyarrow as pa  # heavy: only readers of batches need it

    sizes = [(n * dt.itemsize + ALIGN - 1) // ALIGN * ALIGN for _, dt in dtypes]
    raw = np.frombuffer(pa.allocate_buffer(max(sum(sizes), 1)), np.uint8)
    cols, at = {}, 0
    for (name, dt), size in zip(dtypes, sizes):
        cols[name] = np.ndarray(n, dt, raw.data, at)  # a subarray type: shape (n, k)
        at += size
    return cols


class RecordsDecoder:
    """Records of the layout's dtype (numpy structured arrays): into ``out`` (records
    [start, start + len(out)): `Dataset.read_records`), or each batch's own array
    (``out`` None: `Dataset.iter_batches`). A result is (first record, records)."""

    zero_copy = True  # decode_into copies the records out of the value

    def __init__(self, ds: Dataset, out: np.ndarray | None = None, start: int = 0) -> None:
        self.ds, self.out, self.start = ds, out, start
        self.output_bytes = 0 if out is None else out.nbytes
        self.row_bytes = ds.layout.record_size

    def _slice(self, b: mf.BatchEntry, lo: int, hi: int) -> np.ndarray:
        if self.out is None:
            return pooled_columns([("", self.ds.layout.dtype)], hi - lo)[""]
        at = b.first + lo - self.start
        return self.out[at : at + hi - lo]

    def alloc(self, b: mf.BatchEntry, threaded: bool) -> np.ndarray:
        return self._slice(b, 0, b.count)

    def whole(self, b: mf.BatchEntry, value: Any, out: np.ndarray) -> tuple[int, np.ndarray]:
        check_value(self.ds.uri, b, value, whole=False)  # (a BLZ3 value's blocks: as they are decoded)
        first = named(self.ds, b, self.ds.serializer.decode_into, value, out)
        if first is None or first != b.first:
            first, recs = self.ds.serializer.decode(value)  # for the message: what it holds
            check_count(self.ds, b, first, len(recs))
        return b.first, out

    def part(self, b: mf.BatchEntry, lo: int, hi: int) -> tuple[int, np.ndarray]:
        out = self._slice(b, lo, hi)
        self.ds._records_into(out, b, lo, hi)
        return b.first + lo, out


class TableDecoder:
    """`read_table`'s columns: allocated once for records [start, stop) (``whole``), each
    batch decoded straight into its slice of them; a result is None."""

    zero_copy = True  # Cap'n Proto only (read_table): the columns are new memory

    def __init__(self, ds: Dataset, decode: list[str], whole: dict[str, np.ndarray], start: int) -> None:
        self.ds, self.decode, self.cols, self.start = ds, decode, whole, start
        self.output_bytes = sum(c.nbytes for c in whole.values())
        self.row_bytes = sum(whole[n].dtype.itemsize for n in decode if n in whole)

    def _slices(self, b: mf.BatchEntry, lo: int, hi: int) -> dict[str, np.ndarray]:
        at = b.first + lo - self.start
        return {n: self.cols[n][at : at + hi - lo] for n in self.decode}

    def alloc(self, b: mf.BatchEntry, threaded: bool) -> dict[str, np.ndarray]:
        return self._slices(b, 0, b.count)

    def whole(self, b: mf.BatchEntry, value: Any, out: dict[str, np.ndarray]) -> None:
        copy_into(out, checked_columns(self.ds, b, value, self.decode, out))

    def part(self, b: mf.BatchEntry, lo: int, hi: int) -> None:
        import numpy as np

        recs = np.empty(hi - lo, self.ds.layout.dtype)
        self.ds._records_into(recs, b, lo, hi)
        for name, col in self._slices(b, lo, hi).items():
            col[...] = recs[name]


def copy_into(out: dict[str, np.ndarray], cols: dict[str, np.ndarray]) -> None:
    """The columns ``cols`` that `checked_columns` did not decode into ``out`` in place (a
    zero-copy view of the value) copied there."""
    import numpy as np

    for name, col in out.items():
        if cols[name] is not col:
            np.copyto(col, cols[name])


def record_batches(
    ds: Dataset, names: list[str], start: int, stop: int, batch_rows: int | None
) -> Iterator[pa.RecordBatch]:
    """pyarrow RecordBatches of the fields ``names`` of records [start, stop), in order
    (several narrow stored batches to one: `ColumnsDecoder`)."""
    dec = ColumnsDecoder(ds, names, batch_rows)
    filling: _Group | None = None  # results arrive in order: a group is done once another comes
    for r in read_batches(ds, start, stop, dec):
        if r is filling:
            continue
        if filling is not None:
            yield filling.batch(dec)
        filling = r if isinstance(r, _Group) else None
        if filling is None:
            yield from _rows(r, batch_rows)
    if filling is not None:
        yield filling.batch(dec)


class _Done(Generic[T]):
    """A result computed in the calling thread, with a future's `result` / `cancel`."""

    def __init__(self, value: T) -> None:
        self._value = value

    def result(self) -> T:
        return self._value

    def cancel(self) -> bool:
        return False


def _rows(batch: pa.RecordBatch, batch_rows: int | None) -> Iterator[pa.RecordBatch]:
    if not batch_rows or batch.num_rows <= batch_rows:
        yield batch
        return
    for at in range(0, batch.num_rows, batch_rows):
        yield batch.slice(at, batch_rows)


def arrow_schema(ds: Dataset, names: list[str]) -> pa.Schema:
    from ..model.arrow_records import schema_of

    return schema_of(ds.layout, names)


def check_batch_rows(batch_rows: object) -> int | None:
    if batch_rows is None:
        return None
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise UsageError(f"batch_rows must be a positive integer (rows per Arrow batch), not {batch_rows!r}")
    return batch_rows


def scan(
    ds: Dataset,
    columns: object = None,
    records: object = None,
    box: Box | None = None,
    array: str | None = None,
    batch_rows: object = None,
) -> pa.RecordBatchReader:
    """See `Dataset.scan` (``columns``, ``records``: checked here, `check_columns`, `parse_records`)."""
    import pyarrow as pa  # heavy: only Arrow readers need it

    batch_rows = check_batch_rows(batch_rows)
    if box is not None or array is not None:
        if records is not None:
            raise UsageError(
                "scan reads either a record range (records=) or a box of an array (box=, array=), not both"
            )
        return box_reader(ds, columns, box, array, batch_rows)
    names = check_columns(ds, columns)
    start, stop = record_span(ds, records)
    schema = arrow_schema(ds, names)
    return pa.RecordBatchReader.from_batches(schema, record_batches(ds, names, start, stop, batch_rows))


def record_span(ds: Dataset, records: object) -> tuple[int, int]:
    """[start, stop) of ``records`` (`RecordRange`, checked against the snapshot; None: every
    batch of the snapshot - a Dask task's: some batches, read/dask_read.py)."""
    rng = parse_records(records)
    if rng is None:
        bs = ds.manifest.batches
        return (bs[0].first, bs[-1].first + bs[-1].count) if bs else (0, 0)
    from .dataset import check_record_range

    n = ds.records
    start, stop = rng[0], n if rng[1] is None else rng[1]
    check_record_range(start, stop, n, ds.uri)
    return start, stop


def read_table(ds: Dataset, columns: object = None, records: object = None) -> pa.Table:
    """`Dataset.to_arrow` of fixed-size records: the ``columns`` of ``records`` as one
    pyarrow Table of one chunk per column. The whole output is known in advance, so each
    column is allocated once (large: numpy asks the kernel for huge pages) and every batch
    is decoded by `read_batches`'s threads straight into its slice of them (`TableDecoder`) -
    no per-batch column allocation (fresh pages faulted in per batch), no per-batch Arrow
    batch, no copy of a zero-copy stored value. Every batch read whole is checked as a scan
    checks it. Arrow values are decoded as views of their buffers: they keep `scan`'s batches."""
    import pyarrow as pa  # heavy: only Arrow readers need it

    names = check_columns(ds, columns)
    start, stop = record_span(ds, records)
    if ds.manifest.format != "capnp":
        return scan(ds, names, (start, stop)).read_all()
    import numpy as np

    from ..model.arrow_records import decoded_names, record_batch

    layout = ds.layout
    decode = decoded_names(layout, names)
    whole = {n: np.empty(stop - start, layout.dtype[n]) for n in decode}
    for _ in read_batches(ds, start, stop, TableDecoder(ds, decode, whole, start)):
        pass
    return pa.Table.from_batches([record_batch(whole, layout, names)])


def box_reader(
    ds: Dataset, columns: object, box: Box | None, array: str | None, batch_rows: int | None
) -> pa.RecordBatchReader:
    """The cells of ``box`` (a mapping {dim: (start, stop)} or the CLI's box string; None:
    the whole array) of ``array`` (default grid) with the ``columns`` asked for."""
    import pyarrow as pa

    from ..arrays.query import parse_box, read_box

    array = array or DEFAULT_ARRAY
    ranges = parse_box(box) if isinstance(box, str) else dict(box or {})
    cols = None
    if columns is not None:
        if not isinstance(columns, (str, Iterable)):
            raise UsageError(f'columns={columns!r} names no fields; give a list of field names or "a,b"')
        cols = [c.strip() for c in columns.split(",")] if isinstance(columns, str) else list(columns)
    table = read_box(ds, array, cols, ranges)
    if cols is not None:
        table = table.select(cols)
    batches = table.to_batches(max_chunksize=batch_rows) if batch_rows else table.to_batches()
    return pa.RecordBatchReader.from_batches(table.schema, iter(batches))
