"""The types a layout field may have, and what each is in numpy, Arrow and Cap'n Proto.

A type is named by a string, as in a layout's TOML file:

    int8 .. int64, uint8 .. uint64   integers                 numpy <i1..<u8
    float16, float32, float64        IEEE floats              numpy <f2, <f4, <f8
    bool                             one byte, 0 or 1         numpy ?
    datetime64[s|ms|us|ns]           an instant: int64 of the unit since 1970-01-01 (UTC)
                                                              numpy <M8[unit]
    timedelta64[s|ms|us|ns]          a duration: int64 of the unit   numpy <m8[unit]
    bytes[N]                         N raw bytes              numpy SN
    string[N]                        UTF-8 text of at most N bytes, zero-padded  numpy SN
    T[k]                             k packed values of a number type T   numpy (T, (k,))

Every type has a fixed size, so records stay fixed-size and packed. A ``string[N]`` value
is its UTF-8 bytes then zero bytes up to N: text ending in NUL characters loses them
(it is read back without them), exactly as numpy's ``S`` dtype does.

`parse_type` is the one parser (cached: a layout's fields are looked up per read); a
`FieldType` holds everything the views need. Pure: no I/O; numpy and pyarrow are
imported only by the methods that build their objects.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .vocab import TIME_UNITS

if TYPE_CHECKING:
    import pyarrow as pa
    from numpy.typing import DTypeLike

#: number type name -> (numpy code, size in bytes, Cap'n Proto type, is integer)
TYPES: dict[str, tuple[str, int, str, bool]] = {
    "int8": ("<i1", 1, "Int8", True),
    "int16": ("<i2", 2, "Int16", True),
    "int32": ("<i4", 4, "Int32", True),
    "int64": ("<i8", 8, "Int64", True),
    "uint8": ("<u1", 1, "UInt8", True),
    "uint16": ("<u2", 2, "UInt16", True),
    "uint32": ("<u4", 4, "UInt32", True),
    "uint64": ("<u8", 8, "UInt64", True),
    "float32": ("<f4", 4, "Float32", False),
    "float64": ("<f8", 8, "Float64", False),
}
#: number types beyond TYPES (Cap'n Proto has no 16-bit float: its bits are a UInt16)
NUMBERS: dict[str, tuple[str, int, str, bool]] = {**TYPES, "float16": ("<f2", 2, "UInt16", False)}
UNITS = TIME_UNITS
#: largest N of bytes[N] / string[N] and k of T[k]
MAX_WIDTH = 4096
#: what a field may be, for messages
TYPE_HELP = (
    "int8..int64, uint8..uint64, float16, float32, float64, bool, datetime64[s|ms|us|ns], "
    "timedelta64[s|ms|us|ns], bytes[N], string[N], or a number type with [k] (e.g. float32[3])"
)

_TYPE_RE = re.compile(r"^([a-z0-9]+)(?:\[\s*([^\]]*?)\s*\])?$")


class TypeSpecError(ValueError):
    """A type string that names no field type (the caller adds the file and field)."""


@dataclass(frozen=True)
class FieldType:
    """One parsed field type: ``base`` (a number type name, bool, datetime64, timedelta64,
    bytes, string), ``unit`` (datetime64/timedelta64), ``width`` (N of bytes/string) and
    ``count`` (k of a number array, else None)."""

    name: str
    base: str
    unit: str | None = None
    width: int | None = None
    count: int | None = None

    # --- numpy ------------------------------------------------------------------------------
    @property
    def scalar_code(self) -> str:
        """numpy code of one value (of one element for T[k])."""
        if self.base in NUMBERS:
            return NUMBERS[self.base][0]
        if self.base == "bool":
            return "|b1"
        if self.base == "datetime64":
            return f"<M8[{self.unit}]"
        if self.base == "timedelta64":
            return f"<m8[{self.unit}]"
        return f"|S{self.width}"

    @property
    def numpy_format(self) -> str | tuple[str, tuple[int]]:
        """The format of this field in a structured dtype: a code, or (code, (k,))."""
        return self.scalar_code if self.count is None else (self.scalar_code, (self.count,))

    @property
    def size(self) -> int:
        """Bytes of one value (packed)."""
        one = (
            self.byte_width
            if self.base in ("bytes", "string")
            else (
                1 if self.base == "bool" else 8 if self.base in ("datetime64", "timedelta64") else NUMBERS[self.base][1]
            )
        )
        return one * (self.count or 1)

    @property
    def is_integer(self) -> bool:
        """A single integer (what a dimension of an array may be)."""
        return self.count is None and self.base in TYPES and TYPES[self.base][3]

    @property
    def is_number(self) -> bool:
        """A single number of NUMBERS (whose values convert into one another when exact)."""
        return self.count is None and self.base in NUMBERS

    @property
    def storage_code(self) -> str:
        """numpy code of the bytes one element is stored as: an integer for time types and
        bool, u1 per byte of bytes/string, the number's own code otherwise."""
        if self.base in ("datetime64", "timedelta64"):
            return "<i8"
        if self.base in ("bool", "bytes", "string"):
            return "|u1"
        return NUMBERS[self.base][0]

    @property
    def elements(self) -> int:
        """Stored elements of one value: k of T[k], N of bytes/string, else 1."""
        return self.byte_width if self.base in ("bytes", "string") else (self.count or 1)

    @property
    def time_unit(self) -> str:
        """The unit of datetime64[unit] / timedelta64[unit] (the parser sets it for those only)."""
        if self.unit is None:
            raise TypeError(f"type {self.name!r} has no unit: it is not datetime64 or timedelta64")
        return self.unit

    @property
    def byte_width(self) -> int:
        """N of bytes[N] / string[N] (the parser sets it for those types only)."""
        if self.width is None:
            raise TypeError(f"type {self.name!r} has no width: it is not bytes[N] or string[N]")
        return self.width

    # --- Arrow ------------------------------------------------------------------------------
    def arrow_type(self, tz: str | None = None) -> pa.DataType:
        import pyarrow as pa  # heavy: only Arrow paths need a field's Arrow type

        if self.base == "bool":
            return pa.bool_()
        if self.base == "datetime64":
            return pa.timestamp(self.unit, tz)
        if self.base == "timedelta64":
            return pa.duration(self.unit)
        if self.base == "bytes":
            return pa.binary(self.width)
        if self.base == "string":
            return pa.string()
        import numpy as np

        one = {"float16": pa.float16()}.get(self.base) or pa.from_numpy_dtype(np.dtype(NUMBERS[self.base][0]))
        return one if self.count is None else pa.list_(one, self.count)

    # --- Cap'n Proto --------------------------------------------------------------------------
    @property
    def capnp_type(self) -> str:
        """Cap'n Proto type of one stored element (a time is Int64, a byte UInt8, bool Bool)."""
        if self.base in ("datetime64", "timedelta64"):
            return "Int64"
        if self.base == "bool":
            return "Bool"
        if self.base in ("bytes", "string"):
            return "UInt8"
        return NUMBERS[self.base][2]


