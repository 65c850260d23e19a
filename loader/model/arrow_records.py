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

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

from .layouts import TYPES, VALIDITY, Field, Layout


def validity_of(records: np.ndarray | Mapping[str, np.ndarray], layout: Layout, name: str) -> np.ndarray | None:
    """The bool mask of the records whose nullable field ``name`` holds a value (None: the
    field is not nullable)."""
    if name not in layout.nullable_names:
        return None
    j = layout.nullable_names.index(name)
    mask: np.ndarray = (records[VALIDITY][:, j // 8] >> (j % 8)) & 1 != 0
    return mask


def set_validity(records: np.ndarray, layout: Layout, name: str, valid: np.ndarray | None) -> None:
    """Set (or clear, where ``valid`` is False) the bit of nullable field ``name`` in every
    record, and zero the field's bytes where it is null. ``valid`` None: every record holds one."""
    set_bit(records[VALIDITY], layout, name, valid)
    if valid is not None and not valid.all():
        values = records[name]
        values[~valid] = np.zeros((), values.dtype) if values.ndim == 1 else 0
        records[name] = values


def set_bit(validity: np.ndarray, layout: Layout, name: str, valid: np.ndarray | None) -> None:
    """Set (or clear, where ``valid`` is False) nullable field ``name``'s bit in each row of
    ``validity`` (the ``_validity`` column: n x bytes). ``valid`` None: set in every row."""
    j = layout.nullable_names.index(name)
    col, bit = validity[:, j // 8], np.uint8(1 << (j % 8))
    validity[:, j // 8] = col | bit if valid is None else np.where(valid, col | bit, col & ~bit)


def records_to_arrow(records: np.ndarray, layout: Layout) -> pa.Table:
    """A pyarrow Table of ``layout.arrow_schema`` holding ``records`` (see the module docstring)."""
    import pyarrow as pa  # heavy: only Arrow output converts

    return pa.Table.from_batches([record_batch(records, layout)])


def record_batch(
    columns: np.ndarray | Mapping[str, np.ndarray],
    layout: Layout,
    names: list[str] | None = None,
    planned: BatchPlan | None = None,
) -> pa.RecordBatch:
    """A pyarrow RecordBatch of the fields ``names`` (None: all) of ``columns``: a record
    array of ``layout.dtype``, or a mapping name -> column holding ``_validity`` too when a
    nullable field is among ``names``. The one conversion of decoded records to Arrow
    (scans, exports, to_arrow): a plain number field's column is wrapped zero-copy
    (arrow_numpy.from_numpy), the others go through `column_to_arrow`. ``planned``: their
    `batch_plan`, made once by a caller that makes many batches (the lookup hashes the
    layout: ~1 us a batch)."""
    import pyarrow as pa  # heavy: only Arrow output converts

    from .arrow_numpy import from_numpy

    schema, plan = planned or batch_plan(layout, tuple(layout.names if names is None else names))
    arrays = [
        from_numpy(columns[name], t)
        if f is None
        else column_to_arrow(columns[name], f, validity_of(columns, layout, name))
        for name, t, f in plan
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


#: (schema, [(name, Arrow type, None for a plain number field else the Field)])
BatchPlan = tuple["pa.Schema", list[tuple[str, "pa.DataType", "Field | None"]]]


@functools.lru_cache(maxsize=256)
def batch_plan(layout: Layout, names: tuple[str, ...]) -> BatchPlan:
    """(schema, [(name, Arrow type, None for a plain number field else the Field)]) of a
    `record_batch` of ``names``: looked up once, not per batch (a scan makes one a batch)."""
    plan: list[tuple[str, pa.DataType, Field | None]] = []
    for name in names:
        f = layout.field(name)
        plan.append((name, f.arrow_type, None if f.type in TYPES and not f.nullable else f))
    return schema_of(layout, list(names)), plan


def schema_of(layout: Layout, names: list[str]) -> pa.Schema:
    """The Arrow schema of the fields ``names`` of ``layout`` (all: ``layout.arrow_schema``)."""
    import pyarrow as pa  # heavy: only Arrow output converts

    schema = layout.arrow_schema
    return schema if names == schema.names else pa.schema([schema.field(n) for n in names])


def decoded_names(layout: Layout, names: list[str]) -> list[str]:
    """The columns to decode for the fields ``names``: with ``_validity`` when one of them is
    nullable (its nulls are bits there)."""
    return [*names, VALIDITY] if any(n in layout.nullable_names for n in names) else names


def column_to_arrow(values: np.ndarray, field: Field, valid: np.ndarray | None) -> pa.Array:
    """One field's values (``values``: the numpy column) as an Arrow array of its type."""
    import pyarrow as pa  # heavy: only Arrow output converts

    n, spec, t = len(values), field.spec, field.arrow_type
    mask = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = -1 if mask is not None else 0
    if spec.base == "bool":
        bits = np.packbits(np.ascontiguousarray(values).view(np.uint8) != 0, bitorder="little")
        return pa.Array.from_buffers(t, n, [mask, pa.py_buffer(bits)], nulls)
    if spec.base == "string":
        return _strings(np.ascontiguousarray(values), spec.byte_width, mask, nulls)
    data = pa.py_buffer(np.ascontiguousarray(values).view(np.uint8))  # (datetimes have no buffer format)
    if spec.count is not None:
        child = pa.Array.from_buffers(t.value_type, n * spec.count, [None, data])
        return pa.Array.from_buffers(t, n, [mask], nulls, children=[child])
    return pa.Array.from_buffers(t, n, [mask, data], nulls)


def _strings(values: np.ndarray, width: int, mask: pa.Buffer | None, nulls: int) -> pa.Array:
    """Zero-padded UTF-8 values of ``width`` bytes as an Arrow utf8 array (padding dropped)."""
    import pyarrow as pa  # heavy: only Arrow output converts

    raw = values.view(np.uint8).reshape(len(values), width)
    nonzero = raw != 0
    lengths = np.where(nonzero.any(axis=1), width - np.argmax(nonzero[:, ::-1], axis=1), 0)
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = raw[np.arange(width) < lengths[:, None]]  # row-major: each value's bytes in turn
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(
            pa.string(), len(values), [mask, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)], nulls
        )
    big = pa.Array.from_buffers(
        pa.large_string(), len(values), [mask, pa.py_buffer(offsets), pa.py_buffer(data)], nulls
    )
    return big.cast(pa.string())  # raises: a column over 2 GiB of text does not fit one utf8 array


def _pandas_nullable(field: Field) -> Any:  # a pandas ExtensionDtype
    """The pandas nullable dtype of a nullable number or bool field (None: pyarrow's own)."""
    if not field.nullable or not (field.spec.is_number or field.spec.base == "bool"):
        return None
    import pandas as pd  # only pandas output needs it

    name = {"bool": "boolean", "float16": "Float32"}.get(field.type) or field.type.capitalize().replace("Uint", "UInt")
    return pd.api.types.pandas_dtype(name)


def frame_of_records(records: np.ndarray, layout: Layout, index: Any = None) -> pd.DataFrame:
    """``records`` as a pandas DataFrame (see the module docstring); ``index``: its index."""
    import pandas as pd  # only pandas output needs it

    if layout.numbers_only:  # the plain numeric layouts: pandas takes the record array as it is
        return pd.DataFrame(records, index=index)
    return frame_of_table(records_to_arrow(records, layout), layout, index)


def frame_of_table(table: pa.Table, layout: Layout, index: Any = None) -> pd.DataFrame:
    """A Table of (some of) ``layout``'s fields as a pandas DataFrame: pyarrow's conversion
    (datetimes keep their zone), with pandas' nullable dtypes for nullable number and bool
    fields; ``index``: its index."""
    import pandas as pd  # only pandas output needs it

    fields = {f.name: f for f in getattr(layout, "fields", ())}
    nullable = [n for n in table.column_names if n in fields and _pandas_nullable(fields[n]) is not None]
    if not nullable:
        frame = table.to_pandas()
    else:
        columns = {}
        for name, col in zip(table.column_names, table.columns):
            dtype = _pandas_nullable(fields[name]) if name in nullable else None
            columns[name] = col.to_pandas(types_mapper=None if dtype is None else {col.type: dtype}.get)
        frame = pd.DataFrame(columns, columns=table.column_names)
    if index is not None:
        frame.index = index
    return frame
