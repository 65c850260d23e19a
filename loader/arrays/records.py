"""Records as numpy buffers: moving whole records and summing up their fields.

- `void_view`: a structured array seen as one opaque item per record, so that gathers
  (``np.take``), copies and slices move whole records with one memcpy each, whatever
  the fields.
- `coordinates`: a time dimension's column as its int64 counts (coordinates are int64).
- `field_min_max`: per-field min and max of a block of cells, in cache-sized blocks (one
  pass over memory), for the chunk index.
- `pread_into`: fill a buffer from a file at an offset (spill runs), all or an OSError.

Pure functions.
"""

from __future__ import annotations

import os

import numpy as np


def void_view(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype((np.void, a.dtype.itemsize)))


def coordinates(a: np.ndarray) -> np.ndarray:
    """A dimension's values as int64 coordinates: a datetime64/timedelta64 column viewed as its
    int64 counts (no copy), any integer column as it is."""
    return a.view(np.int64) if a.dtype.kind in "mM" else a


def field_min_max(view: np.ndarray, fields: list[str], block: int = 8192) -> tuple[list, list]:
    """Per-field min and max of a structured array, in cache-sized blocks (one pass over memory)."""
    n = len(view)
    if n <= block:
        return [view[f].min() for f in fields], [view[f].max() for f in fields]
    mins, maxs = [], []
    for i in range(0, n, block):
        b = view[i : i + block]
        mins.append([b[f].min() for f in fields])
        maxs.append([b[f].max() for f in fields])
    lo = [min(col) for col in zip(*mins)]
    hi = [max(col) for col in zip(*maxs)]
    return lo, hi


def pread_into(fd: int, mv: memoryview, offset: int) -> None:
    got = 0
    while got < len(mv):
        n = os.preadv(fd, [mv[got:]], offset + got)
        if n <= 0:
            raise OSError(f"spill run ended early at byte {offset + got}")
        got += n