@functools.cache
def parse_type(text: str) -> FieldType:
    """The FieldType a type string names; TypeSpecError saying why not and what would be."""
    if not isinstance(text, str):
        raise TypeSpecError(f'a type is a string such as "int32" or "datetime64[ns]", not {text!r}')
    found = _TYPE_RE.match(text.strip())
    if found is None:
        raise TypeSpecError(f"type {text!r} is not a type name; use one of {TYPE_HELP}")
    base, arg = found.group(1), found.group(2)
    if base in ("datetime64", "timedelta64"):
        if arg not in UNITS:
            raise TypeSpecError(f"type {text!r} needs a unit: {base}[s], [ms], [us] or [ns]")
        return FieldType(f"{base}[{arg}]", base, unit=arg)
    if base in ("bytes", "string"):
        n = _width(text, arg, f"{base}[N] needs a byte count N, e.g. {base}[8]")
        return FieldType(f"{base}[{n}]", base, width=n)
    if base == "bool":
        if arg is not None:
            raise TypeSpecError(
                f"type {text!r}: arrays are of number types only; declare one bool field per flag "
                "or a uint8/uint64 bit set"
            )
        return FieldType("bool", "bool")
    if base in NUMBERS:
        if arg is None:
            return FieldType(base, base)
        k = _width(text, arg, f"{base}[k] needs an element count k, e.g. {base}[3]")
        return FieldType(f"{base}[{k}]", base, count=k)
    raise TypeSpecError(f"unknown type {text!r}; use one of {TYPE_HELP}")


def _width(text: str, arg: str | None, need: str) -> int:
    if arg is None or not arg.isdigit():
        raise TypeSpecError(f"type {text!r}: {need}")
    n = int(arg)
    if not 1 <= n <= MAX_WIDTH:
        raise TypeSpecError(f"type {text!r}: the count must be 1..{MAX_WIDTH}, not {n}")
    return n


def type_of_numpy(ftype: DTypeLike) -> str | None:
    """The type name of one numpy field type (its kind and size, any byte order), or None
    when no layout type holds it (U strings, objects, other datetime units, nested,
    multi-dimensional sub-arrays)."""
    import numpy as np  # start-up: a layout is parsed without numpy (info, --help)

    ftype = np.dtype(ftype)
    count = None
    if ftype.subdtype is not None:
        base, shape = ftype.subdtype
        if len(shape) != 1 or not shape[0]:
            return None
        inner = type_of_numpy(base)
        if inner is None or inner not in NUMBERS:
            return None
        return f"{inner}[{shape[0]}]"
    if ftype.names is not None:
        return None
    kind = ftype.kind
    if kind == "b":
        return "bool"
    if kind in "Mm":
        unit = np.datetime_data(ftype.str)
        if unit[1] != 1 or unit[0] not in UNITS:
            return None
        return f"{'datetime64' if kind == 'M' else 'timedelta64'}[{unit[0]}]"
    if kind == "S":
        return f"bytes[{ftype.itemsize}]" if 1 <= ftype.itemsize <= MAX_WIDTH else None
    for name, (code, size, _, _) in NUMBERS.items():
        if code[1] == kind and size == ftype.itemsize:
            return name if count is None else f"{name}[{count}]"
    return None
