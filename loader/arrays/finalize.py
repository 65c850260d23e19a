"""Redimension: turn a dataset's flat records into a 2-D chunked, indexed array.

``finalize(DATASET, dims="i0:10,i1:100000")`` makes two integer fields of the layout the
coordinates of a 2-D array (first dim slowest: row-major), each with a chunk length. The
domain is discovered, coordinates may be negative. Every field of the record (the two
dims and all other fields, the *attributes*) is kept in the cell.

Storage
-------
- A chunk ``(crow, ccol) = (floor(r / L0), floor(c / L1))`` holds its cells in row-major
  order (then ``syn``). Its value is a batch of the *cell layout* in the dataset's format
  (capnp or Arrow), written by the same serializers as flat batches: the cell layout is
  the dataset's layout (all fields, in declaration order, so a capnp chunk is a standard
  ``Batch`` message of the dataset's own schema and is framed zero-copy), plus a last
  field ``syn: uint32`` for ``--duplicates keep``. A chunk larger than one value may hold
  (capnp: 64 MiB) is split into *pieces* 0, 1, ... of consecutive cells.
- Key: 20 bytes, big-endian, ``crow + 2**63`` (u64), ``ccol + 2**63`` (u64), piece (u32):
  byte order is numeric (row-major chunk) order, negative coordinates included.
- Chunk -> shard: ``(crow + ccol) mod K`` (deterministic; neighbouring chunks, left/right
  and up/down, land on different shards). One table per array build
  (``array-NAME-RUNID``) in each shard.
- The chunk index (one row per piece: crow, ccol, piece, shard, cells, bytes, xxh3
  checksum, min/max of every field) is an Arrow IPC file ``arrays/TABLE.arrow`` next to
  the manifest, written atomically before the manifest switches to it. The manifest's
  ``arrays[NAME]`` holds the summary (dims, chunk lengths, policy, bounds, cells, chunks,
  format, ``built_from_records``, table and index file).
- Rebuilding an array is atomic: the new build goes to a new table and index file, the
  manifest switches and lists the old table and file as garbage in the same write; they
  are deleted at once unless a reader still pins an older snapshot, else by a later
  writer (loader/garbage.py).

Algorithm (out of core, see finalize_workers.py)
------------------------------------------------
Every build worker w owns the output shards s with s mod W == w and writes each of its
chunks once, in key order, in *windows*: runs of consecutive chunks (of one shard, in key
order) whose records fit the worker's ``memory_budget``. Two ways to fill a window:

0. scan: W workers read contiguous record ranges and count the records of every chunk in
   every batch (rows batch, chunk, count). From it the coordinator cuts each shard's
   chunks into windows and lists, per window, the batches holding its records
   (`plan_direct`).
1. *direct* (no spill files): when every worker would read at most
   ``DIRECT_MAX_SCAN_RATIO`` records per record it owns (records of a chunk sit in few
   batches, as when a dimension follows the record order - scidb96's i1), each build
   worker reads its windows' batches itself (zero-copy from LMDB), copying whole batches
   or only the records of the window's chunks.
   *spill* otherwise (or ``strategy="spill"``; also when the scan finds the records too
   scattered): W workers read contiguous record ranges; each fills a buffer of at most
   ``memory_budget`` bytes, groups it by (shard, chunk) (a radix sort on a compact group
   number) and writes it as a *spill run* (records, record indices, directory) into
   ``ROOT/.finalize-RUNID/``; the build merges the runs chunk by chunk in key order,
   reading windows of whole chunks that fit the budget.
2. build: sort each window's cells on one int64 key (chunk ordinal in the window's box of
   chunks, row and column within the chunk; a lexsort for domains too wide for it),
   apply the duplicates policy, encode every chunk (piece) once and append it in key
   order (LMDB append / RocksDB SST), in groups of up to 64 MiB per transaction, the disk
   writeback started after each group, one sync per shard at the end;
3. commit: merge the per-worker index rows, write the index file, switch the manifest.

Memory is bounded by the budget (per worker) whatever N is, provided no single chunk is
larger than the budget (a window always holds at least one whole chunk). Pages of the
flat store read zero-copy are dropped from the reader's resident set after each batch
(``ValueReader.release``), so a pass over a store larger than RAM stays flat in RSS.

Crash safety: nothing the manifest refers to is modified before the switch; the new
table, spill runs and index file of a crashed run are leftovers that the next finalize
(or compact) removes (``collect_index_garbage``, the build workers' table sweep), and the
re-run rebuilds the array from scratch. Kill points for the tests: see faults.py.

Duplicates (two records on one cell): ``error`` (default) names the cell and two record
indices and commits nothing; ``first``/``last`` keep the record with the lowest/highest
record index; ``keep`` keeps them all with ``syn`` = 0..k-1 in record-index order.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import time
from dataclasses import dataclass

import numpy as np

from ..errors import BulkloadError, DuplicateCellError, UsageError, WorkerError
from ..infra import faults, interrupts
from ..maintain.garbage import collect_garbage, held_files, held_tables, retire_array, start_writing
from ..model import manifest as mf
from ..model.layouts import Field, Layout
from ..model.runs import stop as stop_run

POLICIES = ("error", "first", "last", "keep")
STRATEGIES = ("auto", "direct", "spill")
#: auto picks direct when every build worker reads at most this many records per record it owns
DIRECT_MAX_SCAN_RATIO = 6
#: scan rows (batch, chunk, count) beyond which the data counts as scattered (spill)
MAX_SCAN_ENTRIES = 4_000_000
#: largest chunk box (rows x columns of chunks) of one direct window
MAX_WINDOW_BOX = 1 << 22
DEFAULT_ARRAY = "grid"
#: bytes of record buffers (plus sort temporaries) per worker
DEFAULT_MEMORY_BUDGET = 512 << 20
MIN_MEMORY_BUDGET = 4096
#: most cells per stored piece for formats without a size limit (Arrow)
MAX_PIECE_CELLS = 1 << 22
TABLE_PREFIX = "array-"
INDEX_DIR = "arrays"
SPILL_PREFIX = ".finalize-"
SHARD_MAP = "(chunk_row + chunk_col) mod shards"
KEY_FORMAT = "u64be(chunk_row + 2**63) u64be(chunk_col + 2**63) u32be(piece)"

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_KEY = struct.Struct(">QQI")
_TOP = 1 << 63
KEY_DTYPE = np.dtype([("r", ">u8"), ("c", ">u8"), ("p", ">u4")])


# --- the array spec -------------------------------------------------------------------


@dataclass(frozen=True)
class ArraySpec:
    name: str
    dims: tuple[str, str]
    chunks: tuple[int, int]
    policy: str
    layout: dict  # the dataset's layout (to_dict)

    @property
    def layout_obj(self) -> Layout:
        return Layout.from_dict(self.layout)

    @property
    def attrs(self) -> list[str]:
        return [n for n, _ in self.layout["fields"] if n not in self.dims]

    def cell_layout(self) -> Layout:
        return cell_layout(self.layout_obj, self.policy)

    @property
    def dims_text(self) -> str:
        return ",".join(f"{d}:{c}" for d, c in zip(self.dims, self.chunks))


def cell_layout(layout: Layout, policy: str) -> Layout:
    """The layout of a stored cell: the record's fields (+ ``syn: uint32`` for keep)."""
    if policy != "keep":
        return layout
    return Layout(f"{layout.name}_syn", layout.fields + (Field("syn", "uint32"),),
                  f"cells of {layout.name} with a synthetic dimension syn")


