"""Numeric numpy arrays to and from Arrow arrays without pyarrow's pandas hooks.

pyarrow's own conversions (``pa.array(numpy)``, ``Array.to_numpy``, ``np.asarray``) import
pandas when it is installed - ~0.3 s in every process that converts once (the workers of an
Arrow load, a box query, an export, a verify of a finalized dataset), and pandas comes with
``bulkload[dask]``. Plain numeric columns, which is what bulkload's records and chunk
indexes hold, are converted here zero-copy over their buffers instead; anything else (bool,
nulls, strings) takes pyarrow's own path.

Invariants: `from_numpy(a)` keeps ``a`` (or its contiguous copy) alive through the Arrow
buffer; `to_numpy(column)` returns a read-only view of the column's buffer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

_NUMERIC = "iuf"  # integer, unsigned, floating: Arrow's fixed-width primitive layout


def from_numpy(a: np.ndarray, type: pa.DataType | None = None) -> pa.Array:
    """``a`` (1-D) as a pyarrow Array; zero-copy for contiguous native-endian numbers (other
    byte orders are converted: pyarrow refuses them). ~2 us a column (a box query builds
    one per attribute): the Arrow type of each dtype is looked up once."""
    global _pa
    t = _ARROW_TYPES.get(a.dtype) if a.ndim == 1 else None  # native numeric dtypes only
    if t is None:
        import pyarrow as pa  # heavy: only Arrow output converts

        _pa = pa
        if a.dtype.kind not in _NUMERIC or a.ndim != 1:
            return pa.array(a, type=type)
        if not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
        t = _ARROW_TYPES[a.dtype] = pa.from_numpy_dtype(a.dtype)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    arr = _pa.Array.from_buffers(t, len(a), [None, _pa.py_buffer(a)])
    return arr if type is None or type == t else arr.cast(type)


#: native numeric dtype -> its Arrow type (pa.from_numpy_dtype costs ~0.8 us a call)
_ARROW_TYPES: dict[np.dtype[Any], pa.DataType] = {}
_pa: Any = None  # pyarrow (untyped), once a conversion imported it


def decode_dictionary(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """An Arrow column (or chunked column) with its dictionary encoding undone (its values,
    of the dictionary's value type); any other column as it is."""
    import pyarrow as pa  # heavy: only Arrow input converts

    if not pa.types.is_dictionary(column.type):
        return column
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([c.dictionary_decode() for c in column.chunks], column.type.value_type)
    return column.dictionary_decode()


def to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A numeric Arrow column (or chunked column) as a numpy array, zero-copy when it is
    one chunk without nulls."""
    import pyarrow as pa  # heavy: only Arrow input converts

    column = decode_dictionary(column)
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if arr.null_count or not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)):
        out: np.ndarray = arr.to_numpy(zero_copy_only=False)  # not a column bulkload wrote
        return out
    dtype = np.dtype(arr.type.to_pandas_dtype())
    if len(arr) == 0:
        return np.empty(0, dtype)
    return np.frombuffer(arr.buffers()[1], dtype, len(arr), arr.offset * dtype.itemsize)
