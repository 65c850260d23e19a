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
  manifest switches, then the old table and file are dropped (or garbage-collected by the
  next finalize/compact when a reader of this process still holds the shard).

Algorithm (out of core, see finalize_workers.py)
------------------------------------------------
1. partition: W workers read contiguous record ranges; each fills a buffer of at most
   ``memory_budget`` bytes, groups it by (shard, chunk) (a radix sort on a compact group
   number) and writes it as a *spill run* (records, record indices, directory) into
   ``ROOT/.finalize-RUNID/``;
2. build: one writer per output shard (worker w owns shards s with s mod W == w) merges
   the runs chunk by chunk in key order, reading windows of whole chunks that fit the
   budget; sorts each window's cells row-major, applies the duplicates policy, encodes
   every chunk (piece) once and appends it in key order (LMDB append / RocksDB SST);
3. commit: merge the per-worker index rows, write the index file, switch the manifest.

Memory is bounded by the budget (per worker) whatever N is, provided no single chunk is
larger than the budget (a window always holds at least one whole chunk).

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

from . import manifest as mf
from .errors import BulkloadError, DuplicateCellError, UsageError, WorkerError
from .layouts import Field, Layout

POLICIES = ("error", "first", "last", "keep")
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
                    env.set_mapsize(0)
                    self.txn = env.begin(write=False, buffers=True)
        return self

    def get(self, key: bytes):
        if self.txn is not None:
            return self.txn.get(key, db=self.db)
        if self.db is None and getattr(self.store, "scheme", "") in ("lmdb", "mem"):
            return None
        return self.store.get(key, table=self.table)

    def __exit__(self, *exc):
        if self.txn is not None:
            self.txn.abort()
            self.txn = None


# --- the chunk index file --------------------------------------------------------------------


def index_columns(cell: Layout) -> list[tuple[str, str]]:
    """(name, numpy dtype) of the index rows for a cell layout."""
    cols = [("crow", "<i8"), ("ccol", "<i8"), ("piece", "<i4"), ("shard", "<i4"),
            ("cells", "<i8"), ("nbytes", "<i8"), ("checksum", "<u8")]
    from .layouts import TYPES

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
        from .errors import StoreError

        raise StoreError(f"could not write the chunk index {path}: {e.strerror or e}; "
                         "nothing was committed - free space and retry") from e


def read_index(path: str) -> dict[str, np.ndarray]:
    import pyarrow as pa

    try:
        with pa.memory_map(path, "r") as src:
            table = pa.ipc.open_file(src).read_all()
    except (OSError, pa.ArrowException) as e:
        from .errors import VerifyError

        raise VerifyError(f"cannot read the chunk index {path}: {e}; re-run `bulkload finalize`") from None
    return {name: table.column(name).to_numpy() for name in table.column_names}


def index_path(root: str, summary: dict) -> str:
    return os.path.join(root, summary["index"])


# --- finalize -------------------------------------------------------------------------------


