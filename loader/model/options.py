"""Limits and parsing of the numbers a user gives every command: counts and sizes.

- `check_count` takes a whole number within bounds or raises a UsageError naming the
  option: 0, negative, huge and non-integer values never fall back to a default.
- `MAX_WORKERS`, `MAX_SHARDS`: the bounds of ``--workers`` and ``?shards=``;
  `default_workers`: the machine's cores.
- `parse_size`: ``"512m"``, ``"2g"``, ``"64MiB"``, ``"4096"`` -> bytes (ValueError when
  it is not a size; the caller names the option in its message).

Pure functions: nothing here touches a dataset.
"""

from __future__ import annotations

import operator
import os
from typing import SupportsIndex

from ..errors import UsageError

MAX_WORKERS = 1024
MAX_SHARDS = 1024
_SIZE_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def check_count(option: str, value: object, lo: int, hi: int) -> int | None:
    """``value`` (None: not given) if it is a whole number in lo..hi, else UsageError
    naming the option: 0, negative, huge and non-integer values never fall back to a default."""
    if value is None:
        return None
    try:
        if isinstance(value, bool) or not isinstance(value, SupportsIndex):
            raise TypeError
        n: int | None = operator.index(value)
    except TypeError:
        n = None
    if n is None or not lo <= n <= hi:
        raise UsageError(f"{option} must be at least {lo:,} and at most {hi:,} (a whole number), not {value!r}")
    return n


def size_option(value: object, option: str, error: type[UsageError] = UsageError) -> int | None:
    """``value`` (None: not given) in bytes, or ``error`` naming the option: "OPTION 'x' is
    not a size (e.g. 512m, 2g)"."""
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError:
        raise error(f"{option} {value!r} is not a size (e.g. 512m, 2g)") from None


def parse_size(text: object) -> int:
    """Bytes of a size: a number with an optional unit k, m, g, t (binary; ``b``, ``ib``
    suffixes allowed, any case). Raises ValueError when ``text`` is not one."""
    s = str(text).strip().lower().removesuffix("b").removesuffix("i")
    mult = _SIZE_UNITS.get(s[-1:], 1)
    if mult != 1:
        s = s[:-1]
    try:
        return int(float(s) * mult)
    except OverflowError:
        raise ValueError(f"{text!r} is not a size") from None
