"""In-memory records: numpy structured arrays, pandas DataFrames, pyarrow Tables and RecordBatches.

What ``loader.load(obj, DATASET)`` does with such an object (a whole one: shared.py; one
block of an iterable: iterables.py), and why it refuses one:

- a numpy structured array must be records of the layout byte for byte (same field names,
  types and offsets, no padding): it is copied as it is, never converted; the first field
  that differs is named (a LayoutError, from `model.layouts.dtype_mismatch`);
- a DataFrame or an Arrow Table / RecordBatch is converted column by column, by name
  (model/conversions.py `field_values`): a missing or extra column is a LayoutError, a
  column of a type that cannot become its field's too; nulls (pandas NaT / NA / None,
  Arrow nulls) into a field that is not nullable, or a value the field's type cannot hold
  exactly (2**40 into int32, 0.1 into an int, a float64 that float32 rounds, 1 ns into
  datetime64[us], 9 bytes into bytes[8]) is a ConversionError naming the column and the
  row; a conversion that keeps every value (int16 -> int32, a float column of whole
  numbers -> int64, s -> ns) is done;
- the layout, when neither ``layout=`` nor the dataset gives one, is the object's own: its
  dtype / column types (`layout_of`: numbers, bool, datetimes with their zone,
  durations, bytes and text as bytes[N] / string[N] of the longest value, lists of k
  numbers; a column holding nulls is nullable), named after a declared layout with
  exactly those fields (e.g. ``scidb96``), else ``records``.

pandas is never imported: objects are recognised by their type's module. Pure functions:
nothing here writes anything.
"""

from __future__ import annotations

import numpy as np

from ..errors import LayoutError
from ..model.arrow_numpy import decode_dictionary
from ..model.arrow_records import set_validity
from ..model.conversions import column_field, field_values
from ..model.layouts import (
    VALIDITY,
    Layout,
    declared_layout_with,
    dtype_mismatch,
    known_layout,
    layout_from_dtype,
)

#: the name of a layout inferred from an object whose fields match no declared layout
INFERRED_NAME = "records"


def type_name(obj) -> str:
    """``numpy.ndarray``, ``pandas.DataFrame``, ``pyarrow.Table``, ``list``: how messages name
    an object's type."""
    package = _package(obj)
    return type(obj).__name__ if package == "builtins" else f"{package}.{type(obj).__name__}"


def _package(obj) -> str:
    return type(obj).__module__.split(".")[0]


def is_array(obj) -> bool:
    return isinstance(obj, np.ndarray)


def is_frame(obj) -> bool:
    """A pandas DataFrame (recognised without importing pandas)."""
    return _package(obj) == "pandas" and type(obj).__name__ == "DataFrame"


def is_table(obj) -> bool:
    """A pyarrow Table or RecordBatch: columns of equal length."""
    return _package(obj) == "pyarrow" and type(obj).__name__ in ("Table", "RecordBatch")


def is_block(obj) -> bool:
    """An object that holds whole records: an array, a DataFrame, a Table or RecordBatch."""
    return is_array(obj) or is_frame(obj) or is_table(obj)


def record_count(obj) -> int:
    return obj.size if is_array(obj) else len(obj)


# --- layouts --------------------------------------------------------------------------------


def layout_of(obj, what: str) -> Layout:
    """The layout of an array's dtype or a table's column types (see the module docstring)."""
    if is_array(obj):
        return inferred_layout(obj.dtype, what)
    fields = tuple(column_field(name, col, what) for name, col in columns(obj, what).items())
    try:
        return known_layout(Layout(INFERRED_NAME, fields))
    except LayoutError as e:
        raise LayoutError(f"{what}: {e}") from None


def schema_layout(schema, what: str) -> Layout:
    """The layout of an Arrow schema (a RecordBatchReader's, before any batch is read)."""
    return layout_of(schema.empty_table(), what)


def inferred_layout(dtype: np.dtype, what: str) -> Layout:
    """A declared layout with exactly ``dtype``'s fields, else one named INFERRED_NAME (a
    LayoutError says why there is none, after ``what`` when given)."""
    try:
        return declared_layout_with(dtype) or layout_from_dtype(dtype, INFERRED_NAME)
    except LayoutError as e:
        raise LayoutError(f"{what}: {e}" if what else str(e)) from None


# --- checking and converting ----------------------------------------------------------------


def check_array(arr: np.ndarray, layout: Layout, what: str) -> None:
    """LayoutError unless ``arr`` holds records of ``layout`` byte for byte."""
    why = dtype_mismatch(arr.dtype, layout)
    if why is not None:
        raise LayoutError(f"{what} does not hold records of layout {layout.name!r}: {why}")


def check_columns(obj, layout: Layout, what: str) -> None:
    """LayoutError unless the table has exactly the layout's columns (any order)."""
    cols = columns(obj, what)
    for f in layout.fields:
        if f.name not in cols:
            raise LayoutError(f"{what} has no column {f.name!r} (layout {layout.name!r} has {', '.join(layout.names)})")
    for name in cols:
        if name not in layout.names:
            raise LayoutError(
                f"{what}: column {name!r} is not a field of layout {layout.name!r}; select the "
                f"layout's columns ({', '.join(layout.names)}) or use a layout that has it"
            )


def convert_into(out: np.ndarray, obj, layout: Layout, what: str) -> None:
    """Write the records of table ``obj`` into ``out`` (``len(obj)`` records of the layout's
    dtype), converting each column to its field's type (ConversionError if a value would
    change or is null)."""
    check_columns(obj, layout, what)
    cols = columns(obj, what)
    if layout.validity_bytes:
        out[VALIDITY] = 0
    for f in layout.fields:
        out[f.name], valid = field_values(cols[f.name], f, what)
        if f.nullable:
            set_validity(out, layout, f.name, valid)


def records_of(block, layout: Layout, what: str) -> np.ndarray:
    """A block (array, DataFrame, Table, RecordBatch) as a C-contiguous array of the layout's records."""
    if is_array(block):
        check_array(block, layout, what)
        return np.ascontiguousarray(block.reshape(-1))
    out = np.empty(len(block), dtype=layout.dtype)
    convert_into(out, block, layout, what)
    return out


def columns(obj, what: str) -> dict:
    """Column name -> column (pandas Series or Arrow array) of a DataFrame / Table."""
    names = [str(c) for c in obj.columns] if is_frame(obj) else list(obj.schema.names)
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise LayoutError(f"{what} has two columns named {dup!r}; rename one")
    if is_frame(obj):
        return {str(c): _decode_categories(obj[c]) for c in obj.columns}
    return {name: decode_dictionary(obj.column(i)) for i, name in enumerate(names)}


def _decode_categories(col):
    """A pandas categorical column without nulls as its values (as an Arrow dictionary is
    decoded); any other column as it is."""
    if str(col.dtype) != "category" or col.isna().any():
        return col
    return col.astype(col.cat.categories.dtype)