def finalize(dataset_uri: str, dims="i0:10,i1:100000", array: str = DEFAULT_ARRAY,
             duplicates: str = "error", workers: int | None = None, compact: bool = True,
             progress: str = "none", memory_budget: int | None = None) -> dict:
    """Compact (unless ``compact=False``) and redimension the dataset into a 2-D array.

    Returns a report (dict). Raises UsageError for bad dims/options (nothing touched),
    DuplicateCellError under ``duplicates="error"`` (nothing committed).
    """
    from .compact import compact_locked
    from .lock import DatasetLock
    from .loading import default_workers
    from .pool import Pool
    from .progress import Progress
    from .stores.base import parse_dataset_uri
    from .finalize_workers import BuildTask, PartitionTask, build_worker, partition_worker

    t_start = time.perf_counter()
    spec = parse_dataset_uri(dataset_uri)
    m = mf.load_manifest(spec.root, dataset_uri)
    layout = m.layout_obj
    aspec = make_spec(layout, dims, array, duplicates)
    if workers is not None and int(workers) < 1:
        raise UsageError("--workers must be at least 1")
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else int(memory_budget)
    if budget < MIN_MEMORY_BUDGET:
        raise UsageError(f"memory budget {budget} bytes is too small; give at least {MIN_MEMORY_BUDGET}")
    w_req = int(workers) if workers else default_workers()
    from .serializers import get_serializer

    cell = aspec.cell_layout()
    cser = get_serializer(m.format, cell, m.compression)  # rejects impossible combinations
    max_piece = cser.max_records or MAX_PIECE_CELLS
    max_piece = max(1, min(max_piece, MAX_PIECE_CELLS))

    with DatasetLock(spec.root) as lock:
        lock.set_job(f"finalize {array}")
        m = mf.load_manifest(spec.root, dataset_uri)
        if m.layout != aspec.layout:
            raise UsageError(f"dataset {spec.uri} changed layout while finalize started; retry")
        spec = spec.with_shards(m.shards)
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
        spill = os.path.join(spec.root, f"{SPILL_PREFIX}{run_id}")
        os.makedirs(spill)
        os.makedirs(os.path.join(spec.root, INDEX_DIR), exist_ok=True)
        k = m.shards
        total = m.records
        rs = layout.record_size
        keep_tables = tuple(sorted({a["table"] for a in m.arrays.values()} | {table}))
        nbuild = max(1, min(w_req, k))
        t_phase = {}
        try:
            # --- 1. partition into spill runs ----------------------------------------------------
            t = time.perf_counter()
            groups = _split_batches(m.batches, max(1, min(w_req, len(m.batches) or 1)))
            tasks1 = [PartitionTask(store=spec, worker=w, layout=m.layout, format=m.format,
                                    compression=m.compression,
                                    batches=tuple((b.seq, b.shard, b.first, b.count) for b in g),
                                    dims=aspec.dims, chunks=aspec.chunks, nshards=k,
                                    spill_dir=spill, budget=budget, main_pid=os.getpid())
                      for w, g in enumerate(groups)]
            run["workers"] = max(len(tasks1), nbuild)
            with Progress(f"finalize {array}: partition", total, rs, mode=progress) as prog:
                receipts1 = Pool(partition_worker, tasks1, on_progress=prog.advance).run()
            runs = tuple((name, n) for rc in receipts1 for name, n in rc["runs"])
            t_phase["partition_s"] = round(time.perf_counter() - t, 3)

            # --- 2. build chunks, one writer per shard -----------------------------------------
            t = time.perf_counter()
            tasks2 = [BuildTask(store=spec, worker=w, workers=nbuild, nshards=k, layout=m.layout,
                                cell_layout=cell.to_dict(), format=m.format, compression=m.compression,
                                dims=aspec.dims, chunks=aspec.chunks, policy=duplicates, array=array,
                                table=table, keep_tables=keep_tables, runs=runs, spill_dir=spill,
                                budget=budget, max_piece=max_piece, main_pid=os.getpid())
                      for w in range(nbuild)]
            with Progress(f"finalize {array}: write chunks", total, rs, mode=progress) as prog:
                receipts2 = Pool(build_worker, tasks2, on_progress=prog.advance).run()
            t_phase["build_s"] = round(time.perf_counter() - t, 3)

            # --- 3. the index, then the manifest switch -------------------------------------------
            t = time.perf_counter()
            parts = [np.load(rc["index"]) for rc in receipts2 if rc["index"]]
            dt = np.dtype(index_columns(cell))
            rows = np.concatenate(parts) if parts else np.empty(0, dt)
            rows = rows[np.lexsort((rows["piece"], rows["ccol"], rows["crow"]))]
            rel_index = os.path.join(INDEX_DIR, f"{table}.arrow")
            write_index(os.path.join(spec.root, rel_index), rows)
            t_phase["index_s"] = round(time.perf_counter() - t, 3)
        except BaseException as e:
            _drop_tables(spec, k, table)
            err = e
            if isinstance(e, WorkerError) and getattr(e, "worker_type", "") == "DuplicateCellError":
                err = DuplicateCellError(re.sub(r"^worker \d+ failed: ", "", str(e)))
            run.update(status="failed", ended=time.time(),
                       error=str(err) if isinstance(err, BulkloadError) else f"{type(err).__name__}: {err}")
            m.save(spec.root)
            if err is not e:
                raise err from None
            raise
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
        m.arrays[array] = summary
        spill_runs = len(runs)
        run.update(status="done", ended=time.time(), records=total, cells=cells, chunks=nchunks,
                   seconds=round(seconds, 3), spill_runs=spill_runs)
        m.save(spec.root)  # the switch
        if old is not None and old.get("table") != table:
            _drop_tables(spec, k, old["table"])
            try:
                os.unlink(os.path.join(spec.root, old["index"]))
            except OSError:
                pass

    seconds = time.perf_counter() - t_start
    nbytes = total * rs
    peak = sum(rc["max_rss"] for rc in receipts1) + sum(rc["max_rss"] for rc in receipts2)
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
        "spill_runs": spill_runs,
        "workers": {"partition": len(tasks1), "build": nbuild},
        "memory_budget": budget,
        "seconds": round(seconds, 4),
        "mb_per_s": round(nbytes / seconds / 1e6, 2) if seconds > 0 else 0.0,
        "records_per_s": round(total / seconds, 1) if seconds > 0 else 0.0,
        "stages": t_phase | {
            "partition_worker_max_s": max((rc["seconds"] for rc in receipts1), default=0),
            "build_worker_max_s": max((rc["seconds"] for rc in receipts2), default=0),
        } | {f"partition_{k2}": max(rc[k2] for rc in receipts1) for k2 in ("read_s", "sort_s", "spill_s")
             if receipts1}
          | {f"build_{k2}": max(rc[k2] for rc in receipts2)
             for k2 in ("read_s", "sort_s", "encode_s", "write_s", "sync_s") if receipts2},
        "worker_peak_rss_bytes": peak,
        "compact": compact_report,
    }


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


def _drop_tables(spec, nshards: int, table: str) -> None:
    """Best effort: drop `table` in every shard (what fails is collected by the next finalize)."""
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

    from .serializers import get_serializer

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