def parse_dims(dims, layout: Layout) -> tuple[tuple[str, str], tuple[int, int]]:
    """``"i0:10,i1:100000"`` (or ``[("i0", 10), ("i1", 100000)]``) -> (names, chunks)."""
    if isinstance(dims, str):
        parts = [p.strip() for p in dims.split(",")]
        pairs = []
        for p in parts:
            name, sep, chunk = p.partition(":")
            if not sep or not name.strip() or not chunk.strip():
                raise UsageError(f"--dims {dims!r}: {p!r} is not FIELD:CHUNK; "
                                 "write two integer fields with chunk lengths, e.g. --dims i0:10,i1:100000")
            pairs.append((name.strip(), chunk.strip()))
    else:
        try:
            pairs = [(str(n), c) for n, c in dims]
        except (TypeError, ValueError):
            raise UsageError(f"dims {dims!r}: give 'FIELD:CHUNK,FIELD:CHUNK' or [(field, chunk), ...]") from None
    if len(pairs) != 2:
        raise UsageError(f"--dims {_show(dims)}: a 2-D array needs exactly two dimensions "
                         f"(got {len(pairs)}), e.g. --dims i0:10,i1:100000")
    names, chunks = [], []
    for name, chunk in pairs:
        try:
            f = layout.field(name)
        except KeyError:
            raise UsageError(f"--dims {_show(dims)}: unknown field {name!r}; layout {layout.name!r} "
                             f"has {', '.join(layout.names)}") from None
        if not f.is_integer:
            ints = [g.name for g in layout.fields if g.is_integer and g.type != "uint64"]
            raise UsageError(f"--dims {_show(dims)}: field {name!r} is {f.type}, not an integer; "
                             f"dimensions must be integer fields ({', '.join(ints) or 'none in this layout'})")
        if f.type == "uint64":
            raise UsageError(f"--dims {_show(dims)}: field {name!r} is uint64; coordinates are int64, "
                             "use a field of a narrower integer type")
        if name in names:
            raise UsageError(f"--dims {_show(dims)}: field {name!r} is given twice; "
                             "the two dimensions must be different fields")
        try:
            n = int(chunk)
            if isinstance(chunk, float) and chunk != n:
                raise ValueError
        except (TypeError, ValueError):
            raise UsageError(f"--dims {_show(dims)}: chunk length {chunk!r} of {name!r} "
                             "is not an integer; use a positive integer, e.g. i0:10") from None
        if n <= 0 or n >= 2**63:
            raise UsageError(f"--dims {_show(dims)}: chunk length of {name!r} must be a positive "
                             f"integer below 2**63, got {n}")
        names.append(name)
        chunks.append(n)
    return (names[0], names[1]), (chunks[0], chunks[1])


def _show(dims) -> str:
    return repr(dims) if isinstance(dims, str) else repr(list(dims))


def check_array_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise UsageError(f"array name {name!r} is not allowed; use a letter then letters, digits "
                         "or _ (at most 64 characters), e.g. grid")
    return name


