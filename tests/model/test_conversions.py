"""model/conversions.py: a number column converts into a field's type exactly or not at all.

The oracle is Python's own arithmetic, which compares ints and floats exactly: a value is
kept when the target type holds it (an integer in range; a float that converts back to
the same number, NaN to NaN), and the first value that is not names the row."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from loader.model.conversions import casts_exactly, convert_exactly

TYPES = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8"]
#: values at the edges of exactness, mixed into the random ones
EDGES = [
    0,
    1,
    -1,
    0.5,
    2**24 + 1,
    2**31,
    2**53,
    2**53 + 1,
    2**63 - 1,
    2**64 - 1,
    -(2**63),
    0.1,
    1e300,
    float("nan"),
    float("inf"),
    2.0**63,
    -(2.0**63),
]


def kept(value, dst: np.dtype) -> bool:
    """Does ``dst`` hold ``value`` (a Python int or float) exactly?"""
    if dst.kind in "iu":
        if isinstance(value, float) and not value.is_integer():  # fractions, NaN, infinities
            return False
        info = np.iinfo(dst)
        return info.min <= int(value) <= info.max
    if isinstance(value, float) and math.isnan(value):
        return True
    with np.errstate(all="ignore"):
        return float(dst.type(value)) == value


def column(draw_values, src: np.dtype) -> np.ndarray:
    """The values that ``src`` holds, as a column of ``src``."""
    return np.array([v for v in draw_values if kept(v, src)], dtype=src)


@st.composite
def columns(draw):
    src = np.dtype(draw(st.sampled_from(TYPES)))
    random = draw(hnp.arrays(src, st.integers(0, 12)))
    edges = column(draw(st.lists(st.sampled_from(EDGES), max_size=4)), src)
    values = np.concatenate([random, edges])
    return values[draw(st.permutations(range(len(values))))] if len(values) else values


@settings(max_examples=400, deadline=None)
@given(columns(), st.sampled_from(TYPES))
def test_a_conversion_is_exact_or_refused_at_the_first_changed_row(values, dst):
    dst = np.dtype(dst)
    converted, row = convert_exactly(values, dst)
    first = next((i for i, v in enumerate(values.tolist()) if not kept(v, dst)), None)
    assert row == first, (values, dst)
    if row is None:
        assert converted.dtype == dst
        back = converted.astype(values.dtype)
        assert np.array_equal(back, values, equal_nan=values.dtype.kind == "f")


def test_numpy_safe_casts_that_lose_values_are_not_exact():
    assert not casts_exactly(np.dtype("i8"), np.dtype("f8")) and not casts_exactly(np.dtype("u8"), np.dtype("f8"))
    assert not casts_exactly(np.dtype("i4"), np.dtype("f4")) and not casts_exactly(np.dtype("f8"), np.dtype("f4"))
    assert casts_exactly(np.dtype("i4"), np.dtype("f8")) and casts_exactly(np.dtype("u2"), np.dtype("f4"))
    assert convert_exactly(np.array([1, 2**53 + 1]), np.dtype("f8"))[1] == 1
