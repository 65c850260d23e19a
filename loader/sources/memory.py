"""In-memory records: numpy structured arrays, pandas DataFrames, pyarrow Tables and RecordBatches.

What ``loader.load(obj, DATASET)`` does with such an object (a whole one: shared.py; one
block of an iterable: iterables.py), and why it refuses one:

- a numpy structured array must be records of the layout byte for byte (same field names,
  types and offsets, no padding): it is copied as it is, never converted; the first field
  that differs is named (a LayoutError, from `model.layouts.dtype_mismatch`);
- a DataFrame or an Arrow Table / RecordBatch is converted column by column, by name: a
  missing or extra column is a LayoutError, a column with nulls or a value the field's type
  cannot hold exactly (2**40 into int32, 0.1 into an int, a float64 that float32 rounds) is
  a ConversionError naming the column and the row; a conversion that keeps every value
  (int16 -> int32, a float column of whole numbers -> int64) is done;
- the layout, when neither ``layout=`` nor the dataset gives one, is the object's own: its
  dtype / column types (`layout_of`), named after a declared layout with exactly those
  fields (e.g. ``scidb96``), else ``records``.

pandas is never imported: objects are recognised by their type's module. Pure functions:
nothing here writes anything.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConversionError, LayoutError
from ..model.arrow_numpy import decode_dictionary
from ..model.conversions import convert_exactly
from ..model.layouts import Field, Layout, declared_layout_with, dtype_mismatch, layout_from_dtype

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
        dtype = obj.dtype
    else:
        dtype = np.dtype([(name, _column_dtype(col, what, name, numbers_only=True))
                          for name, col in columns(obj, what).items()])
    return inferred_layout(dtype, what)


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
            raise LayoutError(f"{what} has no column {f.name!r} (layout {layout.name!r} has "
                              f"{', '.join(layout.names)})")
    for name in cols:
        if name not in layout.names:
            raise LayoutError(f"{what}: column {name!r} is not a field of layout {layout.name!r}; select the "
                              f"layout's columns ({', '.join(layout.names)}) or use a layout that has it")


def convert_into(out: np.ndarray, obj, layout: Layout, what: str) -> None:
    """Write the records of table ``obj`` into ``out`` (``len(obj)`` records of the layout's
    dtype), converting each column to its field's type (ConversionError if a value would
    change or is null)."""
    check_columns(obj, layout, what)
    cols = columns(obj, what)
    for f in layout.fields:
        out[f.name] = exact_values(column_values(cols[f.name], what, f.name), f, what)


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


def column_values(col, what: str, name: str) -> np.ndarray:
    """A column's values as numpy, nulls refused (a float NaN of a numpy column is a value)."""
    _column_dtype(col, what, name, numbers_only=True)
    if is_arrow_column(col):
        nulls = col.null_count
    else:
        numpy_type = getattr(col.dtype, "numpy_dtype", None)  # a pandas extension dtype (Int64, ...)
        nulls = int(col.isna().sum()) if numpy_type is not None else 0
    if nulls:
        raise ConversionError(f"{what}: column {name!r} has {nulls:,} null value(s); records cannot hold nulls: "
                              "fill them (e.g. fillna) or drop those rows")
    if is_arrow_column(col):
        return col.to_numpy(zero_copy_only=False)
    return col.to_numpy(dtype=numpy_type)


def is_arrow_column(col) -> bool:
    return _package(col) == "pyarrow"


def exact_values(values: np.ndarray, field: Field, what: str, first_row: int = 0) -> np.ndarray:
    """``values`` as the field's type, or ConversionError naming the first row whose value
    the conversion would change (``first_row``: the row number of ``values[0]``)."""
    converted, row = convert_exactly(values, np.dtype(field.type))
    if row is not None:
        raise ConversionError(
            f"{what}: column {field.name!r}, row {first_row + row:,}: {values[row].item()!r} cannot be held exactly "
            f"by {field.type} (converting the column from {values.dtype} would change it); convert the column "
            f"yourself, or use a layout whose field {field.name!r} has a type that "
            "holds it (e.g. int64 for integers beyond 2**53)")
    return converted


def _column_dtype(col, what: str, name: str, numbers_only: bool = False) -> np.dtype:
    """The numpy type of a column (a LayoutError for other than numbers when ``numbers_only``)."""
    try:
        if is_arrow_column(col):
            dtype = np.dtype(col.type.to_pandas_dtype())
        else:
            dtype = np.dtype(getattr(col.dtype, "numpy_dtype", col.dtype))
    except (NotImplementedError, TypeError):
        dtype = np.dtype(object)
    if numbers_only and dtype.kind not in "biuf":
        kind = f"Arrow type {col.type}" if is_arrow_column(col) else f"dtype {col.dtype}"
        raise LayoutError(f"{what}: column {name!r} has {kind}, not numbers; convert it to a number type")
    return dtype
