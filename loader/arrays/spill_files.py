"""Arrays of a known dtype handed between a finalize's workers and its coordinator through
the spill directory (scan entries, partition run directories, build index rows and
samples), as their raw bytes.

Why not np.save / np.load: np.load parses an .npy header with ``ast.literal_eval``, and in a
process where a stop (KeyboardInterrupt) once landed inside Python's AST conversion, every
later parse fails (CPython gh-106905: "AST constructor recursion depth mismatch"): a
finalize run in-process again after a stopped one failed reading its workers' files. Both
sides know the dtype, so a file holds the array's bytes and nothing else.

Invariants: `load` returns the array `save` wrote, or raises WorkerError naming a file
that is not a whole number of rows (cut short or changed under the finalize). A write
that fails (disk full: `write_failed`) is a NoSpaceError / StoreError naming the file. Files are
not synced: they live as long as one finalize, which starts again from the flat batches
after a crash.
"""

from __future__ import annotations

import errno
import os

import numpy as np

from ..errors import BulkloadError, NoSpaceError, StoreError, WorkerError
from ..infra.regular import open_regular_file

_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def save(path: str, arr: np.ndarray) -> None:
    """Write ``arr``'s rows to ``path`` (a new file), nothing else."""
    try:
        with open(path, "wb") as f:
            np.ascontiguousarray(arr).tofile(f)
    except OSError as e:
        raise write_failed(path, e) from None


def write_failed(path: str, e: OSError) -> BulkloadError:
    """The error of a failed write of finalize's spill file ``path`` (exit 1)."""
    cls = NoSpaceError if e.errno in _FULL else StoreError
    return cls(
        f"finalize spill file {path}: write failed: {e.strerror or e}; the dataset is unchanged since "
        "its last commit - free space (the spill files take about the records' size) and re-run the "
        "same command"
    )


def load(path: str, dtype) -> np.ndarray:
    """The rows of ``dtype`` that `save` wrote to ``path``."""
    dtype = np.dtype(dtype)
    size = os.path.getsize(path)
    if size % dtype.itemsize:
        raise WorkerError(
            f"{path}: {size} bytes is not a whole number of {dtype.itemsize}-byte rows: a finalize "
            "worker's file was cut short or changed; run the finalize again"
        )
    with open_regular_file(path) as f:
        return np.fromfile(f, dtype)
