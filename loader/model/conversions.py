"""Exact conversions of number columns into a layout field's type: every value kept, or refused.

numpy's "safe" casting is about types, not values, and calls int64 -> float64 safe although
2**53 + 1 becomes 2**53. Here a conversion is done only when every value comes through
unchanged: `casts_exactly` says when the types alone guarantee it (same kind widening, small
integers into floats whose mantissa holds them); otherwise `convert_exactly` converts and
compares value by value, and returns the first row whose value would change:

- integers -> integers: the values outside the target's range (negatives into unsigned);
- floats -> integers: fractions, NaN, infinities and values outside the range;
- anything -> floats: whatever does not convert back to itself (int64 beyond 2**53 into
  float64, int32 beyond 2**24 into float32, a float64 that float32 rounds); NaN stays NaN.

Pure functions over numpy arrays: no I/O. The callers (sources/memory.py, sources/typed.py)
turn a changed row into a ConversionError naming the column, the row and the value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConversionError
from .field_types import MAX_WIDTH, NUMBERS, UNITS, type_of_numpy

if TYPE_CHECKING:
    import pyarrow as pa

    from .layouts import Field


def casts_exactly(src: np.dtype, dst: np.dtype) -> bool:
    """Does every value of type ``src`` convert to ``dst`` unchanged (the types alone say so)?"""
    src, dst = np.dtype(src), np.dtype(dst)
    if src == dst:
        return True
    if not np.can_cast(src, dst, "safe"):
        return False
    if src.kind in "iu" and dst.kind == "f":  # numpy calls int64 -> float64 safe: it is not
        bits = src.itemsize * 8 - (src.kind == "i")
        return bits <= np.finfo(dst).nmant + 1
    return True


def convert_exactly(values: np.ndarray, dst: np.dtype) -> tuple[np.ndarray, int | None]:
    """(``values`` as ``dst``, None), or (anything, the first row whose value the
    conversion would change)."""
    dst = np.dtype(dst)
    if casts_exactly(values.dtype, dst):
        return values.astype(dst, copy=False), None
    with np.errstate(all="ignore"):
        converted = values.astype(dst)
        changed = _changed(values, converted, dst)
    if changed.any():
        return converted, int(np.argmax(changed))
    return converted, None


def _changed(values: np.ndarray, converted: np.ndarray, dst: np.dtype) -> np.ndarray:
    """Mask of the values that ``converted`` does not hold exactly."""
    if dst.kind in "iu" and values.dtype.kind in "biu":
        info = np.iinfo(dst)  # integers to integers: exactly the ones out of range
        return (values < info.min) | (values > info.max)
    if dst.kind in "iu":  # floats to integers: whole, and within [min, max + 1) (powers of two: exact)
        info = np.iinfo(dst)
        inside = (values >= float(info.min)) & (values < float(info.max) + 1)
        outside: np.ndarray = ~(inside & (np.trunc(values) == values))
        return outside
    back = converted.astype(values.dtype)  # to floats: whatever does not come back unchanged
    same = back == values
    if values.dtype.kind == "f":
        same |= np.isnan(back) & np.isnan(values)
    if values.dtype.kind in "iu":  # 2**63 - 1 -> 2.0**63, which need not convert back to a different integer
        same &= converted < float(np.iinfo(values.dtype).max) + 1
    changed: np.ndarray = ~same
    return changed


# --- any column into a layout field (numbers, times, bool, bytes, strings, arrays, nulls) ----------

_UNIT_SCALE = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_NAT = np.iinfo(np.int64).min


def field_values(col: Any, field: Field, what: str, first_row: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """(values of ``field``'s dtype, mask of the rows that hold a value or None when all do)
    of a column: a numpy array, an Arrow Array / ChunkedArray, or a pandas Series.

    Every value converts exactly or not at all: a ConversionError (exit 1) names ``what``,
    the column, the first row that would change (``first_row``: the row of ``col[0]``) and
    its value; a null into a field that is not nullable likewise; a column of a type that
    cannot become the field's at all is a LayoutError (exit 2). pandas NaT / NA / None are
    nulls; a NaN of a float column is a value, as in numpy."""
    package = type(col).__module__.split(".")[0]
    if package == "pandas":
        col = _pandas_column(col, field, what)
    if isinstance(col, np.ndarray):
        if col.dtype.kind not in "UO":
            return _from_numpy(col, field, what, first_row), None
        col = _arrow_of(col, field, what)
    return _from_arrow(col, field, what, first_row)


def _pandas_column(col: Any, field: Field, what: str) -> Any:  # numpy or Arrow
    """A pandas Series as numpy (plain number and bool columns: NaN stays a value) or Arrow
    (everything else: datetimes with or without a zone, nullable Int64 / boolean, text)."""
    dtype = col.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
        return col.to_numpy()
    return _arrow_of(col, field, what)


def _arrow_of(values: Any, field: Field, what: str) -> pa.Array:
    import pyarrow as pa  # heavy: only columns of text, objects or pandas extension types get here

    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        raise ConversionError(
            f"{what}: column {field.name!r} holds values of no single type ({e}); make it one "
            f"type that {field.type} holds"
        ) from None


def _from_numpy(values: np.ndarray, field: Field, what: str, first_row: int) -> np.ndarray:
    spec = field.spec
    kind = values.dtype.kind
    if spec.base in ("datetime64", "timedelta64"):
        want = "M" if spec.base == "datetime64" else "m"
        if kind != want:
            raise _wrong_type(field, what, str(values.dtype))
        unit = np.datetime_data(values.dtype)[0]
        if unit not in _UNIT_SCALE:
            raise _wrong_type(field, what, str(values.dtype))
        ints = _time_units(values.view(np.int64), unit, spec.time_unit, field, what, first_row)
        return ints.view(field.dtype)
    if spec.base in ("bytes", "string"):
        if kind != "S":
            raise _wrong_type(field, what, str(values.dtype))
        return _fixed_bytes_from_numpy(values, field, what, first_row)
    if spec.count is not None:
        if values.ndim != 2 or values.shape[1] != spec.count or kind not in "biuf":
            raise _wrong_type(
                field, what, f"{values.dtype.base} x {values.shape[1:]}" if values.ndim > 1 else str(values.dtype)
            )
        one = np.dtype(spec.scalar_code)
        flat, row = convert_exactly(values.reshape(-1), one)
        if row is not None:
            r = row // spec.count
            raise _inexact(field, what, first_row + r, values[r].tolist(), f"{values.dtype.base} values")
        return flat.reshape(len(values), spec.count)
    if kind not in "biuf" or values.ndim != 1:
        raise _wrong_type(field, what, str(values.dtype))
    converted, row = convert_exactly(values, field.dtype)
    if row is not None:
        raise _inexact(field, what, first_row + row, values[row].item(), str(values.dtype))
    return converted


def _time_units(ints: np.ndarray, src: str, dst: str, field: Field, what: str, first_row: int) -> np.ndarray:
    """int64 counts of ``src`` units as counts of ``dst`` units, exactly (NaT stays NaT)."""
    if src == dst:
        return ints
    a, b = _UNIT_SCALE[src], _UNIT_SCALE[dst]
    nat = ints == _NAT
    if b > a:  # finer: every value must fit int64 after scaling
        mul = b // a
        limit = np.iinfo(np.int64).max // mul
        bad = ((ints > limit) | (ints < -limit)) & ~nat
        why = f"{dst} beyond the int64 range"
        out = np.where(nat, ints, ints * mul) if not bad.any() else None
    else:
        div = a // b
        bad = (ints % div != 0) & ~nat
        why = f"a fraction of a {dst}"
        out = np.where(nat, ints, ints // div) if not bad.any() else None
    if out is None:
        row = int(np.argmax(bad))
        kind = "M8" if field.spec.base == "datetime64" else "m8"
        raise _inexact(
            field,
            what,
            first_row + row,
            str(ints[row : row + 1].view(f"{kind}[{src}]")[0]),
            f"{src} ({why})",
            fix=f"declare the field as {field.spec.base}[{src}]",
        )
    return out


def _fixed_bytes_from_numpy(values: np.ndarray, field: Field, what: str, first_row: int) -> np.ndarray:
    width, n = field.spec.byte_width, len(values)
    have = values.dtype.itemsize
    if have > width:
        raw = np.ascontiguousarray(values).view(np.uint8).reshape(n, have)
        long = raw[:, width:].any(axis=1)
        if long.any():
            row = int(np.argmax(long))
            raise _too_long(field, what, first_row + row, values[row])
    out = values.astype(f"S{width}")
    if field.spec.base == "string":
        _check_utf8(out, field, what, first_row)
    return out


def _check_utf8(values: np.ndarray, field: Field, what: str, first_row: int) -> None:
    """ConversionError naming the first value of a string field that is not UTF-8."""
    import pyarrow as pa  # heavy: only a string field of bytes checks its values

    try:
        pa.Array.from_buffers(
            pa.binary(field.spec.width), len(values), [None, pa.py_buffer(np.ascontiguousarray(values))]
        ).cast(pa.string())
        return
    except pa.ArrowInvalid:
        pass
    for row, v in enumerate(values.tolist()):
        try:
            v.decode("utf-8")
        except UnicodeDecodeError:
            raise ConversionError(
                f"{what}: column {field.name!r}, row {first_row + row:,}: {v!r} is not UTF-8 text, "
                f"which a {field.type} field holds; use bytes[{field.spec.width}] for raw bytes, "
                "or decode the column first"
            ) from None


def _from_arrow(col: Any, field: Field, what: str, first_row: int) -> tuple[np.ndarray, np.ndarray | None]:
    import pyarrow as pa  # heavy: only Arrow columns get here
    import pyarrow.compute as pc

    from .arrow_numpy import decode_dictionary

    col = decode_dictionary(col)
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_null(arr.type):  # no value at all (e.g. an empty or all-None pandas column)
        arr = pa.nulls(len(arr), field.arrow_type)
    t, spec, n = arr.type, field.spec, len(arr)
    valid = None
    if arr.null_count:
        mask = arr.is_valid().to_numpy(zero_copy_only=False)
        if not field.nullable:
            row = int(np.argmin(mask))
            raise ConversionError(
                f"{what}: column {field.name!r}, row {first_row + row:,}: null, but field {field.name!r} is not "
                "nullable; fill or drop the nulls (fillna, pyarrow.compute.fill_null), or declare it nullable: "
                f'{field.name} = {{ type = "{field.type}", nullable = true }}'
            )
        valid = mask
    if spec.base in ("datetime64", "timedelta64"):
        is_it = pa.types.is_timestamp(t) if spec.base == "datetime64" else pa.types.is_duration(t)
        if not is_it:
            raise _wrong_type(field, what, str(t))
        ints = _filled(arr.cast(pa.int64()), 0).to_numpy()
        out = _time_units(ints, t.unit, spec.time_unit, field, what, first_row)
        return out.view(field.dtype), valid
    if spec.base in ("bytes", "string"):
        return _fixed_bytes_from_arrow(arr, field, what, first_row, valid), valid
    if spec.count is not None:
        if not (pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t)):
            raise _wrong_type(field, what, str(t))
        lengths = _filled(pc.list_value_length(arr), spec.count).to_numpy(zero_copy_only=False)
        if (lengths != spec.count).any():
            row = int(np.argmax(lengths != spec.count))
            raise _inexact(
                field,
                what,
                first_row + row,
                arr[row].as_py(),
                f"a list of {lengths[row]}",
                fix=f"give every row {spec.count} values",
            )
        rows = np.arange(n) if valid is None else np.flatnonzero(valid)
        flat = (arr if valid is None else arr.filter(pa.array(valid))).flatten()  # the lists that are there
        if flat.null_count:
            row = int(rows[int(np.argmin(flat.is_valid().to_numpy(zero_copy_only=False))) // spec.count])
            raise ConversionError(
                f"{what}: column {field.name!r}, row {first_row + row:,}: a list element is null; "
                f"{field.type} holds numbers: fill the elements"
            )
        if not (pa.types.is_integer(flat.type) or pa.types.is_floating(flat.type)):
            raise _wrong_type(field, what, str(t))
        values = np.zeros((n, spec.count), flat.type.to_pandas_dtype())
        values[rows] = flat.to_numpy(zero_copy_only=False).reshape(len(rows), spec.count)
        return _from_numpy(values, field, what, first_row), valid
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        raise _wrong_type(field, what, str(t))
    values = _filled(arr, False if pa.types.is_boolean(t) else 0).to_numpy(zero_copy_only=False)
    return _from_numpy(values, field, what, first_row), valid


def _filled(arr: pa.Array, value: object) -> pa.Array:
    """``arr`` with its nulls replaced by ``value``."""
    return arr.fill_null(value) if arr.null_count else arr


def _fixed_bytes_from_arrow(
    arr: pa.Array, field: Field, what: str, first_row: int, valid: np.ndarray | None
) -> np.ndarray:
    """binary / string / fixed_size_binary values zero-padded to the field's width."""
    import pyarrow as pa  # heavy: only Arrow columns get here
    import pyarrow.compute as pc

    t, width, n = arr.type, field.spec.byte_width, len(arr)
    text = pa.types.is_string(t) or pa.types.is_large_string(t)
    if not (text or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)):
        raise _wrong_type(field, what, str(t))
    if pa.types.is_fixed_size_binary(t):
        arr = arr.cast(pa.binary())
    arr = _filled(arr, "" if text else b"")
    lengths = pc.binary_length(arr).to_numpy(zero_copy_only=False).astype(np.int64)
    long = lengths > width
    if long.any():
        row = int(np.argmax(long))
        raise _too_long(field, what, first_row + row, arr[row].as_py())
    if not pa.types.is_large_string(arr.type) and not pa.types.is_large_binary(arr.type):
        arr = arr.cast(pa.large_string() if text else pa.large_binary())
    offsets = np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    out = np.zeros((n, width), np.uint8)
    out[np.arange(width) < lengths[:, None]] = data[offsets[0] : offsets[-1]]
    values = out.view(f"S{width}").reshape(n)
    if field.spec.base == "string":
        if not text:
            _check_utf8(values, field, what, first_row)
        ends = out[np.arange(n), np.maximum(lengths - 1, 0)] == 0
        nul = ends & (lengths > 0)
        if nul.any():
            row = int(np.argmax(nul))
            raise ConversionError(
                f"{what}: column {field.name!r}, row {first_row + row:,}: {arr[row].as_py()!r} ends "
                f"in a NUL character, which a {field.type} field (zero-padded) cannot keep; strip "
                f"it, or use bytes[{width}]"
            )
    return values


