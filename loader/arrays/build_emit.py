"""Finalize step 2, the writing half: sort a window of whole chunks into cells, apply the
duplicates policy, encode each chunk piece once and append it, in key order, to the
shard's new table.

`ChunkEmitter.emit(window records, their record indices, sort keys, box)`:

1. order the cells row-major within each chunk (chunks in key order): one argsort of an
   int64 key (`keys`: chunk ordinal in the window's box, row and column within the
   chunk) - or a radix sort of the rows alone when that leaves the keys ascending (the
   columns of each row come in order: `_ordered_by_rows`) -, or a lexsort of the
   coordinates for domains too wide for one key; cells set by several records are
   ordered by record index;
2. duplicates: ``error`` raises DuplicateCellError naming the cell and two record
   indices; ``first``/``last`` keep one record (the hash sum of the others is counted,
   see hashes.py); ``keep`` numbers them ``syn`` = 0..k-1;
3. each chunk is cut into pieces of at most ``max_piece`` cells, each encoded once
   (capnp framed without zero-fill, or Arrow) with its index row (cells, bytes, xxh3,
   min/max of every field), and appended to a group written in one ``put_sorted`` of up
   to ``group_limit`` bytes; after each group a `Writeback` thread starts the disk
   writeback of the shard file, so the one sync at the end finds little left. An LMDB
   shard receiving little (a small finalize) is written in at least `MIN_GROUPS` groups,
   so that its writeback starts while the rest is still being encoded.

Crash behaviour: everything goes to the build's own table (``array-NAME-RUNID``), which
no manifest names before the switch; a crashed build's table is dropped by the next
finalize or compact.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import xxhash

from ..errors import DamagedDatasetError, DuplicateCellError
from ..infra import faults
from ..infra.regular import open_regular
from ..model.chunk_index import index_columns, ranged_fields, sample_every
from ..stores.write_guard import guard_write
from .chunks import chunk_key
from .hashes import hash_sum
from .records import coordinates, field_min_max, void_view

if TYPE_CHECKING:
    from ..stores.base import ShardStore
    from .decoded import RecordIndices

GROUP_BYTES = 64 << 20
#: an LMDB shard is written in at least this many groups (when its values allow)
MIN_GROUPS = 8

#: a piece's sample (chunk_index.py): the row and column of every ``every``-th cell
SAMPLE_DTYPE = np.dtype([("r", "<i8"), ("c", "<i8")])


@dataclass
class BuildStats:
    cells: int = 0
    dropped: int = 0
    dropped_hash: int = 0
    pieces: int = 0
    chunks: int = 0


@dataclass(frozen=True)
class _Cells:
    """A window's cells in stored order: record positions, the chunk number of each, and
    where two neighbours are the same cell."""

    order: np.ndarray
    cid: np.ndarray
    dup: np.ndarray  # dup[i]: cells i and i+1 (in order) are the same cell
    chunk_rc: tuple | None  # (crows, ccols) of the chunks in order, when known before the policy


class ChunkEmitter:
    """Sorts windows of whole chunks, applies the duplicates policy, encodes each chunk
    piece once and appends it (in key order) to the shard's new table."""

    def __init__(self, task, timings: dict, stats: BuildStats):
        self.task = task
        self.dims, self.chunks = task.job.dims, task.job.chunks
        self.layout = task.job.layout_obj
        self.cell = task.cell_layout_obj
        self.cser = task.job.cell_serializer(self.cell)
        self.rs = self.layout.record_size
        self.crs = self.cell.record_size
        self.keep = task.policy == "keep"
        self.framed = task.job.format == "capnp" and self.cell.framable
        self.fields = [f.name for f in ranged_fields(self.cell)]  # the index keeps their min/max
        self.idt = np.dtype(index_columns(self.cell))
        self.timings, self.stats = timings, stats
        self.index_rows: list[tuple] = []
        self.every = sample_every(self.crs)
        self.samples: list[np.ndarray] = []  # each piece's sample (chunk_index.py), in index row order
        self.group: list = []
        self.group_bytes = 0
        self.budget_group = max(64 << 10, min(GROUP_BYTES, task.budget // 8))
        self.group_limit = self.budget_group
        self.st: ShardStore | None = None
        self.shard = -1
        self.wb: Writeback | None = None
        self.spare: list[np.ndarray] = []  # buffers of written pieces, reused (`_buffer`)
        self.in_group: list[np.ndarray] = []  # buffers of the pieces in the group

    def start_shard(self, st: ShardStore, s: int, incoming: int) -> None:
        """Write shard ``s`` (open as ``st``), which receives ``incoming`` cells, next."""
        self.st, self.shard = st, s
        self.wb = Writeback(os.path.join(st.path, "data.mdb")) if getattr(st, "scheme", "") in ("lmdb", "mem") else None
        self.group_limit = self.budget_group
        if self.wb is not None:  # the disk starts writing after the first of >= MIN_GROUPS groups
            self.group_limit = max(64 << 10, min(self.budget_group, incoming * self.crs // MIN_GROUPS))

    def end_shard(self) -> None:
        if self.wb is not None:
            self.wb.close()
            self.wb = None

    def flush_group(self) -> None:
        if self.group:
            t = time.perf_counter()
            group, st = self.group, self.st
            assert st is not None, "groups are written to the shard started (start_shard)"
            guard_write(self.task.job.store, self.shard, lambda: st.put_sorted(group, table=self.task.table))
            self.group, self.group_bytes = [], 0
            self.spare, self.in_group = self.in_group, []  # the store has copied them
            if self.wb is not None:
                self.wb.start()
            self.timings["write_s"] += time.perf_counter() - t
            faults.hit("chunks")

    def keys(
        self, w: np.ndarray, box: tuple, out: np.ndarray | None = None, sel: np.ndarray | None = None
    ) -> np.ndarray:
        """Sort keys of records `w` (or ``w[sel]``) in a window whose chunks lie in ``box`` =
        (crmin, ccmin, nc): (chunk ordinal in the box * L0 + row in chunk) * L1 + column in chunk."""
        d0, d1 = self.dims
        l0, l1 = self.chunks
        crmin, ccmin, nc = box
        r = (w[d0] if sel is None else w[d0][sel]).astype(np.int64)
        c = (w[d1] if sel is None else w[d1][sel]).astype(np.int64)
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

    def emit(
        self,
        w: np.ndarray,
        ridx: np.ndarray | RecordIndices,
        key: np.ndarray | None,
        box: tuple | None,
        rows: np.ndarray | None = None,
    ) -> None:
        """Write the chunks of window `w` (records of whole chunks; ``ridx`` their record
        indices). With ``key`` (see `keys`) the chunk and cell order come from it; without,
        from a lexsort of the coordinates (domains too wide for one 63-bit key). With
        ``rows`` (and ``key``), the window is ``w[rows]``: its cells are gathered from ``w``
        (records kept by a small finalize's scan, decoded.py) without a copy of the window."""
        t = time.perf_counter()
        if rows is not None:
            assert key is not None, "rows come with their key"
            cells = self._sorted_by_key(key, ridx, rows)
            cells = _Cells(rows[cells.order], cells.cid, cells.dup, cells.chunk_rc)
        else:
            assert isinstance(ridx, np.ndarray), "computed record indices come with rows"
            cells = self._sorted_by_key(key, ridx) if key is not None else self._sorted_by_coords(w, ridx)
        order, cid, syn = self._apply_policy(w, ridx, cells)
        bnd = np.flatnonzero(cid[1:] != cid[:-1]) + 1
        cstarts = np.r_[0, bnd].tolist()
        cends = np.r_[bnd, len(order)].tolist()
        if cells.chunk_rc is None:
            assert box is not None, "a window without its chunks' coordinates gives its box"
            crmin, ccmin, nc = box
            ck = cid[np.r_[0, bnd]] if len(order) else cid[:0]
            ch_r, ch_c = (ck // nc + crmin).tolist(), (ck % nc + ccmin).tolist()
        else:
            ch_r, ch_c = cells.chunk_rc
        self.timings["sort_s"] += time.perf_counter() - t
        t = time.perf_counter()
        # the window's records, as raw rows (keep: syn is appended to each) or void items
        src = w.view(np.uint8).reshape(len(w), self.rs) if self.keep else void_view(w)
        for crow, ccol, cs, ce in zip(ch_r, ch_c, cstarts, cends):
            self.stats.chunks += 1
            for piece, ps in enumerate(range(cs, ce, self.task.max_piece)):
                pe = min(ps + self.task.max_piece, ce)
                self._encode_piece((crow, ccol, piece), src, order[ps:pe], None if syn is None else syn[ps:pe])
                if self.group_bytes >= self.group_limit:
                    self.timings["encode_s"] += time.perf_counter() - t
                    self.flush_group()
                    t = time.perf_counter()
        self.timings["encode_s"] += time.perf_counter() - t

    def _sorted_by_key(
        self, key: np.ndarray, ridx: np.ndarray | RecordIndices, rows: np.ndarray | None = None
    ) -> _Cells:
        """The cells of the window in order (positions in ``key``); ``ridx`` the record
        indices of the window (with ``rows``: ``ridx[rows]`` are)."""
        l0, l1 = self.chunks
        order, sk = _ordered_by_rows(key, l1)
        if order is None or sk is None:  # (both or neither)
            order = np.argsort(key)
            sk = key[order]
        dup = sk[1:] == sk[:-1]
        if dup.any():  # duplicates: record-index order within each cell
            if rows is None:
                assert isinstance(ridx, np.ndarray), "computed record indices come with rows"
                by_record = ridx
            else:
                by_record = ridx[rows]
            order = np.lexsort((by_record, key))
            sk = key[order]
            dup = sk[1:] == sk[:-1]
        return _Cells(order, sk // (l0 * l1), dup, None)

    def _sorted_by_coords(self, w: np.ndarray, ridx: np.ndarray) -> _Cells:
        d0, d1 = self.dims
        l0, l1 = self.chunks
        r = w[d0].astype(np.int64)
        c = w[d1].astype(np.int64)
        qr, qc = np.floor_divide(r, l0), np.floor_divide(c, l1)
        rin, cin = np.mod(r, l0), np.mod(c, l1)
        order = np.lexsort((ridx, cin, rin, qc, qr))
        sr, sc = qr[order], qc[order]
        dup = (
            (sr[1:] == sr[:-1])
            & (sc[1:] == sc[:-1])
            & (rin[order][1:] == rin[order][:-1])
            & (cin[order][1:] == cin[order][:-1])
        )
        newc = np.r_[True, (sr[1:] != sr[:-1]) | (sc[1:] != sc[:-1])]
        return _Cells(order, np.cumsum(newc) - 1, dup, (sr[newc].tolist(), sc[newc].tolist()))

    def _apply_policy(self, w: np.ndarray, ridx: np.ndarray | RecordIndices, cells: _Cells):
        """(order, chunk number, syn) of the cells to store under the duplicates policy."""
        order, cid, dup = cells.order, cells.cid, cells.dup
        if not dup.any():
            return order, cid, np.zeros(len(order), np.uint32) if self.keep else None
        policy = self.task.policy
        if policy == "error":
            self._duplicate_error(w, ridx, order, int(np.flatnonzero(dup)[0]))
        if self.keep:
            starts = np.r_[True, ~dup]
            pos_ = np.arange(len(order))
            return order, cid, (pos_ - np.maximum.accumulate(np.where(starts, pos_, 0))).astype(np.uint32)
        keepm = np.ones(len(order), bool)
        if policy == "first":
            keepm[1:][dup] = False
        else:
            keepm[:-1][dup] = False
        dropped = order[~keepm]
        self.stats.dropped += len(dropped)
        self.stats.dropped_hash = (self.stats.dropped_hash + hash_sum(np.ascontiguousarray(w[dropped]))) % 2**64
        return order[keepm], cid[keepm], None

    def _duplicate_error(self, w: np.ndarray, ridx: np.ndarray | RecordIndices, order: np.ndarray, i: int) -> None:
        d0, d1 = self.dims
        a_idx, b_idx = int(ridx[order[i]]), int(ridx[order[i + 1]])
        raise DuplicateCellError(
            f"cell ({d0}={int(w[d0][order[i]])}, {d1}={int(w[d1][order[i]])}) of array "
            f"{self.task.array!r} is set by records {a_idx} and {b_idx}; nothing was committed - "
            f"choose --duplicates first, last or keep, or fix the data"
        )

    def _buffer(self, size: int) -> np.ndarray:
        """A buffer of ``size`` bytes for a piece: one of the last group's when large enough
        (memory already faulted in), else a new one."""
        at = next((i for i, b in enumerate(self.spare) if len(b) >= size), None)
        buf = np.empty(size, np.uint8) if at is None else self.spare.pop(at)
        self.in_group.append(buf)
        return buf[:size]

    def _encode_piece(self, where: tuple[int, int, int], src: np.ndarray, idx: np.ndarray, syn) -> None:
        """Encode piece ``where`` = (crow, ccol, piece), the records ``src[idx]`` (gathered
        straight into the value), with its index row, and add it to the write group."""
        crow, ccol, piece = where
        m = len(idx)
        cser = self.cser
        if self.framed:  # no zero-fill: every byte is written below
            buf, view = cser.new_buffer(m, into=self._buffer(cser.message_size(m)).data)
        else:
            buf, view = cser.new_buffer(m)
        if self.keep:
            vb = view.view(np.uint8).reshape(m, self.crs)
            vb[:, : self.rs] = src[idx]
            view["syn"] = syn
        else:
            np.take(src, idx, out=void_view(view), mode="clip")
        mins, maxs = field_min_max(view, self.fields)
        value = cser.encode_buffer(buf, view, 0)
        nbytes = len(memoryview(value).cast("B")) if not isinstance(value, bytes) else len(value)
        row = [crow, ccol, piece, self.shard, m, nbytes, xxhash.xxh3_64_intdigest(value), self.every]
        sample = np.empty(-(-m // self.every), SAMPLE_DTYPE)
        sample["r"] = coordinates(view[self.dims[0]][:: self.every])
        sample["c"] = coordinates(view[self.dims[1]][:: self.every])
        self.samples.append(sample)
        for mn, mx in zip(mins, maxs):
            row.append(mn)
            row.append(mx)
        self.index_rows.append(tuple(row))
        self.group.append((chunk_key(crow, ccol, piece), value))
        self.group_bytes += nbytes
        self.stats.pieces += 1
        self.stats.cells += m


#: most distinct rows (chunk ordinal x L0 + row in chunk) of a window `_ordered_by_rows` sorts
ROW_RADIX_LIMIT = 1 << 16
#: cells checked before the whole window is (an unordered window gives up after these)
ROW_ORDER_PROBE = 1 << 16


def _ordered_by_rows(key: np.ndarray, l1: int) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """(order, key[order]) when sorting by row alone (a stable radix sort of 16-bit row
    numbers, ~5x faster than an argsort of the key) leaves the keys ascending: the columns
    of each row already come in order, as when a dimension follows the record order. Else
    (None, None). The keys are strictly ascending in both orders when no cell repeats, so
    the order is the one an argsort gives."""
    if not len(key):
        return None, None
    rows = key // l1  # chunk ordinal in the window's box * L0 + row in the chunk: >= 0
    if int(rows[-1]) >= ROW_RADIX_LIMIT or int(rows.max()) >= ROW_RADIX_LIMIT:
        return None, None
    order = np.argsort(rows.astype(np.uint16), kind="stable")
    probe = key[order[:ROW_ORDER_PROBE]]
    if not (probe[1:] >= probe[:-1]).all():
        return None, None
    sk = key[order]
    return (order, sk) if (sk[1:] >= sk[:-1]).all() else (None, None)


class Writeback:
    """Keep the disk busy while the worker computes: after each committed group a helper
    thread starts the writeback of the shard file (``sync_file_range(WRITE)``), so that
    the durability point, ``sync()`` at the end, finds little left to write. Only an
    optimisation: durability still comes from ``sync()``."""

    _fn: ctypes._NamedFuncPointer | Literal[False] | None = None  # libc's sync_file_range (False: none)

    def __init__(self, path: str) -> None:
        self.fd: int | None
        try:
            self.fd = open_regular(path)
        except (OSError, DamagedDatasetError):
            self.fd = None
        if Writeback._fn is None:
            try:
                libc = ctypes.CDLL("libc.so.6", use_errno=True)  # CDLL calls release the GIL
                fn = libc.sync_file_range
                fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
                Writeback._fn = fn
            except (OSError, AttributeError):
                Writeback._fn = False
        self.wake = threading.Event()
        self.stop = False
        self.thread: threading.Thread | None = None
        if self.fd is not None and Writeback._fn:
            self.thread = threading.Thread(
                target=self._run, args=(Writeback._fn, self.fd), name="writeback", daemon=True
            )
            self.thread.start()

    def _run(self, sync_file_range: ctypes._NamedFuncPointer, fd: int) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            if self.stop:
                return
            sync_file_range(fd, 0, 0, 2)  # SYNC_FILE_RANGE_WRITE: the whole file

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
