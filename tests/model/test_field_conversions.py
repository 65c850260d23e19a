"""field_values: every typed conversion is exact or refused at the first changed row (hypothesis
against plain Python models of the values)."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.errors import ConversionError, LayoutError
from loader.model.conversions import field_values
from loader.model.layouts import Field

SCALE = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
I64 = st.integers(-(2**63) + 1, 2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(I64, min_size=1, max_size=8), st.sampled_from(list(SCALE)), st.sampled_from(list(SCALE)), st.booleans())
def test_times_change_unit_only_when_every_value_is_whole_and_in_range(values, src, dst, arrow):
    a, b = SCALE[src], SCALE[dst]
    ok = [v * b % a == 0 and -(2**63) < v * b // a < 2**63 for v in values]
    col = np.array(values, "i8").view(f"M8[{src}]")
    if arrow:
        col = pa.array(np.array(values, "i8"), pa.timestamp(src))
    field = Field("t", f"datetime64[{dst}]")
    if all(ok):
        got, valid = field_values(col, field, "w")
        assert got.view("i8").tolist() == [v * b // a for v in values] and valid is None
        return
    with pytest.raises(ConversionError, match=rf"w: column 't', row {ok.index(False)}: "):
        field_values(col, field, "w")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=6), min_size=1, max_size=8), st.integers(1, 6), st.booleans())
def test_bytes_fit_or_name_the_first_value_too_long(values, width, arrow):
    col = pa.array(values, pa.binary()) if arrow else np.array(values, "S6")
    field = Field("b", f"bytes[{width}]")
    stored = [v if arrow else v.rstrip(b"\x00") for v in values]  # numpy's S drops trailing zero bytes
    long = [len(v) > width for v in stored]
    if not any(long):
        got, _ = field_values(col, field, "w")
        assert got.tolist() == [v.rstrip(b"\x00") for v in stored]
        return
    with pytest.raises(
        ConversionError, match=rf"row {long.index(True)}: .* is \d+ bytes, longer than bytes\[{width}\]"
    ):
        field_values(col, field, "w")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-(2**15), 2**15 - 1)), min_size=1, max_size=8), st.booleans())
def test_nulls_become_validity_or_are_refused(values, nullable):
    field = Field("n", "int16", nullable=nullable)
    col = pa.array(values, pa.int16())
    if None in values and not nullable:
        with pytest.raises(ConversionError, match=rf"row {values.index(None)}: null, but field 'n' is not nullable"):
            field_values(col, field, "w")
        return
    got, valid = field_values(col, field, "w")
    assert [
        None if valid is not None and not ok else int(v)
        for v, ok in zip(got, valid if valid is not None else [True] * len(values), strict=True)
    ] == values
    assert all(int(v) == 0 for v, x in zip(got, values, strict=True) if x is None)


@pytest.mark.parametrize(
    "col,field",
    [
        (np.array([1, 2], "i8"), Field("x", "bool")),  # 2 is no bool
        (pa.array(["a"]), Field("x", "int32")),
        (np.array([1.5], "f8"), Field("x", "datetime64[s]")),
        (pa.array([1], pa.timestamp("s")), Field("x", "timedelta64[s]")),
    ],
)
def test_values_or_types_that_cannot_be_a_field_are_refused(col, field):
    with pytest.raises((ConversionError, LayoutError), match="column 'x'"):
        field_values(col, field, "w")


def test_numpy_text_converts_into_string_fields_by_its_utf8_bytes():
    got, _ = field_values(np.array(["a", "é"], "U2"), Field("s", "string[2]"), "w")
    assert got.tolist() == [b"a", "é".encode()]
    with pytest.raises(ConversionError, match=r"row 1: 'éé' is 4 bytes, longer than string\[3\]"):
        field_values(np.array(["a", "éé"], "U2"), Field("s", "string[3]"), "w")
