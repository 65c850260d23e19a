"""Finalize step 2, the reading half: where a build worker's windows of whole chunks come from.

Both sources give, per owned shard, its windows in key order (``windows(shard, store)``
yields the records of each window after handing them to the ChunkEmitter) and the records
the shard will receive (``incoming(shard)``, to size the LMDB map once).

- `DirectSource` (no spill runs): each window (direct.Window) lists the flat batches
  holding its records; a batch wholly inside the window is copied as is, others through
  a mask of the records whose chunk is in the window. Batches are read zero-copy (or
  taken from the records a small finalize's scan kept, decoded.py); a reader
  of the shard this worker writes shares the writer's environment. A window that does not
  receive exactly its planned records means the flat data changed during finalize: a
  VerifyError (nothing is committed).
- `SpillSource`: the spill runs of the partition step; each run's groups of a window's
  chunks are contiguous, read with ``preadv`` into one buffer of at most the budget.

Reads only; the memory is one window (plus sort keys) of at most the budget.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from ..errors import VerifyError
from ..infra.regular import open_regular
from . import spill_files
from .build_emit import ChunkEmitter
from .chunks import box_fits
from .decoded import Decoded
from .direct import Window
from .job import BatchReader
from .partition import DIR_DTYPE
from .records import pread_into, void_view

#: bytes per buffered record of a spill window beyond the record (index, sort keys)
BUILD_OVERHEAD = 8 + 8 * 6


class DirectSource:
    """Windows read straight from the flat batches (no spill runs)."""

    def __init__(self, task, em: ChunkEmitter, timings: dict, decoded: Decoded | None = None):
        self.task, self.em, self.timings = task, em, timings
        self.reader = BatchReader(task.job)
        wins = [w for ws in task.windows.values() for w in ws]
        # every batch kept by a small finalize's scan: a window is the positions of its
        # records in those (``idx``), handed to the emitter without a copy (decoded.py)
        kept = decoded is not None and decoded.holds(np.concatenate([w.batches for w in wins] or [[]]).astype(int))
        self.decoded = decoded if kept else None
        # one allocation for the largest window (no transient second buffer on growth)
        self._alloc(max((int(w.n) for w in wins), default=0))

    def _alloc(self, n: int) -> None:
        self.buf = np.empty(0 if self.decoded is not None else n, self.task.job.layout_obj.dtype)
        self.idx = np.empty(n, np.int64)  # record indices (copied windows) or positions (kept)
        self.key = np.empty(n, np.int64)

    def incoming(self, s: int) -> int:
        return int(sum(int(w.n) for w in self.task.windows.get(s, ())))

    def windows(self, s: int, st):
        for win in self.task.windows.get(s, ()):
            t = time.perf_counter()
            n = int(win.n)
            if len(self.idx) < n:
                self._alloc(n)
            pos = 0
            for bi, whole in zip(win.batches.tolist(), win.whole.tolist()):
                pos = self._copy_batch(bi, whole, win, pos)
            if pos != n:
                raise VerifyError(
                    f"finalize read {pos} records for a window of {n}: the flat data changed during finalize; re-run it"
                )
            self.timings["read_s"] += time.perf_counter() - t
            if self.decoded is not None:
                self.em.emit(self.decoded.records, self.decoded.ridx, self.key[:n], win.box, rows=self.idx[:n])
            else:
                self.em.emit(self.buf[:n], self.idx[:n], self.key[:n], win.box)
            yield n

    def _copy_batch(self, bi: int, whole: bool, win: Window, pos: int) -> int:
        """Add the records of batch ``bi`` of the plan that belong to ``win`` to the window
        at ``pos`` (copied, with their record indices; or their positions in the kept
        records), and their sort keys; returns the new fill."""
        b = self.task.batches[bi]
        if self.decoded is not None:
            recs = self.decoded.slot(bi)
            sel = None if whole else self._selected(recs, win)
            m = b.count if sel is None else len(sel)
            off = int(self.decoded.offsets[bi])
            self.idx[pos : pos + m] = np.arange(off, off + m) if sel is None else sel + off
            self.em.keys(recs, win.box, out=self.key[pos : pos + m], sel=sel)
            return pos + m
        # a reader of the shard this worker writes shares its env
        with self.reader.records(b, self.em.st if b.shard == self.em.shard else None) as recs:
            if whole:
                m = b.count
                void_view(self.buf[pos : pos + m])[...] = void_view(recs)
                self.idx[pos : pos + m] = np.arange(b.first, b.first + m)
            else:
                sel = self._selected(recs, win)
                m = len(sel)
                np.take(void_view(recs), sel, out=void_view(self.buf[pos : pos + m]))
                self.idx[pos : pos + m] = sel + b.first
        self.em.keys(self.buf[pos : pos + m], win.box, out=self.key[pos : pos + m])
        return pos + m

    def _selected(self, recs: np.ndarray, win: Window) -> np.ndarray:
        """Positions of the records of ``recs`` whose chunk is one of the window's."""
        d0, d1 = self.task.job.dims
        l0, l1 = self.task.job.chunks
        crmin, ccmin, nc = win.box
        nr = len(win.lut) // nc
        qr = np.floor_divide(recs[d0].astype(np.int64), l0) - crmin
        qc = np.floor_divide(recs[d1].astype(np.int64), l1) - ccmin
        inbox = (qr >= 0) & (qr < nr) & (qc >= 0) & (qc < nc)
        o = np.where(inbox, qr * nc + qc, 0)
        return np.flatnonzero(inbox & win.lut[o])

    def close_readers(self) -> None:
        self.reader.close()

    def close(self) -> None:
        self.close_readers()


