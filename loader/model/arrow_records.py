"""Records of a layout as Arrow columns with native types and real nulls, and back.

`records_to_arrow(records, layout)`: a pyarrow Table of ``layout.arrow_schema`` built over
the records' bytes (one contiguous copy of each column, no per-value Python):

- numbers, float16, timestamps (``timestamp(unit, tz)``), durations: the column's values;
- ``bool``: the bytes packed into Arrow's bits;
- ``bytes[N]``: ``fixed_size_binary(N)`` over the column;
- ``string[N]``: ``string`` (utf8) whose values are the bytes up to the zero padding;
- ``T[k]``: ``fixed_size_list(T, k)`` over the column's values;
- a nullable field: its Arrow validity bitmap is its bit of ``_validity``.

`frame_of_records(records, layout)`: the same as a pandas DataFrame, with pandas' own
nullable dtypes (``Int16``, ``boolean``, ``Float64``) for nullable number and bool fields
and the time zone of a datetime field kept.

The way back (Arrow or pandas columns into records) is conversions.py's. Pure functions:
no I/O; pyarrow is imported by the callers' first use.
"""

from __future__ import annotations

import numpy as np

from .layouts import VALIDITY, Field, Layout


def validity_of(records: np.ndarray, layout: Layout, name: str) -> np.ndarray | None:
    """The bool mask of the records whose nullable field ``name`` holds a value (None: the
    field is not nullable)."""
    if name not in layout.nullable_names:
        return None
    j = layout.nullable_names.index(name)
    return (records[VALIDITY][:, j // 8] >> (j % 8)) & 1 != 0


def set_validity(records: np.ndarray, layout: Layout, name: str, valid: np.ndarray | None) -> None:
    """Set (or clear, where ``valid`` is False) the bit of nullable field ``name`` in every
    record, and zero the field's bytes where it is null. ``valid`` None: every record holds one."""
    j = layout.nullable_names.index(name)
    col, bit = records[VALIDITY][:, j // 8], np.uint8(1 << (j % 8))
    if valid is None:
        records[VALIDITY][:, j // 8] = col | bit
        return
    records[VALIDITY][:, j // 8] = np.where(valid, col | bit, col & ~bit)
    if not valid.all():
        values = records[name]
        values[~valid] = np.zeros((), values.dtype) if values.ndim == 1 else 0
        records[name] = values


def records_to_arrow(records: np.ndarray, layout: Layout):
    """A pyarrow Table of ``layout.arrow_schema`` holding ``records`` (see the module docstring)."""
    import pyarrow as pa  # heavy: only Arrow output converts

    schema = layout.arrow_schema
    columns = [column_to_arrow(records[f.name], f, validity_of(records, layout, f.name)) for f in layout.fields]
    return pa.Table.from_arrays(columns, schema=schema)


def column_to_arrow(values: np.ndarray, field: Field, valid: np.ndarray | None):
    """One field's values (``values``: the numpy column) as an Arrow array of its type."""
    import pyarrow as pa  # heavy: only Arrow output converts

    n, spec, t = len(values), field.spec, field.arrow_type
    mask = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = -1 if mask is not None else 0
    if spec.base == "bool":
        bits = np.packbits(np.ascontiguousarray(values).view(np.uint8) != 0, bitorder="little")
        return pa.Array.from_buffers(t, n, [mask, pa.py_buffer(bits)], nulls)
    if spec.base == "string":
        return _strings(np.ascontiguousarray(values), spec.width, mask, nulls)
    data = pa.py_buffer(np.ascontiguousarray(values).view(np.uint8))  # (datetimes have no buffer format)
    if spec.count is not None:
        child = pa.Array.from_buffers(t.value_type, n * spec.count, [None, data])
        return pa.Array.from_buffers(t, n, [mask], nulls, children=[child])
    return pa.Array.from_buffers(t, n, [mask, data], nulls)


def _strings(values: np.ndarray, width: int, mask, nulls: int):
    """Zero-padded UTF-8 values of ``width`` bytes as an Arrow utf8 array (padding dropped)."""
    import pyarrow as pa  # heavy: only Arrow output converts

    raw = values.view(np.uint8).reshape(len(values), width)
    nonzero = raw != 0
    lengths = np.where(nonzero.any(axis=1), width - np.argmax(nonzero[:, ::-1], axis=1), 0)
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = raw[np.arange(width) < lengths[:, None]]  # row-major: each value's bytes in turn
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(pa.string(), len(values), [mask, pa.py_buffer(offsets.astype(np.int32)),
                                                                 pa.py_buffer(data)], nulls)
    big = pa.Array.from_buffers(pa.large_string(), len(values), [mask, pa.py_buffer(offsets), pa.py_buffer(data)],
                                nulls)
    return big.cast(pa.string())  # raises: a column over 2 GiB of text does not fit one utf8 array


def _pandas_nullable(field: Field):
    """The pandas nullable dtype of a nullable number or bool field (None: pyarrow's own)."""
    if not field.nullable or not (field.spec.is_number or field.spec.base == "bool"):
        return None
    import pandas as pd  # only pandas output needs it

    name = {"bool": "boolean", "float16": "Float32"}.get(field.type) or field.type.capitalize().replace("Uint", "UInt")
    return pd.api.types.pandas_dtype(name)


def frame_of_records(records: np.ndarray, layout: Layout, index=None):
    """``records`` as a pandas DataFrame (see the module docstring); ``index``: its index."""
    import pandas as pd  # only pandas output needs it

    if layout.numbers_only:  # the plain numeric layouts: pandas takes the record array as it is
        return pd.DataFrame(records, index=index)
    table = records_to_arrow(records, layout)
    columns = {}
    for f, col in zip(layout.fields, table.columns):
        dtype = _pandas_nullable(f)
        columns[f.name] = col.to_pandas(types_mapper=None if dtype is None else {f.arrow_type: dtype}.get)
    frame = pd.DataFrame(columns)
    if index is not None:
        frame.index = index
    return frame
