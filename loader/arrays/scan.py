"""Finalize step 0, the scan: how many records of each chunk every flat batch holds.

`scan_worker` reads a contiguous range of flat batches (zero-copy) and writes the rows
(batch position in the plan, crow, ccol, count) of its range to
``OUT_DIR/scan-WWW.entries`` (spill_files.py); the coordinator plans direct windows from all of them
(direct.py). Past ``max_entries`` rows the data counts as scattered: the worker stops
and says so (the run then spills instead).

Runs in a pool worker (``scan_worker(task, progress_q)``, progress in records), or as a
thread of a small finalize, which may have it keep the decoded records (decoded.py). Crash
behaviour: it writes only into the run's spill directory, which the coordinator removes
(and the next finalize sweeps, if the coordinator died too).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from ..infra.proc import peak_rss, start_worker
from . import spill_files
from .chunks import batch_chunks
from .decoded import Decoded
from .job import BatchReader, WorkerTask

#: scan rows (batch, chunk, count) beyond which the data counts as scattered (spill)
MAX_SCAN_ENTRIES = 4_000_000
ENTRY_DTYPE = np.dtype([("batch", "<i8"), ("crow", "<i8"), ("ccol", "<i8"), ("count", "<i8")])


@dataclass(frozen=True)
class ScanTask(WorkerTask):
    batches: tuple  # manifest BatchEntry, in record order
    positions: tuple  # of each batch: its position in the plan's flat list
    out_dir: str
    max_entries: int  # give up (the data is scattered: spill instead) beyond this many rows


@dataclass(frozen=True)
class ScanReceipt:
    worker: int
    entries: str | None  # the file of ENTRY_DTYPE rows (spill_files.py); None when scattered
    scattered: bool
    seconds: float
    max_rss: int


def scan_worker(task: ScanTask, progress_q, decoded: Decoded | None = None) -> ScanReceipt:
    """Count the records of every chunk in every batch of this worker's range; with
    ``decoded`` (a small finalize run in-process, decoded.py) also keep their records there."""
    t0 = time.perf_counter()
    start_worker(task)
    job = task.job
    parts: list[np.ndarray] = []
    nent = 0
    scattered = False
    reader = BatchReader(job)
    try:
        for i, b in zip(task.positions, task.batches):
            if decoded is not None and decoded.fill(i, reader, b):
                cr, cc, cn = batch_chunks(decoded.slot(i), job.dims, job.chunks, b.first)
            else:
                with reader.records(b) as recs:
                    cr, cc, cn = batch_chunks(recs, job.dims, job.chunks, b.first)
            e = np.empty(len(cr), ENTRY_DTYPE)
            e["batch"], e["crow"], e["ccol"], e["count"] = i, cr, cc, cn
            parts.append(e)
            nent += len(e)
            progress_q.put(b.count)
            if nent > task.max_entries:
                scattered = True
                break
    finally:
        reader.close()
    path = None
    if not scattered:
        path = os.path.join(task.out_dir, f"scan-{task.worker:03d}.entries")
        spill_files.save(path, np.concatenate(parts) if parts else np.empty(0, ENTRY_DTYPE))
    return ScanReceipt(task.worker, path, scattered, round(time.perf_counter() - t0, 4), peak_rss())
