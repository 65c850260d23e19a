"""The records every benchmark figure measures: 96-byte ``scidb96`` records, their units, the
2-D dimensions the finalizer redimensions them into, and the box the queries read; and the
other workloads of the load section (`WORKLOADS`: ``ticks``, 41-byte market ticks).

Invariants: a figure's bytes are ``records * RECORD_SIZE``; MB is 10**6 bytes; the box of
``n`` records is the same for bulkload and its peers (TileDB), so their latencies compare.

Crash behaviour: nothing here writes anything; `generate_records` only fills memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

RECORD_SIZE = 96
LAYOUT = "scidb96"
DIMS = "i0:10,i1:100000"
MB = 1e6
#: layout -> record size of the workloads the load section can measure (gen://LAYOUT, bulkload-gen --layout)
WORKLOADS = {"scidb96": RECORD_SIZE, "ticks": 41}


def check_workloads(names) -> tuple[str, ...]:
    """The workloads asked for (scidb96 always: every other section measures it); ValueError
    naming an unknown one."""
    names = tuple(dict.fromkeys(["scidb96", *names]))
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; use {', '.join(WORKLOADS)}")
    return names


def box(n: int, width: int = 1000) -> dict:
    """i0=0:10, i1=n/4:n/4+width: ``width`` cells (i1 is the record index, one i0 per i1)."""
    lo = n // 4
    return {"i0": [0, 10], "i1": [lo, lo + width]}


def empty_records(n: int) -> np.ndarray:
    """An uninitialised numpy structured array for ``n`` records."""
    # heavy: numpy and the layouts are imported only by the child processes that need records
    import numpy as np

    from ..model.layouts import get_layout  # (same reason)

    return np.empty(n, dtype=get_layout(LAYOUT).dtype)


def record_filler() -> Callable[[np.ndarray], object]:
    """The in-process C generator, imported now: ``fill(arr)`` generates records 0..len(arr)."""
    from ..sources.generators import generate  # heavy: pulls numpy in (children only)

    return lambda arr: generate(LAYOUT, 0, len(arr), impl="c", out=arr)


def generate_records(n: int) -> np.ndarray:
    """``n`` records generated in-process by the C generator (a numpy structured array)."""
    arr = empty_records(n)
    record_filler()(arr)
    return arr