def _wrong_type(field: Field, what: str, have: str) -> Exception:
    from ..errors import LayoutError

    return LayoutError(
        f"{what}: column {field.name!r} is {have}, which cannot become field {field.name!r} "
        f"({field.type}); convert the column, or use a layout whose field {field.name!r} has its type"
    )


def _inexact(field: Field, what: str, row: int, value: object, have: str, fix: str | None = None) -> ConversionError:
    fix = fix or (
        f"convert the column yourself, or use a layout whose field {field.name!r} has a type that holds "
        "it (e.g. int64 for integers beyond 2**53)"
    )
    return ConversionError(
        f"{what}: column {field.name!r}, row {row:,}: {value!r} cannot be held exactly by "
        f"{field.type} (converting the column from {have} would change it); {fix}"
    )


def _too_long(field: Field, what: str, row: int, value: str | bytes | np.generic) -> ConversionError:
    value = value.item() if isinstance(value, np.generic) else value
    size = len(value.encode() if isinstance(value, str) else value)
    return ConversionError(
        f"{what}: column {field.name!r}, row {row:,}: {value!r} is {size} bytes, longer than "
        f"{field.type} holds; use a layout with {field.spec.base}[{size}] or more, or shorten "
        "the values"
    )


def column_field(name: str, col: Any, what: str) -> Field:
    """The layout field a column of an in-memory table holds (a numpy array, a pandas Series,
    an Arrow array): its own type (text and binary: bytes[N] / string[N] of the longest
    value), nullable when it holds a null; LayoutError naming the column if no type holds it."""
    from .layouts import Field, parse_type

    if type(col).__module__.split(".")[0] == "pandas":
        col = _pandas_column(col, Field(name, "int8"), what)
    if isinstance(col, np.ndarray) and col.dtype.kind not in "UO":
        own = type_of_numpy(col.dtype if col.ndim == 1 else np.dtype((col.dtype, col.shape[1:])))
        if own is None:
            raise _no_type(name, what, str(col.dtype))
        return Field(name, own)
    if isinstance(col, np.ndarray):
        col = _arrow_of(col, Field(name, "int8"), what)
    import pyarrow.compute as pc

    from .arrow_numpy import decode_dictionary

    col = decode_dictionary(col)
    t = col.type
    found = arrow_field_type(t)
    if isinstance(found, str) and len(col) == col.null_count:  # nothing to measure (e.g. a stream's schema)
        from ..errors import LayoutError

        want = f"{found}[N]" if found in ("string", "bytes") else f"{found[:-2]}[k]"
        raise LayoutError(
            f"{what}: column {name!r} is of variable length ({t}) and holds no value to measure; "
            f'pass the layout (layout=) with a field {name} = "{want}"'
        )
    if found in ("string", "bytes"):
        longest = pc.max(pc.binary_length(col)).as_py() or 1
        found = f"{found}[{longest}]"
    elif isinstance(found, str):  # a list column: T[k] when every list holds k
        k = uniform_length(col)
        found = None if k is None else f"{found[:-2]}[{k}]"
    if found is None:
        raise _no_type(name, what, f"Arrow type {t}")
    type_name, tz = found if isinstance(found, tuple) else (found, None)
    try:
        parse_type(type_name)
    except ValueError as e:
        raise _no_type(name, what, f"{t} ({e})") from None
    return Field(name, type_name, bool(col.null_count), tz)


