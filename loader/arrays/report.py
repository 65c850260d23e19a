"""What a finalize reports: `FinalizeReport` (``to_dict()``: the JSON of ``bulkload
finalize --json`` and of pipeline steps), and the totals of a build's chunk index.

`IndexTotals.of(rows)` sums the merged index rows of a build (cells, distinct chunks,
pieces, stored bytes, bounds of the two dims); the manifest summary and the report both
use them. `stage_figures` and `worker_peak_rss` condense the workers' receipts. Pure
functions over finished results.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..model.engine_keys import EngineKeys
from .records import coordinates


@dataclass(frozen=True)
class IndexTotals:
    cells: int
    chunks: int  # distinct (crow, ccol)
    pieces: int
    bytes: int
    bounds: dict | None  # {dim: [min, max]} of both dims; None when the array is empty

    @classmethod
    def of(cls, rows: np.ndarray, dims: tuple[str, str]) -> IndexTotals:
        if not len(rows):
            return cls(0, 0, 0, 0, None)
        bounds = {
            d: [int(coordinates(rows[f"min_{d}"]).min()), int(coordinates(rows[f"max_{d}"]).max())] for d in dims
        }  # coordinates: a time dimension's int64 counts of its unit
        o = np.lexsort((rows["ccol"], rows["crow"]))  # distinct chunks (np.unique would import numpy.ma)
        cr, cc = rows["crow"][o], rows["ccol"][o]
        chunks = 1 + int(np.count_nonzero((cr[1:] != cr[:-1]) | (cc[1:] != cc[:-1])))
        return cls(int(rows["cells"].sum()), chunks, len(rows), int(rows["nbytes"].sum()), bounds)


@dataclass(frozen=True)
class FinalizeReport(EngineKeys):
    dataset: str
    array: str
    run_id: str | None  # None: nothing to do (status), no run recorded
    dims: list  # [{"name", "type", "chunk"}, ...] as in the manifest summary
    policy: str
    records: int
    bytes: int
    cells: int
    chunks: int
    pieces: int
    dropped: int
    bounds: dict | None
    stored_bytes: int
    strategy: str  # direct | spill
    strategy_reason: str
    windows: int | None  # direct windows (None: spilled)
    spill_runs: int
    workers: dict  # {"scan", "partition", "build"}: workers of each phase
    memory_budget: int
    seconds: float
    mb_per_s: float
    records_per_s: float
    stages: dict  # seconds of each phase, slowest worker per phase and per step
    worker_peak_rss_bytes: int  # the largest sum over one phase's workers
    worker_max_rss_bytes: int  # the largest peak RSS of one worker (what --memory-budget bounds)
    compact: dict | None  # the compaction's report (None: --no-compact)
    in_process: bool = False  # the phases ran as threads of this process, no worker started (finalize.py)
    status: str = "done"  # or "nothing-to-do": the array was up to date, nothing was written

    def to_dict(self) -> dict:
        return asdict(self) | self.engine


#: per-worker step timings reported (slowest worker) for the partition and build phases
PARTITION_STEPS = ("read_s", "sort_s", "spill_s")
BUILD_STEPS = ("read_s", "sort_s", "encode_s", "write_s", "sync_s", "minflt", "cpu_s")


def stage_figures(phase_seconds: dict, scan: list, partition: list, build: list) -> dict:
    """The report's ``stages``: each phase's seconds, its slowest worker, and the slowest
    worker's seconds in each step of partition and build."""
    out = phase_seconds | {
        "scan_worker_max_s": max((rc.seconds for rc in scan), default=0),
        "partition_worker_max_s": max((rc.seconds for rc in partition), default=0),
        "build_worker_max_s": max((rc.seconds for rc in build), default=0),
    }
    if partition:
        out |= {f"partition_{k}": max(getattr(rc, k) for rc in partition) for k in PARTITION_STEPS}
    if build:
        out |= {f"build_{k}": max(getattr(rc, k) for rc in build) for k in BUILD_STEPS}
    return out


def worker_peak_rss(*phases: list) -> int:
    """The phases run one after the other: the peak is the largest sum over one phase's workers."""
    return max(sum(rc.max_rss for rc in rcs) for rcs in phases)
