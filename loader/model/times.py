"""Instants and durations as whole numbers of a time unit (``s``, ``ms``, ``us``, ``ns``).

A ``datetime64[U]`` field holds int64 counts of U since 1970-01-01T00:00:00 UTC, a
``timedelta64[U]`` field int64 counts of U. What a user may write for them:

- an **instant** (`instant_ns`): an ISO-8601 text ``YYYY-MM-DD[THH:MM[:SS[.fffffffff]]][Z|±HH:MM]``
  (a space may stand for the ``T``; no zone means UTC), a ``numpy.datetime64``, a
  ``datetime.datetime`` (naive: UTC; aware: converted), a ``datetime.date`` (midnight UTC) or
  a ``pandas.Timestamp`` (its nanoseconds kept);
- a **duration** (`duration_ns`): an integer with a unit, ``90s``, ``15min``, ``1h``, ``250ms``,
  ``100us``, ``10ns``, ``1d``, ``1w`` (``m`` is minutes), a ``numpy.timedelta64`` or a
  ``datetime.timedelta``.

All exact (Python integers, no float on the way). A bare integer is a count of the field's
unit (`instant_in_unit`, `duration_in_unit`). Mistakes are UsageErrors saying what to write.
Pure functions: no numpy needed for text.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import functools
import operator
import re
from typing import Any, SupportsIndex

from ..errors import UsageError

#: ns in one unit of a datetime64 / timedelta64 field
UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_TYPE_RE = re.compile(r"^(datetime64|timedelta64)\[(s|ms|us|ns)\]$")
_ISO_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?"
    r"(Z|[+-]\d{2}:?\d{2})?$"
)
_DURATION_RE = re.compile(r"^(\d+)\s*(ns|us|µs|ms|s|min|m|h|d|w)$")
_DURATION_NS = {
    "ns": 1,
    "us": 10**3,
    "µs": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "min": 60 * 10**9,
    "h": 3600 * 10**9,
    "d": 86400 * 10**9,
    "w": 7 * 86400 * 10**9,
}
#: ns in one unit of a numpy datetime64 / timedelta64 of a fixed unit
_NUMPY_NS = {"W": 7 * 86400 * 10**9, "D": 86400 * 10**9, "h": 3600 * 10**9, "m": 60 * 10**9, **UNIT_NS}
INSTANT_EXAMPLE = "2026-01-02T14:30:00Z"


@functools.cache
def time_type(type_name: str) -> tuple[str, str] | None:
    """(``datetime64`` or ``timedelta64``, unit) of a layout type name, None for other types."""
    m = _TYPE_RE.match(str(type_name))
    return (m.group(1), m.group(2)) if m else None


def instant_ns(value: object, what: str) -> int:
    """ns since 1970-01-01T00:00Z of an instant (see the module doc); UsageError naming
    ``what`` when it is not one."""
    if isinstance(value, str):
        return _iso_ns(value.strip(), what)
    if isinstance(value, _dt.datetime):
        off = value.utcoffset()
        naive = value.replace(tzinfo=None) - (off or _dt.timedelta(0))
        secs = calendar.timegm(naive.timetuple())
        return secs * 10**9 + naive.microsecond * 1000 + int(getattr(value, "nanosecond", 0) or 0)
    if isinstance(value, _dt.date):
        return calendar.timegm(value.timetuple()) * 10**9
    kind = _numpy_time(value)
    if kind == "M":
        return _numpy_ns(value, what, "instant")
    raise UsageError(
        f"{what}: {value!r} is not an instant; write an ISO-8601 time such as {INSTANT_EXAMPLE}, "
        "or give a numpy.datetime64, datetime or date"
    )


def duration_ns(value: object, what: str) -> int:
    """ns of a duration (see the module doc); UsageError naming ``what`` when it is not one."""
    if isinstance(value, str):
        m = _DURATION_RE.match(value.strip())
        if not m:
            raise UsageError(
                f"{what}: {value!r} is not a duration; write a whole number with a unit "
                "(ns, us, ms, s, min, h, d, w), e.g. 1h, 15min, 250ms"
            )
        return int(m.group(1)) * _DURATION_NS[m.group(2)]
    if isinstance(value, _dt.timedelta):
        ns = (value.days * 86400 + value.seconds) * 10**9 + value.microseconds * 1000
        return ns + int(getattr(value, "nanoseconds", 0) or 0)
    if _numpy_time(value) == "m":
        return _numpy_ns(value, what, "duration")
    raise UsageError(
        f"{what}: {value!r} is not a duration; write e.g. 1h, 15min or 250ms, or give a "
        "numpy.timedelta64 or datetime.timedelta"
    )


def _iso_ns(text: str, what: str) -> int:
    m = _ISO_RE.match(text)
    if not m:
        raise UsageError(
            f"{what}: {text!r} is not an ISO-8601 instant; write YYYY-MM-DDTHH:MM[:SS[.fffffffff]] "
            f"with an optional Z or ±HH:MM (none: UTC), e.g. {INSTANT_EXAMPLE}"
        )
    y, mo, d, h, mi, s, frac, zone = m.groups()
    try:
        stamp = _dt.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0))
    except ValueError as e:
        raise UsageError(f"{what}: {text!r} is not a valid instant ({e})") from None
    ns = calendar.timegm(stamp.timetuple()) * 10**9 + (int(frac.ljust(9, "0")) if frac else 0)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:])
        if hours > 23 or minutes > 59:
            raise UsageError(f"{what}: {text!r} has an impossible UTC offset {zone}")
        ns -= sign * (hours * 60 + minutes) * 60 * 10**9
    return ns


def _numpy_time(value: object) -> str | None:
    """``M`` for a numpy.datetime64, ``m`` for a numpy.timedelta64, else None."""
    dtype = getattr(value, "dtype", None)
    return dtype.kind if dtype is not None and getattr(value, "ndim", 1) == 0 and dtype.kind in "Mm" else None


def _numpy_ns(value: Any, what: str, noun: str) -> int:  # a numpy datetime64 / timedelta64 scalar
    import numpy as np  # only a numpy value gets here

    if np.isnat(value):
        raise UsageError(f"{what}: NaT is not an {noun}; leave the bound out (None) for an open end")
    unit, count = np.datetime_data(value.dtype)
    if unit in ("Y", "M"):  # calendar units: to days first (exact)
        value, unit = value.astype(f"{value.dtype.kind}8[D]"), "D"
    raw = int(value.astype(np.int64)) * count
    if unit in _NUMPY_NS:
        return raw * _NUMPY_NS[unit]
    per = {"ps": 10**3, "fs": 10**6, "as": 10**9}[unit]  # finer than ns: exact only on whole ns
    if raw % per:
        raise UsageError(f"{what}: {value!r} is finer than a nanosecond")
    return raw // per


def in_unit(ns: int, unit: str, what: str, *, ceil: bool = False, shown: str | None = None) -> int:
    """``ns`` as a count of ``unit``: exact, or (``ceil``) rounded up - a half-open bound
    ``[lo, hi)`` on whole units keeps the same values with both bounds rounded up. ``shown``:
    the value as the message names it (default: ``ns`` as an instant)."""
    per = UNIT_NS[unit]
    if ns % per and not ceil:
        raise UsageError(f"{what}: {shown or format_ns(ns)} is not a whole number of {unit}; the field holds {unit}")
    return -(-ns // per)


def instant_in_unit(value: object, unit: str, what: str, *, ceil: bool = False) -> int:
    """An instant (or a bare integer: already a count of ``unit``) as a count of ``unit``."""
    return _count(value, unit, what, ceil, "instant")


def duration_in_unit(value: object, unit: str, what: str, *, ceil: bool = False) -> int:
    """A duration (or a bare integer: already a count of ``unit``) as a count of ``unit``."""
    return _count(value, unit, what, ceil, "duration")


def _count(value: object, unit: str, what: str, ceil: bool, noun: str) -> int:
    if isinstance(value, bool):
        raise UsageError(
            f"{what}: {value!r} is not an {noun}" if noun == "instant" else f"{what}: {value!r} is not a {noun}"
        )
    if isinstance(value, int):
        return int(value)
    if type(value).__name__.startswith(("int", "uint")) and isinstance(value, SupportsIndex):  # numpy's
        return operator.index(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if noun == "instant":
        return in_unit(instant_ns(value, what), unit, what, ceil=ceil)
    return in_unit(duration_ns(value, what), unit, what, ceil=ceil, shown=repr(value))


def format_ns(ns: int) -> str:
    """An instant in ns as ISO-8601 UTC text, e.g. ``2026-01-02T14:30:00Z`` (fraction only when
    there is one)."""
    secs, frac = divmod(int(ns), 10**9)
    text = (_dt.datetime(1970, 1, 1) + _dt.timedelta(seconds=secs)).isoformat()
    return text + (f".{frac:09d}".rstrip("0") if frac else "") + "Z"


def format_duration(ns: int) -> str:
    """A duration in ns in the largest unit that holds it whole: ``1h``, ``15min``, ``250ms``."""
    for name in ("w", "d", "h", "min", "s", "ms", "us"):
        per = _DURATION_NS[name]
        if ns and ns % per == 0:
            return f"{ns // per}{name}"
    return f"{ns}ns"


def describe_coordinate(type_name: str, count: int, *, duration: bool = False) -> str:
    """A coordinate (or with ``duration``, a chunk length) of a dimension of type ``type_name`` as
    a user writes it: an instant or a duration of a time field, else the integer."""
    timed = time_type(type_name)
    if timed is None:
        return str(count)
    ns = int(count) * UNIT_NS[timed[1]]
    return format_duration(ns) if duration or timed[0] == "timedelta64" else format_ns(ns)
