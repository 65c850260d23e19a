"""Finalize workers: module-level functions over (task, progress queue) -> small receipt.

- `scan_worker` (redimension step 0): counts the records of every chunk in every batch
  of a contiguous range of flat batches (the coordinator plans direct windows from it).
- `partition_worker` (redimension step 1, spill strategy): reads a contiguous range of flat batches,
  fills a buffer of at most ``budget`` bytes, groups it by (owning shard, chunk) and
  writes it as a spill run: ``RUN.rec`` (records), ``RUN.idx`` (their record indices,
  int64) and ``RUN.dir.npy`` (shard, crow, ccol, start, count of each group).
- `build_worker` (redimension step 2): owns shards s with s mod W == w; for each, fills
  windows of whole chunks within the budget - straight from the flat batches (direct)
  or merged from the spill runs - sorts cells row-major, applies the duplicates policy,
  encodes each chunk piece once and appends it in key order to the shard's new table;
  writes its index rows to a file.
- `merge_worker` (compaction): rewrites groups of small batches as single batches into
  the shards it owns.

This module is preloaded by the forkserver: keep its imports light.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

import numpy as np
import xxhash

from ..infra import faults
from ..loading.worker import _parent_alive, start_worker
from ..model.layouts import Layout
from ..model.placement import batch_key, owned_shards
from ..serializers import get_serializer
from ..stores.base import StoreSpec

GROUP_BYTES = 64 << 20
#: bytes per buffered record beyond the record itself (index, sort keys, temporaries)
PART_OVERHEAD = 8 + 8 + 8 * 5
BUILD_OVERHEAD = 8 + 8 * 6
_DIR_DTYPE = np.dtype([("shard", "<i8"), ("crow", "<i8"), ("ccol", "<i8"), ("start", "<i8"),
                       ("count", "<i8")])
_TAKE_SLICE = 1 << 18


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return round(ru.ru_utime + ru.ru_stime, 3)


def _tune_malloc() -> None:
    """glibc: serve blocks up to 32 MiB (chunk values, LMDB's overflow pages) from the heap
    and keep freed memory there, instead of a fresh mmap per block whose every page
    faults on first touch: halves the cost of LMDB puts of multi-MB values."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 128 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def _void(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype((np.void, a.dtype.itemsize)))


def _min_max(view: np.ndarray, fields: list[str], block: int = 8192) -> tuple[list, list]:
    """Per-field min and max of a structured array, in cache-sized blocks (one pass over memory)."""
    n = len(view)
    if n <= block:
        return [view[f].min() for f in fields], [view[f].max() for f in fields]
    mins, maxs = [], []
    for i in range(0, n, block):
        b = view[i:i + block]
        mins.append([b[f].min() for f in fields])
        maxs.append([b[f].max() for f in fields])
    lo = [min(col) for col in zip(*mins)]
    hi = [max(col) for col in zip(*maxs)]
    return lo, hi


# --- step 1: partition ------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionTask:
    store: StoreSpec
    worker: int
    layout: dict
    format: str
    compression: str
    batches: tuple  # manifest rows (seq, shard, first, count, checksum, nbytes), in record order
    dims: tuple
    chunks: tuple
    nshards: int
    spill_dir: str
    budget: int
    main_pid: int = 0
    fault: str = ""


def partition_worker(task: PartitionTask, progress_q) -> dict:
    from .finalize import ValueReader, chunk_shard

    t0 = time.perf_counter()
    start_worker(task)
    layout = Layout.from_dict(task.layout)
    ser = get_serializer(task.format, layout, task.compression)
    rs = layout.record_size
    total = sum(b[3] for b in task.batches)
    cap = max(1, min(task.budget // (rs + PART_OVERHEAD), total or 1))
    buf = np.empty(cap, layout.dtype)
    ridx = np.empty(cap, np.int64)
    scratch = np.empty(min(cap, _TAKE_SLICE), layout.dtype)
    d0, d1 = task.dims
    l0, l1 = task.chunks
    k = task.nshards
    runs: list[tuple[str, int]] = []
    timings = {"read_s": 0.0, "sort_s": 0.0, "spill_s": 0.0}
    small_coords = all(layout.field(d).size <= 4 for d in task.dims)

    def flush(n: int) -> None:
        t = time.perf_counter()
        r = buf[d0][:n].astype(np.int64)
        c = buf[d1][:n].astype(np.int64)
        crow = np.floor_divide(r, l0)
        ccol = np.floor_divide(c, l1)
        del r, c
        if k == 1:
            shard = np.zeros(n, np.int64)
        elif small_coords:  # |crow|, |ccol| < 2**62: the sum cannot overflow
            sm = np.add(crow, ccol)
            shard = sm - np.floor_divide(sm, k) * k  # = sm mod k; floor_divide by a scalar is fast
        else:
            shard = chunk_shard(crow, ccol, k)
        crmin, crmax = int(crow.min()), int(crow.max())
        ccmin, ccmax = int(ccol.min()), int(ccol.max())
        nr, nc = crmax - crmin + 1, ccmax - ccmin + 1
        groups = k * nr * nc
        if groups < 2**63:
            g = (shard * nr + (crow - crmin)) * nc + (ccol - ccmin)
            if groups <= 1 << 16:
                g16 = g.astype(np.uint16)
                order = np.argsort(g16, kind="stable")  # radix sort
                counts = np.bincount(g16, minlength=groups)
                nz = np.flatnonzero(counts)
                cnt = counts[nz]
                gk = nz.astype(np.int64)
            else:
                order = np.argsort(g, kind="stable")
                gs = g[order]
                starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
                gk = gs[starts]
                cnt = np.diff(np.r_[starts, n])
            gsh = gk // (nr * nc)
            rem = gk % (nr * nc)
            gcr = rem // nc + crmin
            gcc = rem % nc + ccmin
        else:  # a domain too wide for one 63-bit group number
            order = np.lexsort((ccol, crow, shard))
            s_, r_, c_ = shard[order], crow[order], ccol[order]
            starts = np.flatnonzero(np.r_[True, (s_[1:] != s_[:-1]) | (r_[1:] != r_[:-1]) | (c_[1:] != c_[:-1])])
            gsh, gcr, gcc = s_[starts], r_[starts], c_[starts]
            cnt = np.diff(np.r_[starts, n])
        timings["sort_s"] += time.perf_counter() - t
        t = time.perf_counter()
        name = f"run-{task.worker:03d}-{len(runs):05d}"
        base = os.path.join(task.spill_dir, name)
        src = _void(buf)
        with open(base + ".rec", "wb") as f:
            for i in range(0, n, len(scratch)):
                part = order[i:i + len(scratch)]
                out = _void(scratch[:len(part)])
                np.take(src, part, out=out, mode="clip")
                f.write(memoryview(out).cast("B"))
        with open(base + ".idx", "wb") as f:
            f.write(memoryview(ridx[:n][order]).cast("B"))
        d = np.empty(len(cnt), _DIR_DTYPE)
        d["shard"], d["crow"], d["ccol"], d["count"] = gsh, gcr, gcc, cnt
        d["start"] = np.cumsum(cnt) - cnt
        np.save(base + ".dir.npy", d)
        runs.append((name, n))
        timings["spill_s"] += time.perf_counter() - t
        faults.hit("spill")

    stores = {}
    fill = 0
    try:
        for row in task.batches:
            seq, shard, first, count = row[:4]
            t = time.perf_counter()
            st = stores.get(shard)
            if st is None:
                st = stores[shard] = task.store.open_shard(shard, write=False)
            with ValueReader(st, "batches") as rd:
                v = _get_batch(rd, task.store, row)
                _, recs = ser.decode(v)
                pos = 0
                while pos < count:
                    m = min(cap - fill, count - pos)
                    _void(buf)[fill:fill + m] = _void(recs[pos:pos + m]) if recs.flags.c_contiguous else recs[pos:pos + m]
                    ridx[fill:fill + m] = np.arange(first + pos, first + pos + m)
                    fill += m
                    pos += m
                    if fill == cap:
                        timings["read_s"] += time.perf_counter() - t
                        flush(fill)
                        t = time.perf_counter()
                        fill = 0
                rd.release(v)
            timings["read_s"] += time.perf_counter() - t
            progress_q.put(count)
        if fill:
            flush(fill)
    finally:
        for st in stores.values():
            st.close()
    return {"worker": task.worker, "pid": os.getpid(), "runs": runs, "records": total,
            "seconds": round(time.perf_counter() - t0, 4),
            **{k2: round(v, 4) for k2, v in timings.items()}, "max_rss": _rss()}


# --- step 0: scan (chunk histogram per batch) -------------------------------------------------


_ENTRY_DTYPE = np.dtype([("batch", "<i8"), ("crow", "<i8"), ("ccol", "<i8"), ("count", "<i8")])


@dataclass(frozen=True)
class ScanTask:
    store: StoreSpec
    worker: int
    layout: dict
    format: str
    compression: str
    batches: tuple  # ((i, seq, shard, first, count, checksum, nbytes), ...): i = position in the plan
    dims: tuple
    chunks: tuple
    out_dir: str
    max_entries: int  # give up (the data is scattered: spill instead) beyond this many rows
    main_pid: int = 0
    fault: str = ""


def batch_chunks(recs: np.ndarray, dims: tuple, chunks: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(crow, ccol, count) of the chunks the records fall in, in key order."""
    r = recs[dims[0]].astype(np.int64)
    c = recs[dims[1]].astype(np.int64)
    qr = np.floor_divide(r, chunks[0])
    qc = np.floor_divide(c, chunks[1])
    rmin, rmax, cmin, cmax = int(qr.min()), int(qr.max()), int(qc.min()), int(qc.max())
    if rmin == rmax and cmin == cmax:
        return np.array([rmin]), np.array([cmin]), np.array([len(recs)])
    nc = cmax - cmin + 1
    if (rmax - rmin + 1) * nc <= max(4 * len(recs), 1 << 16):
        cnt = np.bincount((qr - rmin) * nc + (qc - cmin))
        g = np.flatnonzero(cnt)
        return g // nc + rmin, g % nc + cmin, cnt[g]
    o = np.lexsort((qc, qr))
    sr, sc = qr[o], qc[o]
    st = np.flatnonzero(np.r_[True, (sr[1:] != sr[:-1]) | (sc[1:] != sc[:-1])])
    return sr[st], sc[st], np.diff(np.r_[st, len(recs)])


def scan_worker(task: ScanTask, progress_q) -> dict:
    """Count the records of every chunk in every batch of this worker's range."""
    from .finalize import ValueReader

    t0 = time.perf_counter()
    start_worker(task)
    layout = Layout.from_dict(task.layout)
    ser = get_serializer(task.format, layout, task.compression)
    parts: list[np.ndarray] = []
    nent = 0
    scattered = False
    stores = {}
    try:
        for i, *row in task.batches:
            seq, shard, first, count = row[:4]
            st = stores.get(shard)
            if st is None:
                st = stores[shard] = task.store.open_shard(shard, write=False)
            with ValueReader(st, "batches") as rd:
                v = _get_batch(rd, task.store, row)
                _, recs = ser.decode(v)
                cr, cc, cn = batch_chunks(recs, task.dims, task.chunks)
                rd.release(v)
            e = np.empty(len(cr), _ENTRY_DTYPE)
            e["batch"], e["crow"], e["ccol"], e["count"] = i, cr, cc, cn
            parts.append(e)
            nent += len(e)
            progress_q.put(count)
            if nent > task.max_entries:
                scattered = True
                break
    finally:
        for st in stores.values():
            st.close()
    path = None
    if not scattered:
        path = os.path.join(task.out_dir, f"scan-{task.worker:03d}.npy")
        np.save(path, np.concatenate(parts) if parts else np.empty(0, _ENTRY_DTYPE))
    return {"worker": task.worker, "entries": path, "scattered": scattered,
            "seconds": round(time.perf_counter() - t0, 4), "max_rss": _rss()}


def _get_batch(rd, store, row):
    """The value of batch ``row`` (a manifest row), checked against its size and xxh3 (a
    changed batch must not be rebuilt into arrays or merged batches with a new checksum)."""
    from ..model.manifest import BatchEntry
    from ..stores.health import batch_message, check_value

    b = BatchEntry(*row)
    v = rd.get(batch_key(b.seq))
    if v is None:
        from ..errors import CorruptBatchError

        raise CorruptBatchError(batch_message(store.uri, b, "missing from the store"))
    check_value(store.uri, b, v)
    return v


# --- step 2: build chunks ---------------------------------------------------------------------


@dataclass(frozen=True)
class BuildTask:
    store: StoreSpec
    worker: int
    workers: int
    nshards: int
    layout: dict
    cell_layout: dict
    format: str
    compression: str
    dims: tuple
    chunks: tuple
    policy: str
    array: str
    table: str
    keep_tables: tuple
    runs: tuple  # spill mode: ((name, records), ...) in record-index order
    spill_dir: str
    budget: int
    max_piece: int
    main_pid: int = 0
    fault: str = ""
    # direct mode (no spill runs): the flat batches (manifest rows: seq, shard, first, count,
    # checksum, nbytes) in record order, and per owned shard its windows (redimension.plan_direct)
    batches: tuple = ()
    windows: dict | None = None

    def owned_shards(self) -> list[int]:
        return owned_shards(self.nshards, self.workers, self.worker)


class _Emitter:
    """Sorts windows of whole chunks, applies the duplicates policy, encodes each chunk
    piece once and appends it (in key order) to the shard's new table."""

    def __init__(self, task: BuildTask, timings: dict, stats: dict):
        from .finalize import index_columns

        self.task = task
        self.layout = Layout.from_dict(task.layout)
        self.cell = Layout.from_dict(task.cell_layout)
        self.cser = get_serializer(task.format, self.cell, task.compression)
        self.rs = self.layout.record_size
        self.crs = self.cell.record_size
        self.keep = task.policy == "keep"
        self.framed = task.format == "capnp" and self.cell.framable
        self.fields = self.cell.names
        self.idt = np.dtype(index_columns(self.cell))
        self.timings, self.stats = timings, stats
        self.index_rows: list[tuple] = []
        self.group: list = []
        self.group_bytes = 0
        self.group_limit = max(64 << 10, min(GROUP_BYTES, task.budget // 8))
        self.st = None
        self.shard = -1
        self.wb = None

    def start_shard(self, st, s: int) -> None:
        self.st, self.shard = st, s
        self.wb = _Writeback(os.path.join(st.path, "data.mdb")) if getattr(st, "scheme", "") in ("lmdb", "mem") \
            else None

    def end_shard(self) -> None:
        if self.wb is not None:
            self.wb.close()
            self.wb = None

    def flush_group(self) -> None:
        if self.group:
            t = time.perf_counter()
            self.st.put_sorted(self.group, table=self.task.table)
            self.group, self.group_bytes = [], 0
            if self.wb is not None:
                self.wb.start()
            self.timings["write_s"] += time.perf_counter() - t
            faults.hit("chunks")

    def keys(self, w: np.ndarray, box: tuple, out: np.ndarray | None = None) -> np.ndarray:
        """Sort keys of records `w` in a window whose chunks lie in ``box`` = (crmin, ccmin, nc):
        (chunk ordinal in the box * L0 + row in chunk) * L1 + column in chunk."""
        d0, d1 = self.task.dims
        l0, l1 = self.task.chunks
        crmin, ccmin, nc = box
        r = w[d0].astype(np.int64)
        c = w[d1].astype(np.int64)
        qr = np.floor_divide(r, l0)
        qc = np.floor_divide(c, l1)
        r -= qr * l0  # row within the chunk (exact: qr * l0 lies between r - l0 and r)
        c -= qc * l1
        qr -= crmin
        qr *= nc
        qr += qc
        qr -= ccmin  # chunk ordinal in the box, in key order
        qr *= l0
        qr += r
        qr *= l1
        qr += c
        if out is not None:
            out[...] = qr
            return out
        return qr

    def emit(self, w: np.ndarray, ridx: np.ndarray, key: np.ndarray | None, box: tuple | None) -> None:
        """Write the chunks of window `w` (records of whole chunks; ``ridx`` their record
        indices). With ``key`` (see `keys`) the chunk and cell order come from it; without,
        from a lexsort of the coordinates (domains too wide for one 63-bit key)."""
        from ..errors import DuplicateCellError
        from .finalize import chunk_key, hash_sum

        task = self.task
        d0, d1 = task.dims
        l0, l1 = task.chunks
        n = len(w)
        t = time.perf_counter()
        if key is not None:
            order = np.argsort(key)
            sk = key[order]
            dup = sk[1:] == sk[:-1]
            if dup.any():  # duplicates: record-index order within each cell
                order = np.lexsort((ridx, key))
                sk = key[order]
                dup = sk[1:] == sk[:-1]
            cid = sk // (l0 * l1)
            del sk
        else:
            r = w[d0].astype(np.int64)
            c = w[d1].astype(np.int64)
            qr, qc = np.floor_divide(r, l0), np.floor_divide(c, l1)
            rin, cin = np.mod(r, l0), np.mod(c, l1)
            order = np.lexsort((ridx, cin, rin, qc, qr))
            sr, sc = qr[order], qc[order]
            dup = (sr[1:] == sr[:-1]) & (sc[1:] == sc[:-1]) & (rin[order][1:] == rin[order][:-1]) \
                & (cin[order][1:] == cin[order][:-1])
            newc = np.r_[True, (sr[1:] != sr[:-1]) | (sc[1:] != sc[:-1])]
            cid = np.cumsum(newc) - 1
            fr, fc = sr[newc], sc[newc]
            del r, c, rin, cin, qr, qc
        syn = None
        if dup.any():
            if task.policy == "error":
                i = int(np.flatnonzero(dup)[0])
                a_idx, b_idx = int(ridx[order[i]]), int(ridx[order[i + 1]])
                raise DuplicateCellError(
                    f"cell ({d0}={int(w[d0][order[i]])}, {d1}={int(w[d1][order[i]])}) of array "
                    f"{task.array!r} is set by records {a_idx} and {b_idx}; nothing was committed - "
                    f"choose --duplicates first, last or keep, or fix the data")
            if self.keep:
                starts = np.r_[True, ~dup]
                pos_ = np.arange(len(order))
                syn = (pos_ - np.maximum.accumulate(np.where(starts, pos_, 0))).astype(np.uint32)
            else:
                keepm = np.ones(len(order), bool)
                if task.policy == "first":
                    keepm[1:][dup] = False
                else:
                    keepm[:-1][dup] = False
                dropped = order[~keepm]
                self.stats["dropped"] += len(dropped)
                self.stats["dropped_hash"] = (self.stats["dropped_hash"] + hash_sum(
                    np.ascontiguousarray(w[dropped]))) % 2**64
                order = order[keepm]
                cid = cid[keepm]
        elif self.keep:
            syn = np.zeros(len(order), np.uint32)
        bnd = np.flatnonzero(cid[1:] != cid[:-1]) + 1
        cstarts = np.r_[0, bnd].tolist()
        cends = np.r_[bnd, len(order)].tolist()
        if key is not None:
            crmin, ccmin, nc = box
            ck = cid[np.r_[0, bnd]] if len(order) else cid[:0]
            ch_r = (ck // nc + crmin).tolist()
            ch_c = (ck % nc + ccmin).tolist()
        else:
            ch_r, ch_c = fr.tolist(), fc.tolist()
        self.timings["sort_s"] += time.perf_counter() - t
        t = time.perf_counter()
        src = _void(w)
        src8 = w.view(np.uint8).reshape(n, self.rs) if self.keep else None
        cser, crs, rs, s = self.cser, self.crs, self.rs, self.shard
        for crow, ccol, cs, ce in zip(ch_r, ch_c, cstarts, cends):
            self.stats["chunks"] += 1
            for piece, ps in enumerate(range(cs, ce, task.max_piece)):
                pe = min(ps + task.max_piece, ce)
                m = pe - ps
                idx = order[ps:pe]
                if self.framed:  # no zero-fill: every byte is written below
                    buf, view = cser.new_buffer(m, into=np.empty(cser.message_size(m), np.uint8))
                else:
                    buf, view = cser.new_buffer(m)
                if self.keep:
                    vb = view.view(np.uint8).reshape(m, crs)
                    vb[:, :rs] = src8[idx]
                    view["syn"] = syn[ps:pe]
                else:
                    np.take(src, idx, out=_void(view), mode="clip")
                mins, maxs = _min_max(view, self.fields)
                value = cser.encode_buffer(buf, view, 0)
                nbytes = len(memoryview(value).cast("B")) if not isinstance(value, bytes) else len(value)
                checksum = xxhash.xxh3_64_intdigest(value)
                row = [crow, ccol, piece, s, m, nbytes, checksum]
                for mn, mx in zip(mins, maxs):
                    row.append(mn)
                    row.append(mx)
                self.index_rows.append(tuple(row))
                self.group.append((chunk_key(crow, ccol, piece), value))
                self.group_bytes += nbytes
                self.stats["pieces"] += 1
                self.stats["cells"] += m
                if self.group_bytes >= self.group_limit:
                    self.timings["encode_s"] += time.perf_counter() - t
                    self.flush_group()
                    t = time.perf_counter()
        self.timings["encode_s"] += time.perf_counter() - t


class _Writeback:
    """Keep the disk busy while the worker computes: after each committed group a helper
    thread starts the writeback of the shard file (``sync_file_range(WRITE)``), so that
    the durability point, ``sync()`` at the end, finds little left to write. Only an
    optimisation: durability still comes from ``sync()``."""

    _fn = None

    def __init__(self, path: str):
        import threading

        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.fd = None
        if _Writeback._fn is None:
            try:
                import ctypes

                libc = ctypes.CDLL("libc.so.6", use_errno=True)  # CDLL calls release the GIL
                fn = libc.sync_file_range
                fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
                _Writeback._fn = fn
            except (OSError, AttributeError):
                _Writeback._fn = False
        self.wake = threading.Event()
        self.stop = False
        self.thread = None
        if self.fd is not None and _Writeback._fn:
            self.thread = threading.Thread(target=self._run, name="writeback", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            if self.stop:
                return
            _Writeback._fn(self.fd, 0, 0, 2)  # SYNC_FILE_RANGE_WRITE: the whole file

    def start(self) -> None:
        if self.thread is not None:
            self.wake.set()

    def close(self) -> None:
        if self.thread is not None:
            self.stop = True
            self.wake.set()
            self.thread.join()
            self.thread = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _box_fits(crmin: int, crmax: int, ccmin: int, ccmax: int, chunks: tuple) -> bool:
    """Whether one int64 sort key covers a window whose chunks lie in this box."""
    return (crmax - crmin + 1) * (ccmax - ccmin + 1) * chunks[0] * chunks[1] < 2**62


def build_worker(task: BuildTask, progress_q) -> dict:
    from .finalize import TABLE_PREFIX

    t0 = time.perf_counter()
    start_worker(task)
    _tune_malloc()
    timings = {"read_s": 0.0, "sort_s": 0.0, "encode_s": 0.0, "write_s": 0.0, "sync_s": 0.0}
    stats = {"cells": 0, "dropped": 0, "dropped_hash": 0, "pieces": 0, "chunks": 0}
    em = _Emitter(task, timings, stats)
    direct = task.windows is not None
    src = _DirectSource(task, em, timings) if direct else _SpillSource(task, em, timings)
    crs = em.crs
    try:
        for s in task.owned_shards():
            incoming = src.incoming(s)
            if not incoming:
                continue
            path = task.store.shard_path(s)
            data = os.path.join(path, "data.mdb")
            existing = os.path.getsize(data) if os.path.exists(data) else 0
            opts = dict(task.store.options)
            if task.store.scheme in ("lmdb", "mem"):  # size the map once: no growth steps
                opts["map_size"] = str(existing + int(incoming * crs * 1.3) + (64 << 20))
            st = task.store.backend.open(path, write=True, options=opts)
            try:
                for t_name in st.tables():  # leftovers of crashed or replaced builds
                    if t_name.startswith(TABLE_PREFIX) and t_name not in task.keep_tables:
                        st.drop_table(t_name)
                st.drop_table(task.table)
                em.start_shard(st, s)
                for n in src.windows(s, st):
                    progress_q.put(n)
                    if not _parent_alive(task.main_pid):
                        raise SystemExit("coordinator died")
                em.flush_group()
                src.close_readers()
                t = time.perf_counter()
                st.sync()
                timings["sync_s"] += time.perf_counter() - t
                faults.hit("synced")
            finally:
                em.end_shard()
                src.close_readers()
                st.close()
    finally:
        src.close()
    path = None
    if em.index_rows:
        path = os.path.join(task.spill_dir, f"index-{task.worker:03d}.npy")
        np.save(path, np.array(em.index_rows, dtype=em.idt))
    return {"worker": task.worker, "pid": os.getpid(), "index": path, **stats,
            "seconds": round(time.perf_counter() - t0, 4),
            **{k2: round(v, 4) for k2, v in timings.items()}, "max_rss": _rss(),
            "minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt, "cpu_s": _cpu()}


class _DirectSource:
    """Windows read straight from the flat batches (no spill runs): each window lists the
    batches holding its records; a batch wholly inside the window is copied as is, others
    through a mask of the records whose chunk is in the window."""

    def __init__(self, task: BuildTask, em: _Emitter, timings: dict):
        from .finalize import ValueReader

        self.task, self.em, self.timings = task, em, timings
        self.layout = em.layout
        self.ser = get_serializer(task.format, self.layout, task.compression)
        self.readers: dict = {}
        self.writer = None
        self.ValueReader = ValueReader
        # one allocation for the largest window (no transient second buffer on growth)
        most = max((int(w["n"]) for ws in task.windows.values() for w in ws), default=0)
        self.buf = np.empty(most, self.layout.dtype)
        self.ridx = np.empty(most, np.int64)
        self.key = np.empty(most, np.int64)

    def incoming(self, s: int) -> int:
        return int(sum(int(w["n"]) for w in self.task.windows.get(s, ())))

    def _store(self, shard: int):
        if shard == self.em.shard:
            return self.em.st  # a reader of the shard this worker writes shares its env
        st = self.readers.get(shard)
        if st is None:
            st = self.readers[shard] = self.task.store.open_shard(shard, write=False)
        return st

    def windows(self, s: int, st):
        task, em = self.task, self.em
        d0, d1 = task.dims
        l0, l1 = task.chunks
        for win in task.windows.get(s, ()):
            t = time.perf_counter()
            n = int(win["n"])
            if len(self.buf) < n:
                self.buf = np.empty(n, self.layout.dtype)
                self.ridx = np.empty(n, np.int64)
                self.key = np.empty(n, np.int64)
            crmin, ccmin, nc = win["box"]
            lut = win["lut"]  # chunk ordinals (in the box) of the window's chunks
            box = (crmin, ccmin, nc)
            nr = len(lut) // nc
            pos = 0
            for bi, whole in zip(win["batches"].tolist(), win["whole"].tolist()):
                seq, shard, first, count = task.batches[bi][:4]
                with self.ValueReader(self._store(shard), "batches") as rd:
                    v = _get_batch(rd, task.store, task.batches[bi])
                    _, recs = self.ser.decode(v)
                    if whole:
                        m = count
                        _void(self.buf[pos:pos + m])[...] = _void(recs)
                        self.ridx[pos:pos + m] = np.arange(first, first + m)
                    else:
                        qr = np.floor_divide(recs[d0].astype(np.int64), l0) - crmin
                        qc = np.floor_divide(recs[d1].astype(np.int64), l1) - ccmin
                        inbox = (qr >= 0) & (qr < nr) & (qc >= 0) & (qc < nc)
                        o = np.where(inbox, qr * nc + qc, 0)
                        sel = np.flatnonzero(inbox & lut[o])
                        m = len(sel)
                        np.take(_void(recs), sel, out=_void(self.buf[pos:pos + m]))
                        self.ridx[pos:pos + m] = sel + first
                    rd.release(v)
                em.keys(self.buf[pos:pos + m], box, out=self.key[pos:pos + m])
                pos += m
            if pos != n:
                from ..errors import VerifyError

                raise VerifyError(f"finalize read {pos} records for a window of {n}: the flat data "
                                  "changed during finalize; re-run it")
            self.timings["read_s"] += time.perf_counter() - t
            em.emit(self.buf[:n], self.ridx[:n], self.key[:n], box)
            yield n

    def close_readers(self) -> None:
        for st in self.readers.values():
            st.close()
        self.readers.clear()

    def close(self) -> None:
        self.close_readers()


class _SpillSource:
    """Windows of whole chunks merged from the spill runs of the partition step."""

    def __init__(self, task: BuildTask, em: _Emitter, timings: dict):
        self.task, self.em, self.timings = task, em, timings
        self.layout = em.layout
        self.rs = self.layout.record_size
        self.cap = max(1, task.budget // (self.rs + BUILD_OVERHEAD))
        self.dirs = [np.load(os.path.join(task.spill_dir, f"{name}.dir.npy")) for name, _ in task.runs]
        self.fds: dict[int, tuple[int, int]] = {}
        self.win = np.empty(0, self.layout.dtype)
        self.wridx = np.empty(0, np.int64)

    def incoming(self, s: int) -> int:
        return sum(int(d["count"][d["shard"] == s].sum()) for d in self.dirs)

    def _fds(self, ri: int) -> tuple[int, int]:
        if ri not in self.fds:
            base = os.path.join(self.task.spill_dir, self.task.runs[ri][0])
            self.fds[ri] = (os.open(base + ".rec", os.O_RDONLY), os.open(base + ".idx", os.O_RDONLY))
        return self.fds[ri]

    def windows(self, s: int, st):
        rs, cap, em = self.rs, self.cap, self.em
        # this shard's groups in every run, in run (= record index) order
        ent_run, ent_crow, ent_ccol, ent_start, ent_count = [], [], [], [], []
        for ri, d in enumerate(self.dirs):
            sel = d[d["shard"] == s]
            if len(sel):
                ent_run.append(np.full(len(sel), ri, np.int64))
                ent_crow.append(sel["crow"])
                ent_ccol.append(sel["ccol"])
                ent_start.append(sel["start"])
                ent_count.append(sel["count"])
        if not ent_run:
            return
        e_run = np.concatenate(ent_run)
        e_crow = np.concatenate(ent_crow)
        e_ccol = np.concatenate(ent_ccol)
        e_start = np.concatenate(ent_start)
        e_count = np.concatenate(ent_count)
        o = np.lexsort((e_ccol, e_crow))
        newk = np.r_[True, (e_crow[o][1:] != e_crow[o][:-1]) | (e_ccol[o][1:] != e_ccol[o][:-1])]
        e_uid = np.empty(len(o), np.int64)
        e_uid[o] = np.cumsum(newk) - 1
        u_crow = e_crow[o][newk]
        u_ccol = e_ccol[o][newk]
        nu = len(u_crow)
        totals = np.bincount(e_uid, weights=e_count, minlength=nu).astype(np.int64)
        cum = np.cumsum(totals)
        a = 0
        while a < nu:
            base_cum = cum[a - 1] if a else 0
            b = int(np.searchsorted(cum, base_cum + cap, side="right"))
            b = max(b, a + 1)
            n = int(cum[b - 1] - base_cum)
            # --- read the window: each run's groups for chunks [a, b) are contiguous
            t = time.perf_counter()
            if len(self.win) < n:
                self.win = np.empty(max(n, min(cap, 2 * len(self.win))), self.layout.dtype)
                self.wridx = np.empty(len(self.win), np.int64)
            sel = np.flatnonzero((e_uid >= a) & (e_uid < b))
            pos = 0
            wmv = memoryview(_void(self.win)).cast("B")
            imv = memoryview(self.wridx).cast("B")
            for ri in np.unique(e_run[sel]):
                rsel = sel[e_run[sel] == ri]
                lo = int(e_start[rsel].min())
                cnt = int((e_start[rsel] + e_count[rsel]).max()) - lo
                fr, fi = self._fds(int(ri))
                _pread_into(fr, wmv[pos * rs:(pos + cnt) * rs], lo * rs)
                _pread_into(fi, imv[pos * 8:(pos + cnt) * 8], lo * 8)
                pos += cnt
            assert pos == n, (pos, n)
            self.timings["read_s"] += time.perf_counter() - t
            w, ridx = self.win[:n], self.wridx[:n]
            crmin, crmax = int(u_crow[a]), int(u_crow[b - 1])
            ccmin, ccmax = int(u_ccol[a:b].min()), int(u_ccol[a:b].max())
            if _box_fits(crmin, crmax, ccmin, ccmax, self.task.chunks):
                box = (crmin, ccmin, ccmax - ccmin + 1)
                t = time.perf_counter()
                key = em.keys(w, box)
                self.timings["sort_s"] += time.perf_counter() - t
                em.emit(w, ridx, key, box)
            else:
                em.emit(w, ridx, None, None)
            yield n
            a = b

    def close_readers(self) -> None:
        pass

    def close(self) -> None:
        for fr, fi in self.fds.values():
            os.close(fr)
            os.close(fi)
        self.fds.clear()


def _pread_into(fd: int, mv: memoryview, offset: int) -> None:
    got = 0
    while got < len(mv):
        n = os.preadv(fd, [mv[got:]], offset + got)
        if n <= 0:
            raise OSError(f"spill run ended early at byte {offset + got}")
        got += n


# --- compaction: merge small batches --------------------------------------------------------------


@dataclass(frozen=True)
class MergeTask:
    store: StoreSpec
    worker: int
    workers: int
    nshards: int
    layout: dict
    format: str
    compression: str
    # ((new_seq, first, count, (old manifest rows: seq, shard, first, count, checksum, nbytes)), ...)
    # in new_seq order
    plan: tuple
    main_pid: int = 0
    fault: str = ""

    def owned_shards(self) -> list[int]:
        return owned_shards(self.nshards, self.workers, self.worker)


def merge_worker(task: MergeTask, progress_q) -> dict:
    from .finalize import ValueReader

    t0 = time.perf_counter()
    start_worker(task)
    layout = Layout.from_dict(task.layout)
    ser = get_serializer(task.format, layout, task.compression)
    owned = task.owned_shards()
    writers = {}
    readers = {}
    rows = []
    try:
        for s in owned:  # writers first: a later reader of the same shard shares the env
            writers[s] = task.store.open_shard(s, write=True)
        first_new = min((p[0] for p in task.plan), default=None)
        for s, st in writers.items():
            if first_new is not None:
                st.delete_range(batch_key(first_new), None)  # leftovers of a crashed attempt

        def shard(i):
            if i in writers:
                return writers[i]
            if i not in readers:
                readers[i] = task.store.open_shard(i, write=False)
            return readers[i]

        groups: dict[int, list] = {s: [] for s in owned}
        group_bytes = {s: 0 for s in owned}

        def flush(s):
            if groups[s]:
                writers[s].put_sorted(groups[s], table="batches")
                groups[s], group_bytes[s] = [], 0
                faults.hit("merge")

        for new_seq, first, count, olds in task.plan:
            s = new_seq % task.nshards
            if s not in writers:
                continue
            if len(olds) == 1:
                with ValueReader(shard(olds[0][1]), "batches") as rd:
                    value = bytes(_get_batch(rd, task.store, olds[0]))
            else:
                buf, recs = ser.new_buffer(count)
                pos = 0
                for old in olds:  # manifest rows: (seq, shard, first, count, checksum, nbytes)
                    with ValueReader(shard(old[1]), "batches") as rd:
                        _, part = ser.decode(_get_batch(rd, task.store, old))
                        recs[pos:pos + old[3]] = part
                    pos += old[3]
                value = ser.encode_buffer(buf, recs, first)
                value = value if isinstance(value, bytes) else bytes(memoryview(value).cast("B"))
            rows.append([new_seq, s, first, count, xxhash.xxh3_64_intdigest(value), len(value)])
            groups[s].append((batch_key(new_seq), value))
            group_bytes[s] += len(value)
            if group_bytes[s] >= GROUP_BYTES:
                flush(s)
            progress_q.put(count)
        for s in owned:
            flush(s)
            writers[s].sync()
    finally:
        for st in list(readers.values()) + list(writers.values()):
            st.close()
    return {"worker": task.worker, "batches": rows, "seconds": round(time.perf_counter() - t0, 4),
            "max_rss": _rss()}