def make_spec(layout: Layout, dims, array: str, duplicates: str) -> ArraySpec:
    check_array_name(array)
    if duplicates not in POLICIES:
        raise UsageError(f"--duplicates {duplicates!r} is unknown; use one of {', '.join(POLICIES)}")
    names, chunks = parse_dims(dims, layout)
    if duplicates == "keep" and "syn" in layout.names:
        raise UsageError(f"--duplicates keep adds a dimension 'syn', but layout {layout.name!r} "
                         "already has a field named syn; use first or last")
    return ArraySpec(array, names, chunks, duplicates, layout.to_dict())


# --- keys and shards --------------------------------------------------------------------


def chunk_key(crow: int, ccol: int, piece: int = 0) -> bytes:
    """Big-endian, order-preserving key of a chunk piece (negative coordinates included)."""
    return _KEY.pack(int(crow) + _TOP, int(ccol) + _TOP, int(piece))


def decode_key(key: bytes) -> tuple[int, int, int]:
    r, c, p = _KEY.unpack(bytes(key))
    return r - _TOP, c - _TOP, p


def chunk_keys(crow: np.ndarray, ccol: np.ndarray, piece: np.ndarray) -> list[bytes]:
    """Vectorised chunk_key."""
    a = np.empty(len(crow), KEY_DTYPE)
    a["r"] = np.asarray(crow, np.int64).view(np.uint64) ^ np.uint64(_TOP)
    a["c"] = np.asarray(ccol, np.int64).view(np.uint64) ^ np.uint64(_TOP)
    a["p"] = piece
    raw = a.tobytes()
    n = KEY_DTYPE.itemsize
    return [raw[i:i + n] for i in range(0, len(raw), n)]


def chunk_shard(crow, ccol, nshards: int):
    """The shard that owns chunk (crow, ccol): (crow + ccol) mod K (no int64 overflow)."""
    return (crow % nshards + ccol % nshards) % nshards


# --- order-independent record checksum -----------------------------------------------------

_P1 = np.uint64(0x9E3779B97F4A7C15)
_P2 = np.uint64(0xBF58476D1CE4E5B9)
_P3 = np.uint64(0x94D049BB133111EB)


