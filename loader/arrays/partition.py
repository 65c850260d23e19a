"""Finalize step 1 of the spill strategy: partition the flat records into spill runs.

`partition_worker` reads a contiguous range of flat batches into a buffer of at most
``budget`` bytes; each time it is full (and at the end) it groups the buffer by (owning
shard, chunk) - a radix sort on a compact group number, a lexsort for domains too wide
for one - and writes it as a *spill run* into the run's spill directory:

- ``RUN.rec``: the records, grouped;
- ``RUN.idx``: their record indices (int64), in the same order;
- ``RUN.dir``: one row per group (shard, crow, ccol, start, count).

The build step (build_sources.SpillSource) merges the runs chunk by chunk in key order.
Memory stays within the budget whatever N is. Runs in a pool worker; crash behaviour: it
writes only into the spill directory, which the coordinator removes (and the next
finalize sweeps).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from ..infra import faults
from ..infra.proc import peak_rss, start_worker
from . import spill_files
from .chunks import chunk_shard, int64_coordinates
from .job import BatchReader, WorkerTask
from .records import void_view

#: bytes per buffered record beyond the record itself (index, sort keys, temporaries)
PART_OVERHEAD = 8 + 8 + 8 * 5
DIR_DTYPE = np.dtype([("shard", "<i8"), ("crow", "<i8"), ("ccol", "<i8"), ("start", "<i8"), ("count", "<i8")])
#: records gathered at a time into the run file (bounds the scratch buffer)
_TAKE_SLICE = 1 << 18
#: group numbers up to this many are sorted as uint16 (a radix sort)
_RADIX_GROUPS = 1 << 16


@dataclass(frozen=True)
class PartitionTask(WorkerTask):
    batches: tuple  # manifest BatchEntry, in record order
    nshards: int
    spill_dir: str
    budget: int


@dataclass(frozen=True)
class SpillRun:
    name: str  # files SPILL_DIR/NAME.rec, .idx, .dir
    records: int


@dataclass(frozen=True)
class PartitionReceipt:
    worker: int
    pid: int
    runs: tuple  # of SpillRun, in record-index order
    records: int
    seconds: float
    read_s: float
    sort_s: float
    spill_s: float
    max_rss: int


@dataclass(frozen=True)
class _Groups:
    """A buffer grouped by (shard, chunk): the record order and one row per group."""

    order: np.ndarray
    shard: np.ndarray
    crow: np.ndarray
    ccol: np.ndarray
    count: np.ndarray


def partition_worker(task: PartitionTask, progress_q) -> PartitionReceipt:
    t0 = time.perf_counter()
    start_worker(task)
    part = _Partitioner(task)
    reader = BatchReader(task.job)
    try:
        for b in task.batches:
            t = time.perf_counter()
            with reader.records(b) as recs:
                t = part.add(recs, b.first, b.count, t)
            part.timings["read_s"] += time.perf_counter() - t
            progress_q.put(b.count)
        if part.fill:
            part.spill(part.fill)
    finally:
        reader.close()
    return PartitionReceipt(
        task.worker,
        os.getpid(),
        tuple(part.runs),
        part.total,
        round(time.perf_counter() - t0, 4),
        **{k: round(v, 4) for k, v in part.timings.items()},
        max_rss=peak_rss(),
    )


class _Partitioner:
    """The worker's record buffer and the spill runs written from it."""

    def __init__(self, task: PartitionTask):
        job = task.job
        self.task = task
        layout = job.layout_obj
        self.total = sum(b.count for b in task.batches)
        self.cap = max(1, min(task.budget // (layout.record_size + PART_OVERHEAD), self.total or 1))
        self.buf = np.empty(self.cap, layout.dtype)
        self.ridx = np.empty(self.cap, np.int64)
        self.scratch = np.empty(min(self.cap, _TAKE_SLICE), layout.dtype)
        self.small_coords = all(layout.field(d).size <= 4 for d in job.dims)
        self.fill = 0
        self.runs: list[SpillRun] = []
        self.timings = {"read_s": 0.0, "sort_s": 0.0, "spill_s": 0.0}

    def add(self, recs: np.ndarray, first: int, count: int, t: float) -> float:
        """Copy a batch's records (record indices from ``first``) into the buffer, spilling
        whenever it is full; returns the start of the read time still to count (the time
        since ``t`` minus the spills)."""
        buf, pos = self.buf, 0
        while pos < count:
            m = min(self.cap - self.fill, count - pos)
            fill = self.fill
            void_view(buf)[fill : fill + m] = (
                void_view(recs[pos : pos + m]) if recs.flags.c_contiguous else recs[pos : pos + m]
            )
            self.ridx[fill : fill + m] = np.arange(first + pos, first + pos + m)
            self.fill += m
            pos += m
            if self.fill == self.cap:
                self.timings["read_s"] += time.perf_counter() - t
                self.spill(self.fill)
                t = time.perf_counter()
                self.fill = 0
        return t

    def spill(self, n: int) -> None:
        """Group the first ``n`` buffered records and write them as the next spill run."""
        t = time.perf_counter()
        groups = self._group(n)
        self.timings["sort_s"] += time.perf_counter() - t
        t = time.perf_counter()
        name = f"run-{self.task.worker:03d}-{len(self.runs):05d}"
        base = os.path.join(self.task.spill_dir, name)
        try:
            self._write_run(base, n, groups)
        except OSError as e:
            raise spill_files.write_failed(e.filename or base, e) from None
        self.runs.append(SpillRun(name, n))
        self.timings["spill_s"] += time.perf_counter() - t
        faults.hit("spill")

    def _chunks(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shard, crow, ccol) of the first ``n`` buffered records."""
        d0, d1 = self.task.job.dims
        l0, l1 = self.task.job.chunks
        k = self.task.nshards
        crow = np.floor_divide(int64_coordinates(self.buf[d0][:n], d0, lambda i: int(self.ridx[i])), l0)
        ccol = np.floor_divide(int64_coordinates(self.buf[d1][:n], d1, lambda i: int(self.ridx[i])), l1)
        if k == 1:
            shard = np.zeros(n, np.int64)
        elif self.small_coords:  # |crow|, |ccol| < 2**62: the sum cannot overflow
            sm = np.add(crow, ccol)
            shard = sm - np.floor_divide(sm, k) * k  # = sm mod k; floor_divide by a scalar is fast
        else:
            shard = chunk_shard(crow, ccol, k)
        return shard, crow, ccol

    def _group(self, n: int) -> _Groups:
        shard, crow, ccol = self._chunks(n)
        crmin, crmax = int(crow.min()), int(crow.max())
        ccmin, ccmax = int(ccol.min()), int(ccol.max())
        nr, nc = crmax - crmin + 1, ccmax - ccmin + 1
        ngroups = self.task.nshards * nr * nc
        if ngroups >= 2**63:  # a domain too wide for one 63-bit group number
            return _lexsort_groups(shard, crow, ccol, n)
        g = (shard * nr + (crow - crmin)) * nc + (ccol - ccmin)
        if ngroups <= _RADIX_GROUPS:
            g16 = g.astype(np.uint16)
            order = np.argsort(g16, kind="stable")  # radix sort
            counts = np.bincount(g16, minlength=ngroups)
            nz = np.flatnonzero(counts)
            cnt = counts[nz]
            gk = nz.astype(np.int64)
        else:
            order = np.argsort(g, kind="stable")
            gs = g[order]
            starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
            gk = gs[starts]
            cnt = np.diff(np.r_[starts, n])
        rem = gk % (nr * nc)
        return _Groups(order, gk // (nr * nc), rem // nc + crmin, rem % nc + ccmin, cnt)

    def _write_run(self, base: str, n: int, groups: _Groups) -> None:
        """RUN.rec (records in group order), RUN.idx (their indices), RUN.dir (spill_files.py)."""
        order, scratch = groups.order, self.scratch
        src = void_view(self.buf)
        with open(base + ".rec", "wb") as f:
            for i in range(0, n, len(scratch)):
                part = order[i : i + len(scratch)]
                out = void_view(scratch[: len(part)])
                np.take(src, part, out=out, mode="clip")
                f.write(out.data.cast("B"))
        with open(base + ".idx", "wb") as f:
            f.write(self.ridx[:n][order].data.cast("B"))
        d = np.empty(len(groups.count), DIR_DTYPE)
        d["shard"], d["crow"], d["ccol"], d["count"] = groups.shard, groups.crow, groups.ccol, groups.count
        d["start"] = np.cumsum(groups.count) - groups.count
        spill_files.save(base + ".dir", d)


def _lexsort_groups(shard: np.ndarray, crow: np.ndarray, ccol: np.ndarray, n: int) -> _Groups:
    order = np.lexsort((ccol, crow, shard))
    s_, r_, c_ = shard[order], crow[order], ccol[order]
    starts = np.flatnonzero(np.r_[True, (s_[1:] != s_[:-1]) | (r_[1:] != r_[:-1]) | (c_[1:] != c_[:-1])])
    return _Groups(order, s_[starts], r_[starts], c_[starts], np.diff(np.r_[starts, n]))