@dataclass(frozen=True)
class _ShardGroups:
    """One shard's groups in every spill run (run order = record-index order), and its
    distinct chunks in key order with their cumulative record counts."""

    run: np.ndarray
    start: np.ndarray
    count: np.ndarray
    uid: np.ndarray  # the chunk number of each group
    crow: np.ndarray  # of each chunk
    ccol: np.ndarray
    cum: np.ndarray


class SpillSource:
    """Windows of whole chunks merged from the spill runs of the partition step."""

    def __init__(self, task, em: ChunkEmitter, timings: dict):
        self.task, self.em, self.timings = task, em, timings
        self.layout = em.layout
        self.rs = self.layout.record_size
        self.cap = max(1, task.budget // (self.rs + BUILD_OVERHEAD))
        self.dirs = [spill_files.load(os.path.join(task.spill_dir, f"{run.name}.dir"), DIR_DTYPE) for run in task.runs]
        self.fds: dict[int, tuple[int, int]] = {}
        self.win = np.empty(0, self.layout.dtype)
        self.wridx = np.empty(0, np.int64)

    def incoming(self, s: int) -> int:
        return sum(int(d["count"][d["shard"] == s].sum()) for d in self.dirs)

    def _fds(self, ri: int) -> tuple[int, int]:
        if ri not in self.fds:
            base = os.path.join(self.task.spill_dir, self.task.runs[ri].name)
            self.fds[ri] = (open_regular(base + ".rec"), open_regular(base + ".idx"))
        return self.fds[ri]

    def windows(self, s: int, st):
        g = self._groups(s)
        if g is None:
            return
        a = 0
        while a < len(g.crow):
            base_cum = g.cum[a - 1] if a else 0
            b = max(int(np.searchsorted(g.cum, base_cum + self.cap, side="right")), a + 1)
            n = int(g.cum[b - 1] - base_cum)
            w, ridx = self._read(g, a, b, n)
            self._emit(w, ridx, g, a, b)
            yield n
            a = b

    def _groups(self, s: int) -> _ShardGroups | None:
        parts = [(ri, d[d["shard"] == s]) for ri, d in enumerate(self.dirs)]
        parts = [(ri, sel) for ri, sel in parts if len(sel)]
        if not parts:
            return None
        e_run = np.concatenate([np.full(len(sel), ri, np.int64) for ri, sel in parts])
        e_crow = np.concatenate([sel["crow"] for _, sel in parts])
        e_ccol = np.concatenate([sel["ccol"] for _, sel in parts])
        e_start = np.concatenate([sel["start"] for _, sel in parts])
        e_count = np.concatenate([sel["count"] for _, sel in parts])
        o = np.lexsort((e_ccol, e_crow))
        newk = np.r_[True, (e_crow[o][1:] != e_crow[o][:-1]) | (e_ccol[o][1:] != e_ccol[o][:-1])]
        e_uid = np.empty(len(o), np.int64)
        e_uid[o] = np.cumsum(newk) - 1
        nu = int(newk.sum())
        totals = np.bincount(e_uid, weights=e_count, minlength=nu).astype(np.int64)
        return _ShardGroups(e_run, e_start, e_count, e_uid, e_crow[o][newk], e_ccol[o][newk], np.cumsum(totals))

    def _read(self, g: _ShardGroups, a: int, b: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The records (and record indices) of chunks [a, b): each run's groups of them are
        contiguous."""
        t = time.perf_counter()
        rs = self.rs
        if len(self.win) < n:
            self.win = np.empty(max(n, min(self.cap, 2 * len(self.win))), self.layout.dtype)
            self.wridx = np.empty(len(self.win), np.int64)
        sel = np.flatnonzero((g.uid >= a) & (g.uid < b))
        pos = 0
        wmv = void_view(self.win).data.cast("B")
        imv = self.wridx.data.cast("B")
        for ri in np.unique(g.run[sel]):
            rsel = sel[g.run[sel] == ri]
            lo = int(g.start[rsel].min())
            cnt = int((g.start[rsel] + g.count[rsel]).max()) - lo
            fr, fi = self._fds(int(ri))
            pread_into(fr, wmv[pos * rs : (pos + cnt) * rs], lo * rs)
            pread_into(fi, imv[pos * 8 : (pos + cnt) * 8], lo * 8)
            pos += cnt
        assert pos == n, (pos, n)
        self.timings["read_s"] += time.perf_counter() - t
        return self.win[:n], self.wridx[:n]

    def _emit(self, w: np.ndarray, ridx: np.ndarray, g: _ShardGroups, a: int, b: int) -> None:
        crmin, crmax = int(g.crow[a]), int(g.crow[b - 1])
        ccmin, ccmax = int(g.ccol[a:b].min()), int(g.ccol[a:b].max())
        if box_fits(crmin, crmax, ccmin, ccmax, self.task.job.chunks):
            box = (crmin, ccmin, ccmax - ccmin + 1)
            t = time.perf_counter()
            key = self.em.keys(w, box)
            self.timings["sort_s"] += time.perf_counter() - t
            self.em.emit(w, ridx, key, box)
        else:
            self.em.emit(w, ridx, None, None)

    def close_readers(self) -> None:
        pass

    def close(self) -> None:
        for fr, fi in self.fds.values():
            os.close(fr)
            os.close(fi)
        self.fds.clear()
