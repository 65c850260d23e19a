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

import numpy as np


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
        return ~(inside & (np.trunc(values) == values))
    back = converted.astype(values.dtype)  # to floats: whatever does not come back unchanged
    same = back == values
    if values.dtype.kind == "f":
        same |= np.isnan(back) & np.isnan(values)
    if values.dtype.kind in "iu":  # 2**63 - 1 -> 2.0**63, which need not convert back to a different integer
        same &= converted < float(np.iinfo(values.dtype).max) + 1
    return ~same