def record_hashes(raw: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row of ``raw`` ((n, record_size) uint8, or records)."""
    if raw.dtype != np.uint8 or raw.ndim != 2:
        raw = np.ascontiguousarray(raw).view(np.uint8).reshape(len(raw), -1)
    n, rs = raw.shape
    w8 = -(-rs // 8) * 8
    if w8 != rs or not raw.flags.c_contiguous:
        pad = np.zeros((n, w8), np.uint8)
        pad[:, :rs] = raw
        raw = pad
    words = raw.view("<u8")
    h = np.full(n, np.uint64(rs), np.uint64)
    for k in range(words.shape[1]):
        h ^= words[:, k]
        h *= _P1
        h ^= h >> np.uint64(29)
    h ^= h >> np.uint64(30)
    h *= _P2
    h ^= h >> np.uint64(27)
    h *= _P3
    h ^= h >> np.uint64(31)
    return h


def hash_sum(raw: np.ndarray) -> int:
    """Sum (mod 2**64) of record_hashes: equal for equal multisets of records."""
    if len(raw) == 0:
        return 0
    return int(record_hashes(raw).sum(dtype=np.uint64))


# --- zero-copy reads ---------------------------------------------------------------------


class ValueReader:
    """Reads values of one table of one shard; zero-copy under LMDB while open.

    ``with ValueReader(store, table) as rd: v = rd.get(key)``: ``v`` is valid until the
    block ends (an LMDB read transaction with ``buffers=True``); other backends copy.
    """

    def __init__(self, store, table: str):
        self.store = store
        self.table = table
        self.txn = None
        self.db = None
        self.cursor = None
        self.pages = None

    def __enter__(self):
        st = self.store
        if getattr(st, "scheme", "") in ("lmdb", "mem") and hasattr(st, "_db"):
            self.db = st._db(self.table, create=False)
            if self.db is not None:
                import lmdb

                env = st.env
                try:
                    self.txn = env.begin(write=False, buffers=True)
                except lmdb.MapResizedError:
                    st._entry.pages = None  # the map moves: its old view must not be read
                    env.set_mapsize(0)
                    self.txn = env.begin(write=False, buffers=True)
                try:
                    self.cursor = self.txn.cursor(self.db)
                except lmdb.BadDbiError:  # another process dropped the table: it reads as absent
                    st._dropped(self.table)
                    self.txn.abort()
                    self.txn = self.db = None
                    return self
                self.pages = st._pages()
        return self

    def get(self, key: bytes):
        if self.txn is not None:
            import lmdb

            from ..stores.lmdb_store import _reading

            try:
                with _reading(self.store.path):  # a damaged store: one error naming the shard
                    if not self.cursor.set_key(key):
                        return None
                    return self.store._value(self.cursor, self.pages)
            except lmdb.BadDbiError:  # the table was dropped after this process opened it
                return None
        if self.db is None and getattr(self.store, "scheme", "") in ("lmdb", "mem"):
            return None
        return self.store.get(key, table=self.table)

    def release(self, value) -> None:
        """Done with a zero-copy value: drop its pages from this process's resident set
        (``madvise(MADV_DONTNEED)`` on the read-only file mapping; the data stays in the
        page cache). Keeps the RSS of a pass over a large store flat. No-op for copies."""
        if self.txn is None or value is None:
            return
        _madvise_dontneed(value)

    def __exit__(self, *exc):
        if self.txn is not None:
            self.cursor = None
            self.txn.abort()
            self.txn = None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_libc = None


def _madvise_dontneed(value) -> None:
    global _libc
    try:
        if _libc is None:
            import ctypes

            _libc = ctypes.CDLL("libc.so.6", use_errno=True)
            _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        a = np.frombuffer(value, np.uint8)
        lo = -(-a.ctypes.data // _PAGE) * _PAGE
        hi = (a.ctypes.data + len(a)) // _PAGE * _PAGE
        if hi - lo >= _PAGE:
            _libc.madvise(lo, hi - lo, 4)  # MADV_DONTNEED
    except (OSError, AttributeError, ValueError, TypeError):
        _libc = False if _libc is None else _libc


# --- the chunk index file --------------------------------------------------------------------


def index_columns(cell: Layout) -> list[tuple[str, str]]:
    """(name, numpy dtype) of the index rows for a cell layout."""
    cols = [("crow", "<i8"), ("ccol", "<i8"), ("piece", "<i4"), ("shard", "<i4"),
            ("cells", "<i8"), ("nbytes", "<i8"), ("checksum", "<u8")]
    from ..model.layouts import TYPES

    for f in cell.fields:
        cols.append((f"min_{f.name}", TYPES[f.type][0]))
        cols.append((f"max_{f.name}", TYPES[f.type][0]))
    return cols


def write_index(path: str, rows: np.ndarray) -> None:
    """Write the index rows (structured array) as an Arrow IPC file, atomically."""
    import pyarrow as pa

    table = pa.Table.from_arrays([pa.array(np.ascontiguousarray(rows[n])) for n in rows.dtype.names],
                                 names=list(rows.dtype.names))
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with pa.OSFile(tmp, "wb") as sink:
            with pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dfd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        from ..errors import StoreError

        raise StoreError(f"could not write the chunk index {path}: {e.strerror or e}; "
                         "nothing was committed - free space and retry") from e


def read_index(path: str) -> dict[str, np.ndarray]:
    import pyarrow as pa

    try:
        with pa.memory_map(path, "r") as src:
            table = pa.ipc.open_file(src).read_all()
    except (OSError, pa.ArrowException) as e:
        from ..errors import VerifyError

        raise VerifyError(f"cannot read the chunk index {path}: {e}; re-run `bulkload finalize`") from None
    return {name: table.column(name).to_numpy() for name in table.column_names}


def index_path(root: str, summary: dict) -> str:
    return os.path.join(root, summary["index"])


# --- finalize -------------------------------------------------------------------------------


def finalize(dataset_uri: str, dims="i0:10,i1:100000", array: str = DEFAULT_ARRAY,
             duplicates: str = "error", workers: int | None = None, compact: bool = True,
             progress: str = "none", memory_budget: int | None = None,
             strategy: str = "auto") -> dict:
    """Compact (unless ``compact=False``) and redimension the dataset into a 2-D array.

    ``strategy``: ``auto`` (default: direct when the records of each window of chunks sit
    in few batches, else spill), ``direct`` (direct whenever the chunk boxes allow it) or
    ``spill`` (always partition into spill runs); see the module docstring.

    Returns a report (dict). Raises UsageError for bad dims/options (nothing touched),
    DuplicateCellError under ``duplicates="error"`` (nothing committed).
    """
    from ..infra.lock import DatasetLock
    from ..infra.pool import Pool
    from ..infra.progress import Progress
    from ..loading.options import MAX_WORKERS, check_count, default_workers
    from ..maintain.compact import compact_locked
    from ..stores.base import parse_dataset_uri
    from ..stores.health import require_shards
    from .workers import BuildTask, PartitionTask, ScanTask, build_worker, partition_worker, scan_worker

    t_start = time.perf_counter()
    spec = parse_dataset_uri(dataset_uri)
    m = mf.load_manifest(spec.root, dataset_uri)
    layout = m.layout_obj
    aspec = make_spec(layout, dims, array, duplicates)
    check_count("--workers", workers, 1, MAX_WORKERS)
    if strategy not in STRATEGIES:
        raise UsageError(f"strategy {strategy!r} is unknown; use one of {', '.join(STRATEGIES)}")
    fault = faults.from_env()
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else int(memory_budget)
    if budget < MIN_MEMORY_BUDGET:
        raise UsageError(f"memory budget {budget} bytes is too small; give at least {MIN_MEMORY_BUDGET}")
    w_req = int(workers) if workers else default_workers()
    from ..serializers import get_serializer

    cell = aspec.cell_layout()
    cser = get_serializer(m.format, cell, m.compression)  # rejects impossible combinations
    max_piece = cser.max_records or MAX_PIECE_CELLS
    max_piece = max(1, min(max_piece, MAX_PIECE_CELLS))

    import threading

    # the index file needs pyarrow: import it while the workers run, not after them
    threading.Thread(target=_import_pyarrow, name="import-pyarrow", daemon=True).start()
    with DatasetLock(spec.root) as lock:
        lock.set_job(f"finalize {array}")
        m = mf.load_manifest(spec.root, dataset_uri)
        require_shards(spec.with_shards(m.shards), m)
        if m.layout != aspec.layout:
            raise UsageError(f"dataset {spec.uri} changed layout while finalize started; retry")
        spec = spec.with_shards(m.shards)
        start_writing(spec, m)
        compact_report = None
        if compact:
            compact_report = compact_locked(spec, m, progress=progress, workers=workers)
            m = mf.load_manifest(spec.root, dataset_uri)
        run = mf.new_run("finalize", array=array, dims=aspec.dims_text, duplicates=duplicates,
                         workers=None)
        m.runs.append(run)
        m.save(spec.root)
        run_id = run["id"]
        table = f"{TABLE_PREFIX}{array}-{run_id}"
        for leftover in os.listdir(spec.root):  # spill dirs of crashed runs (we hold the lock)
            if leftover.startswith(SPILL_PREFIX):
                shutil.rmtree(os.path.join(spec.root, leftover), ignore_errors=True)
        collect_index_garbage(spec.root, m)
        spill = os.path.join(spec.root, f"{SPILL_PREFIX}{run_id}")
        os.makedirs(spill)
        os.makedirs(os.path.join(spec.root, INDEX_DIR), exist_ok=True)
        k = m.shards
        total = m.records
        rs = layout.record_size
        keep_tables = tuple(sorted({a["table"] for a in m.arrays.values()} | held_tables(m) | {table}))
        nbuild = max(1, min(w_req, k))
        t_phase = {}
        try:
            # --- 1. scan: which chunks each batch holds (skipped for strategy="spill") ------------
            t = time.perf_counter()
            nscan = max(1, min(w_req, len(m.batches) or 1))
            groups = _split_batches(m.batches, nscan)
            # (seq, shard, first, count, checksum, nbytes): workers check what they read
            flat = [tuple(b.row()) for b in sorted(m.batches, key=lambda b: b.first)]
            pos_of = {b[0]: i for i, b in enumerate(flat)}
            plan = None
            why = "strategy spill"
            receipts0: list[dict] = []
            if strategy != "spill" and flat:
                tasks0 = [ScanTask(store=spec, worker=w, layout=m.layout, format=m.format,
                                   compression=m.compression,
                                   batches=tuple((pos_of[b.seq], *b.row()) for b in g),
                                   dims=aspec.dims, chunks=aspec.chunks, out_dir=spill,
                                   max_entries=MAX_SCAN_ENTRIES // len(groups), main_pid=os.getpid(),
                                   fault=fault)
                          for w, g in enumerate(groups)]
                with Progress(f"finalize {array}: scan", total, rs, mode=progress) as prog:
                    receipts0 = Pool(scan_worker, tasks0, on_progress=prog.advance).run()
                if any(rc["scattered"] for rc in receipts0):
                    why = "records too scattered over chunks"
                else:
                    entries = np.concatenate([np.load(rc["entries"]) for rc in receipts0])
                    plan, why = plan_direct(entries, flat, k, nbuild, direct_window_records(budget, rs),
                                            aspec.chunks, strict=strategy == "direct")
                t_phase["scan_s"] = round(time.perf_counter() - t, 3)
            faults.hit("scanned")

            receipts1: list[dict] = []
            runs: tuple = ()
            if plan is None:
                # --- 1b. partition into spill runs -----------------------------------------------
                t = time.perf_counter()
                tasks1 = [PartitionTask(store=spec, worker=w, layout=m.layout, format=m.format,
                                        compression=m.compression,
                                        batches=tuple(tuple(b.row()) for b in g),
                                        dims=aspec.dims, chunks=aspec.chunks, nshards=k,
                                        spill_dir=spill, budget=budget, main_pid=os.getpid(), fault=fault)
                          for w, g in enumerate(groups)]
                with Progress(f"finalize {array}: partition", total, rs, mode=progress) as prog:
                    receipts1 = Pool(partition_worker, tasks1, on_progress=prog.advance).run()
                runs = tuple((name, n) for rc in receipts1 for name, n in rc["runs"])
                t_phase["partition_s"] = round(time.perf_counter() - t, 3)
                faults.hit("spilled")
            run["workers"] = max(len(groups), nbuild)
            run["strategy"] = "direct" if plan is not None else "spill"

            # --- 2. build chunks, one writer per shard -----------------------------------------
            t = time.perf_counter()
            tasks2 = [BuildTask(store=spec, worker=w, workers=nbuild, nshards=k, layout=m.layout,
                                cell_layout=cell.to_dict(), format=m.format, compression=m.compression,
                                dims=aspec.dims, chunks=aspec.chunks, policy=duplicates, array=array,
                                table=table, keep_tables=keep_tables, runs=runs, spill_dir=spill,
                                budget=budget, max_piece=max_piece, main_pid=os.getpid(), fault=fault,
                                batches=tuple(flat) if plan is not None else (),
                                windows=None if plan is None else {
                                    s: plan.get(s, []) for s in range(k) if s % nbuild == w})
                      for w in range(nbuild)]
            with Progress(f"finalize {array}: write chunks", total, rs, mode=progress) as prog:
                receipts2 = Pool(build_worker, tasks2, on_progress=prog.advance).run()
            t_phase["build_s"] = round(time.perf_counter() - t, 3)
            faults.hit("built")

            # --- 3. the index, then the manifest switch -------------------------------------------
            t = time.perf_counter()
            parts = [np.load(rc["index"]) for rc in receipts2 if rc["index"]]
            dt = np.dtype(index_columns(cell))
            rows = np.concatenate(parts) if parts else np.empty(0, dt)
            rows = rows[np.lexsort((rows["piece"], rows["ccol"], rows["crow"]))]
            rel_index = os.path.join(INDEX_DIR, f"{table}.arrow")
            write_index(os.path.join(spec.root, rel_index), rows)
            t_phase["index_s"] = round(time.perf_counter() - t, 3)
            faults.hit("indexed")
        except BaseException as e:
            _drop_tables(spec, k, table)
            err = e
            if isinstance(e, WorkerError) and getattr(e, "worker_type", "") == "DuplicateCellError":
                err = DuplicateCellError(re.sub(r"^worker \d+ failed: ", "", str(e)))
            err = stop_run(run, err, "the arrays are unchanged; re-run the same command to finalize")
            m.save(spec.root)
            raise err from None
        finally:
            shutil.rmtree(spill, ignore_errors=True)

        cells = int(rows["cells"].sum()) if len(rows) else 0
        nchunks = int(len(np.unique(rows[["crow", "ccol"]]))) if len(rows) else 0
        bounds = None
        if len(rows):
            d0, d1 = aspec.dims
            bounds = {d0: [int(rows[f"min_{d0}"].min()), int(rows[f"max_{d0}"].max())],
                      d1: [int(rows[f"min_{d1}"].min()), int(rows[f"max_{d1}"].max())]}
        dropped = sum(rc["dropped"] for rc in receipts2)
        dropped_hash = sum(rc["dropped_hash"] for rc in receipts2) % 2**64
        types = {f.name: f.type for f in layout.fields}
        seconds = time.perf_counter() - t_start
        summary = {
            "name": array,
            "dims": [{"name": d, "type": types[d], "chunk": c} for d, c in zip(aspec.dims, aspec.chunks)],
            "attrs": aspec.attrs,
            "synthetic": ["syn"] if duplicates == "keep" else [],
            "policy": duplicates,
            "format": m.format,
            "compression": m.compression,
            "cell_layout": cell.to_dict(),
            "table": table,
            "index": rel_index,
            "key": KEY_FORMAT,
            "shard_map": SHARD_MAP,
            "bounds": bounds,
            "cells": cells,
            "chunks": nchunks,
            "pieces": int(len(rows)),
            "bytes": int(rows["nbytes"].sum()) if len(rows) else 0,
            "built_from_records": total,
            "built_from_batches": len(m.batches),
            "dropped": int(dropped),
            "dropped_hash": int(dropped_hash),
            "run_id": run_id,
            "created": time.time(),
        }
        old = m.arrays.get(array)
        spill_runs = len(runs)
        with interrupts.held(lambda: f"run {run_id} had finished: array {array!r} was committed"):
            m.arrays[array] = summary
            if old is not None:
                retire_array(m, old)
            run.update(status="done", ended=time.time(), records=total, cells=cells, chunks=nchunks,
                       seconds=round(seconds, 3), spill_runs=spill_runs)
            m.save(spec.root)  # the switch
        faults.hit("switched")
        collect_garbage(spec, m)

    seconds = time.perf_counter() - t_start
    nbytes = total * rs
    # the phases run one after the other: the peak is the largest sum over one phase's workers
    peak = max(sum(rc["max_rss"] for rc in rcs) for rcs in (receipts0, receipts1, receipts2))
    return {
        "dataset": spec.uri,
        "array": array,
        "run_id": run_id,
        "dims": summary["dims"],
        "policy": duplicates,
        "records": total,
        "bytes": nbytes,
        "cells": cells,
        "chunks": nchunks,
        "pieces": summary["pieces"],
        "dropped": int(dropped),
        "bounds": bounds,
        "stored_bytes": summary["bytes"],
        "strategy": run["strategy"],
        "strategy_reason": why,
        "windows": sum(len(v) for v in plan.values()) if plan is not None else None,
        "spill_runs": spill_runs,
        "workers": {"scan": len(receipts0), "partition": len(receipts1), "build": nbuild},
        "memory_budget": budget,
        "seconds": round(seconds, 4),
        "mb_per_s": round(nbytes / seconds / 1e6, 2) if seconds > 0 else 0.0,
        "records_per_s": round(total / seconds, 1) if seconds > 0 else 0.0,
        "stages": t_phase | {
            "scan_worker_max_s": max((rc["seconds"] for rc in receipts0), default=0),
            "partition_worker_max_s": max((rc["seconds"] for rc in receipts1), default=0),
            "build_worker_max_s": max((rc["seconds"] for rc in receipts2), default=0),
        } | {f"partition_{k2}": max(rc[k2] for rc in receipts1) for k2 in ("read_s", "sort_s", "spill_s")
             if receipts1}
          | {f"build_{k2}": max(rc[k2] for rc in receipts2)
             for k2 in ("read_s", "sort_s", "encode_s", "write_s", "sync_s", "minflt", "cpu_s") if receipts2},
        "worker_peak_rss_bytes": peak,
        "compact": compact_report,
    }


#: bytes per record of a direct window beyond the record (record index, key, order, sorted key)
DIRECT_OVERHEAD = 48


def direct_window_records(budget: int, record_size: int) -> int:
    """Most records of one direct window: 3/4 of the budget (the rest: chunk values in
    flight and LMDB's dirty pages, see finalize_workers._Emitter.group_limit)."""
    return max(1, (budget * 3 // 4) // (record_size + DIRECT_OVERHEAD))


def plan_direct(entries: np.ndarray, flat: list, nshards: int, workers: int, cap: int,
                chunks: tuple, strict: bool = False) -> tuple[dict | None, str]:
    """Windows for the direct build, or (None, reason) when spilling is the better plan.

    ``entries``: the scan's rows (batch position in ``flat``, crow, ccol, count). Per
    shard, its chunks in key order are cut into windows of at most ``cap`` records (at
    least one chunk each); a window lists the batches holding its records and whether
    each batch lies wholly inside it. Auto mode (not ``strict``) gives up when some
    build worker would read more than DIRECT_MAX_SCAN_RATIO records per record it owns
    (records spread over many batches, e.g. random coordinates over a big dataset).
    """
    if not len(entries):
        return {}, "empty"
    o = np.lexsort((entries["ccol"], entries["crow"]))
    er, ec = entries["crow"][o], entries["ccol"][o]
    newk = np.r_[True, (er[1:] != er[:-1]) | (ec[1:] != ec[:-1])]
    uid = np.empty(len(o), np.int64)
    uid[o] = np.cumsum(newk) - 1
    u_crow, u_ccol = er[newk], ec[newk]
    nu = len(u_crow)
    u_count = np.bincount(uid, weights=entries["count"], minlength=nu).astype(np.int64)
    u_shard = chunk_shard(u_crow, u_ccol, nshards)
    u_win = np.empty(nu, np.int64)
    wins: list[dict] = []
    for s in range(nshards):
        cs = np.flatnonzero(u_shard == s)
        if not len(cs):
            continue
        cum = np.cumsum(u_count[cs])
        a = 0
        while a < len(cs):
            base = int(cum[a - 1]) if a else 0
            b = max(int(np.searchsorted(cum, base + cap, side="right")), a + 1)
            sel = cs[a:b]
            crmin, crmax = int(u_crow[sel].min()), int(u_crow[sel].max())
            ccmin, ccmax = int(u_ccol[sel].min()), int(u_ccol[sel].max())
            nr, nc = crmax - crmin + 1, ccmax - ccmin + 1
            if nr * nc > MAX_WINDOW_BOX or nr * nc * chunks[0] * chunks[1] >= 2**62:
                return None, "chunk windows too wide for one sort key"
            lut = np.zeros(nr * nc, bool)
            lut[(u_crow[sel] - crmin) * nc + (u_ccol[sel] - ccmin)] = True
            u_win[sel] = len(wins)
            wins.append({"shard": s, "n": int(cum[b - 1]) - base, "box": (crmin, ccmin, nc), "lut": lut})
            a = b
    e_win = u_win[uid]
    # the (window, batch) pairs, batches in record order within each window
    pair = np.unique(e_win * len(flat) + entries["batch"])
    p_win, p_batch = pair // len(flat), pair % len(flat)
    wins_per_batch = np.bincount(p_batch, minlength=len(flat))
    counts = np.array([b[3] for b in flat], np.int64)
    bnd = np.searchsorted(p_win, np.arange(len(wins) + 1))
    plan: dict[int, list] = {}
    scanned = np.zeros(workers, np.int64)
    owned = np.zeros(workers, np.int64)
    for wi, win in enumerate(wins):
        bs = p_batch[bnd[wi]:bnd[wi + 1]]
        win["batches"] = bs
        win["whole"] = wins_per_batch[bs] == 1
        s = win.pop("shard")
        plan.setdefault(s, []).append(win)
        scanned[s % workers] += int(counts[bs].sum())
        owned[s % workers] += win["n"]
    ratio = float(np.max(scanned / np.maximum(owned, 1)))
    if not strict and ratio > DIRECT_MAX_SCAN_RATIO:
        return None, f"each worker would read {ratio:.1f} records per record it owns"
    return plan, f"{len(wins)} windows, {ratio:.2f} records read per record owned"


def _import_pyarrow() -> None:
    """Import pyarrow and run its first IPC file write once (~0.2 s of one-time set-up)."""
    try:
        import pyarrow as pa

        t = pa.Table.from_arrays([pa.array(np.zeros(1, np.int64))], names=["x"])
        with pa.ipc.new_file(pa.BufferOutputStream(), t.schema) as w:
            w.write_table(t)
    except Exception:  # only a warm-up
        pass


def _split_batches(batches: list, nparts: int) -> list[list]:
    """Contiguous groups of batches (in record order) with about equal record counts."""
    bs = sorted(batches, key=lambda b: b.first)
    if not bs:
        return [[]]
    total = sum(b.count for b in bs)
    out, cur, acc = [], [], 0
    for b in bs:
        cur.append(b)
        acc += b.count
        if len(out) < nparts - 1 and acc >= total * (len(out) + 1) / nparts:
            out.append(cur)
            cur = []
    if cur or not out:
        out.append(cur)
    return [g for g in out if g] or [[]]


def collect_index_garbage(root: str, m) -> None:
    """Remove index files (and their temporaries) that neither an array of the manifest
    nor its garbage list (replaced builds readers may still use) refers to: left by a
    finalize that crashed before its manifest switch. Call with the dataset lock held."""
    d = os.path.join(root, INDEX_DIR)
    if not os.path.isdir(d):
        return
    live = {os.path.basename(a["index"]) for a in m.arrays.values()} | held_files(m)
    for name in os.listdir(d):
        if name.startswith(TABLE_PREFIX) and name not in live:
            try:
                os.unlink(os.path.join(d, name))
            except OSError:
                pass


def _drop_tables(spec, nshards: int, table: str) -> None:
    """Best effort: drop the uncommitted `table` in every shard (what fails is swept by
    the next finalize)."""
    for s in range(nshards):
        if not os.path.exists(spec.shard_path(s)):
            continue
        try:
            st = spec.open_shard(s, write=True)
        except (BulkloadError, OSError):
            continue
        try:
            st.drop_table(table)
        except (BulkloadError, OSError):
            pass
        finally:
            st.close()


# --- verify -----------------------------------------------------------------------------------


def verify_arrays(ds) -> list[dict]:
    """Check every array of the dataset; a list of problems (empty when all is well).

    Per piece: present, size and xxh3 checksum as indexed, decodable, cell count and
    bounds as indexed, cells in strict row-major order inside their chunk (``syn`` = 0..k-1
    for keep). Per array: the multiset of cells (without ``syn``) plus the records dropped
    by first/last equals the flat records it was built from (order-independent checksum
    and counts).
    """
    import xxhash

    from ..serializers import get_serializer

    problems: list[dict] = []
    m = ds.manifest
    for name, a in sorted(m.arrays.items()):
        def bad(problem, chunk="-", shard="-"):
            problems.append({"array": name, "chunk": chunk, "shard": shard, "batch": "-",
                             "first_record": "-", "problem": f"array {name!r}: {problem}"})

        n_before = len(problems)
        try:
            idx = read_index(index_path(ds.spec.root, a))
        except BulkloadError as e:
            bad(str(e))
            continue
        cell = Layout.from_dict(a["cell_layout"])
        ser = get_serializer(a["format"], cell, a["compression"])
        (d0, l0), (d1, l1) = [(d["name"], d["chunk"]) for d in a["dims"]]
        keep = a["policy"] == "keep"
        rs = ds.layout.record_size
        total_cells, hsum = 0, 0
        n = len(idx["crow"])
        by_shard: dict[int, list[int]] = {}
        for i in range(n):
            by_shard.setdefault(int(idx["shard"][i]), []).append(i)
        for s, rows in sorted(by_shard.items()):
            try:
                st = ds.shard(s)
            except BulkloadError as e:
                bad(f"shard {s}: {e}", shard=s)
                continue
            for i in rows:
                crow, ccol, piece = int(idx["crow"][i]), int(idx["ccol"][i]), int(idx["piece"][i])
                where = f"({crow},{ccol},{piece})"
                with ValueReader(st, a["table"]) as rd:
                    v = rd.get(chunk_key(crow, ccol, piece))
                    if v is None:
                        bad(f"chunk {where} is missing from shard {s}", where, s)
                        continue
                    if len(v) != int(idx["nbytes"][i]):
                        bad(f"chunk {where}: size {len(v)} != {int(idx['nbytes'][i])} in the index", where, s)
                        continue
                    if xxhash.xxh3_64_intdigest(v) != int(idx["checksum"][i]):
                        bad(f"chunk {where}: checksum mismatch (stored bytes changed)", where, s)
                        continue
                    try:
                        _, cells = ser.decode(v)
                        cells = np.array(cells)
                    except Exception as e:
                        bad(f"chunk {where}: undecodable: {e}", where, s)
                        continue
                if len(cells) != int(idx["cells"][i]):
                    bad(f"chunk {where}: holds {len(cells)} cells, the index says {int(idx['cells'][i])}", where, s)
                    continue
                r = cells[d0].astype(np.int64)
                c = cells[d1].astype(np.int64)
                if len(cells) and (np.any(np.floor_divide(r, l0) != crow) or np.any(np.floor_divide(c, l1) != ccol)):
                    bad(f"chunk {where}: holds cells outside the chunk", where, s)
                    continue
                if len(cells) > 1:
                    dr, dc = np.diff(r), np.diff(c)
                    newcell = (dr > 0) | ((dr == 0) & (dc > 0))
                    if keep:
                        syn = cells["syn"].astype(np.int64)
                        same = (dr == 0) & (dc == 0)
                        okorder = np.where(same, np.diff(syn) == 1, newcell & (syn[1:] == 0))
                    else:
                        okorder = newcell
                    if not np.all(okorder):
                        bad(f"chunk {where}: cells are not in strict row-major order", where, s)
                        continue
                if keep and piece == 0 and len(cells) and cells["syn"][0] != 0:
                    bad(f"chunk {where}: syn does not start at 0", where, s)
                    continue
                total_cells += len(cells)
                raw = cells.view(np.uint8).reshape(len(cells), cell.record_size)[:, :rs]
                hsum = (hsum + hash_sum(np.ascontiguousarray(raw))) % 2**64
        if len(problems) > n_before:
            continue  # the multiset check would only repeat what is already reported
        built = int(a["built_from_records"])
        if built > ds.manifest.records:
            bad(f"built from {built} records but the dataset holds {ds.manifest.records}")
            continue
        flat = 0
        for first, recs in ds.iter_batches():
            if first >= built:
                break
            part = recs[: max(0, min(len(recs), built - first))]
            flat = (flat + hash_sum(np.ascontiguousarray(part))) % 2**64
        dropped = int(a.get("dropped", 0))
        if total_cells + dropped != built:
            bad(f"holds {total_cells} cells (+{dropped} dropped duplicates), built from {built} records")
        elif (hsum + int(a.get("dropped_hash", 0))) % 2**64 != flat:
            bad("the multiset of cells does not match the flat records it was built from "
                "(order-independent checksum differs)")
    return problems
