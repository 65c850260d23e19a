"""The chunk index of a 2-D array: one Arrow IPC file of rows, one row per stored piece.

A finalize build ``array-NAME-RUNID`` stores its chunk pieces in the table of that name
(`TABLE_PREFIX`) in every shard, and its index in ``ROOT/arrays/TABLE.arrow``
(`INDEX_DIR`, `index_file`). The manifest's array summary names both (``table``,
``index``). A row holds crow, ccol, piece, shard, cells, nbytes, the xxh3 checksum of the
stored value, the min/max of every cell field (`index_columns`) and the piece's *sample*:
``sample_every`` (K) and the lists ``sample_r``/``sample_c``, the row and column of its
cells 0, K, 2K, ... in stored order (K cells are ~`SAMPLE_BYTES`), by which a reader of
part of a piece finds where its cells lie without reading the rest (arrays/box_parts.py).
Index files written before the sample existed have none of the three; readers do without.

Readers (query, verify, compact's live-bytes count) load it with `read_index`; a file that
is missing or unreadable is a VerifyError naming it, one that is not a regular file (a
FIFO, a device: never opened) a DamagedDatasetError. `write_index` writes a temporary
file, fsyncs it, renames it into place and fsyncs the directory: a crash leaves either
no file or the whole file, never a part; a file no manifest names is garbage that the next
writer removes (maintain/garbage.py `collect_index_garbage`).

pyarrow is imported inside the functions that need it: it is heavy (~0.2 s), and the
commands that only load or compact capnp datasets never touch an index.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np

from ..errors import StoreError, VerifyError
from ..infra.fsatomic import fsync_dir
from ..infra.paths import ARRAYS
from ..infra.regular import open_regular
from .arrow_numpy import from_numpy, to_numpy
from .layouts import Field, Layout

TABLE_PREFIX = "array-"
INDEX_DIR = ARRAYS
#: a piece's sample holds every K-th cell, K cells being about this many bytes
SAMPLE_BYTES = 4 << 10
#: the sample's list columns (`write_index`; `read_index` gives them as SAMPLE_COLUMNS flat
#: arrays plus ``sample_off``, the n + 1 offsets of each row's part)
SAMPLE_COLUMNS = ("sample_r", "sample_c")


def sample_every(cell_size: int) -> int:
    """K of the sample of pieces of ``cell_size``-byte cells."""
    return max(1, SAMPLE_BYTES // max(1, cell_size))


def index_columns(cell: Layout) -> list[tuple[str, str]]:
    """(name, numpy dtype) of the index rows for a cell layout."""
    cols = [
        ("crow", "<i8"),
        ("ccol", "<i8"),
        ("piece", "<i4"),
        ("shard", "<i4"),
        ("cells", "<i8"),
        ("nbytes", "<i8"),
        ("checksum", "<u8"),
        ("sample_every", "<i4"),
    ]
    for f in ranged_fields(cell):
        cols.append((f"min_{f.name}", f.spec.scalar_code))  # ranged fields: single values
        cols.append((f"max_{f.name}", f.spec.scalar_code))
    return cols


def ranged_fields(cell: Layout) -> list[Field]:
    """The cell fields the index keeps the min/max of: the single values that order (numbers,
    bool, times); not bytes, strings or arrays."""
    return [f for f in cell.fields if f.spec.count is None and f.spec.base not in ("bytes", "string")]


def index_file(table: str) -> str:
    """The index file of the build stored in ``table``, relative to the dataset root."""
    return os.path.join(INDEX_DIR, f"{table}.arrow")


def index_path(root: str, summary: dict[str, Any]) -> str:
    index: str = summary["index"]
    return os.path.join(root, index)


def write_index(path: str, rows: np.ndarray, samples: np.ndarray | None = None) -> None:
    """Write the index rows (structured array) as an Arrow IPC file, atomically; with
    ``samples`` (fields r, c: the samples of every row's piece, in row order, row j's
    ``ceil(cells / sample_every)`` of them) as the list columns SAMPLE_COLUMNS."""
    import pyarrow as pa  # heavy: only finalize writes an index

    names = list(rows.dtype.names or ())
    arrays = [from_numpy(rows[n]) for n in names]
    if samples is not None:
        off = from_numpy(np.concatenate([[0], np.cumsum(sample_counts(rows))]).astype(np.int64))
        for name, field in zip(SAMPLE_COLUMNS, ("r", "c")):
            arrays.append(pa.LargeListArray.from_arrays(off, from_numpy(np.ascontiguousarray(samples[field]))))
            names.append(name)
    table = pa.Table.from_arrays(arrays, names=names)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(os.path.dirname(path))
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StoreError(
            f"could not write the chunk index {path}: {e.strerror or e}; nothing was committed - free space and retry"
        ) from e


def read_index(path: str) -> dict[str, np.ndarray]:
    """The index file's columns as numpy arrays; VerifyError when it cannot be read."""
    import pyarrow as pa  # heavy: only array reads and compaction of finalized datasets need it

    try:
        fd = open_regular(path, advice="re-run `bulkload finalize`")  # a FIFO would block, /dev/zero never end
        try:
            size = os.fstat(fd).st_size
            buf = pa.py_buffer(mmap.mmap(fd, size, prot=mmap.PROT_READ)) if size else pa.py_buffer(b"")
        finally:
            os.close(fd)
        table = pa.ipc.open_file(buf).read_all()
    except (OSError, pa.ArrowException) as e:
        raise VerifyError(f"cannot read the chunk index {path}: {e}; re-run `bulkload finalize`") from None
    out = {}
    for name in table.column_names:
        col = table.column(name)
        if name in SAMPLE_COLUMNS:
            col = col.combine_chunks()
            off = to_numpy(col.offsets)
            out["sample_off"] = off - off[0]
            out[name] = to_numpy(col.flatten())
        else:
            out[name] = to_numpy(col)
    return out


def sample_counts(rows: np.ndarray) -> np.ndarray:
    """How many samples each index row's piece has: ceil(cells / sample_every)."""
    every = np.maximum(1, rows["sample_every"].astype(np.int64))
    counts: np.ndarray = -(-rows["cells"].astype(np.int64) // every)
    return counts


def warm_up_writer() -> None:
    """Import pyarrow and run its first IPC file write once (~0.2 s of one-time set-up):
    finalize calls this in a thread while its workers run, not after them."""
    try:
        import pyarrow as pa  # heavy: this is the warm-up

        t = pa.Table.from_arrays([from_numpy(np.zeros(1, np.int64))], names=["x"])
        with pa.ipc.new_file(pa.BufferOutputStream(), t.schema) as w:
            w.write_table(t)
    except Exception:  # only a warm-up
        pass