def arrow_field_type(t: pa.DataType) -> tuple[str, str | None] | str | None:
    """(layout type, tz) of an Arrow type, ``string`` / ``bytes`` for text / binary of variable
    length, None when no layout type holds it."""
    import pyarrow as pa  # heavy: only Arrow columns get here

    if pa.types.is_integer(t) or pa.types.is_floating(t):
        found = np.dtype(t.to_pandas_dtype()).name
        return (found, None) if found in NUMBERS else None
    if pa.types.is_boolean(t):
        return "bool", None
    if pa.types.is_timestamp(t) and t.unit in UNITS:
        return f"datetime64[{t.unit}]", t.tz
    if pa.types.is_duration(t) and t.unit in UNITS:
        return f"timedelta64[{t.unit}]", None
    if pa.types.is_fixed_size_binary(t) and 1 <= t.byte_width <= MAX_WIDTH:
        return f"bytes[{t.byte_width}]", None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_fixed_size_list(t) and 1 <= t.list_size <= MAX_WIDTH:
        inner = arrow_field_type(t.value_type)
        if inner is not None and inner[0] in NUMBERS:
            return f"{inner[0]}[{t.list_size}]", None
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = arrow_field_type(t.value_type)
        if inner is not None and inner[0] in NUMBERS:
            return f"{inner[0]}[]"  # lists of variable length: T[k] when each holds k
    return None


def uniform_length(col: Any) -> int | None:
    """The length every list of an Arrow list column has (nulls aside), None if they differ."""
    import pyarrow.compute as pc  # heavy: only Arrow list columns get here

    lengths = pc.unique(pc.list_value_length(col).drop_null()).to_pylist()
    return lengths[0] if len(lengths) == 1 and 1 <= lengths[0] <= MAX_WIDTH else None


def _no_type(name: str, what: str, have: str) -> Exception:
    from ..errors import LayoutError

    return LayoutError(
        f"{what}: column {name!r} has {have}, which no layout type holds; convert it to a number, "
        "bool, datetime, duration, bytes or text column, or give layout= with its field"
    )
