"""Instants and durations (loader/model/times.py): every accepted spelling gives numpy's exact
count, and every mistake is a UsageError saying what to write."""

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.errors import UsageError
from loader.model.times import (
    duration_in_unit,
    duration_ns,
    format_ns,
    instant_in_unit,
    instant_ns,
    time_type,
)

NS_RANGE = st.integers(-(2**63) + 1, 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(NS_RANGE)
def test_iso_text_of_any_ns_instant_is_numpys_value(ns):
    text = str(np.datetime64(ns, "ns"))
    assert instant_ns(text, "t") == ns
    assert instant_ns(text + "Z", "t") == ns
    assert instant_ns(np.datetime64(ns, "ns"), "t") == ns
    assert instant_ns(format_ns(ns), "t") == ns


@pytest.mark.parametrize(
    "value",
    [
        "2026-01-02T14:30:00Z",
        "2026-01-02T14:30Z",
        "2026-01-02 14:30:00",
        "2026-01-02T15:30:00+01:00",
        "2026-01-02T09:30-0500",
        "2026-01-02T14:30:00.000000000",
        np.datetime64("2026-01-02T14:30", "m"),
        np.datetime64("2026-01-02T14:30:00.000", "ms"),
        dt.datetime(2026, 1, 2, 14, 30),
        dt.datetime(2026, 1, 2, 16, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        pd.Timestamp("2026-01-02T14:30:00"),
        pd.Timestamp("2026-01-02T09:30:00", tz="America/New_York"),
    ],
)
def test_every_spelling_of_one_instant(value):
    assert instant_ns(value, "t") == int(np.datetime64("2026-01-02T14:30", "ns").astype(np.int64))


def test_dates_months_and_nanoseconds():
    assert instant_ns(dt.date(2026, 1, 2), "t") == instant_ns("2026-01-02", "t")
    assert instant_ns(np.datetime64("2026-03"), "t") == instant_ns("2026-03-01", "t")
    assert instant_ns(pd.Timestamp("2026-01-02T00:00:00.000000007"), "t") == instant_ns("2026-01-02", "t") + 7
    assert instant_ns("1969-12-31T23:59:59.5Z", "t") == -500_000_000


def test_counts_of_a_unit_round_up_only_when_asked():
    assert instant_in_unit("2026-01-02T00:00:01Z", "s", "t") == instant_ns("2026-01-02", "t") // 10**9 + 1
    assert instant_in_unit(17, "ms", "t") == 17 and instant_in_unit("17", "ms", "t") == 17
    with pytest.raises(UsageError, match="is not a whole number of s"):
        instant_in_unit("2026-01-02T00:00:00.5", "s", "t")
    # a half-open bound keeps the same whole seconds rounded up: [x.5, y.5) == [x+1, y+1)
    assert instant_in_unit("1970-01-01T00:00:00.5", "s", "t", ceil=True) == 1
    assert instant_in_unit("1969-12-31T23:59:59.5", "s", "t", ceil=True) == 0


@pytest.mark.parametrize(
    "value, ns",
    [
        ("1h", 3600 * 10**9),
        ("15min", 900 * 10**9),
        ("15m", 900 * 10**9),
        ("250ms", 250 * 10**6),
        ("100us", 100_000),
        ("7ns", 7),
        ("1d", 86400 * 10**9),
        ("2w", 14 * 86400 * 10**9),
        (" 90s ", 90 * 10**9),
        (np.timedelta64(3, "h"), 3 * 3600 * 10**9),
        (dt.timedelta(minutes=2), 120 * 10**9),
        (pd.Timedelta(5, "ns"), 5),
    ],
)
def test_durations(value, ns):
    assert duration_ns(value, "d") == ns


def test_duration_counts_of_a_unit():
    assert duration_in_unit("1h", "s", "chunk") == 3600
    assert duration_in_unit(500, "ms", "chunk") == 500 and duration_in_unit("500", "ms", "chunk") == 500
    with pytest.raises(UsageError, match="not a whole number of s"):
        duration_in_unit("1500ms", "s", "chunk")


@pytest.mark.parametrize(
    "fn, value, message",
    [
        (instant_ns, "yesterday", "is not an ISO-8601 instant"),
        (instant_ns, "2026-13-01", "is not a valid instant"),
        (instant_ns, "2026-01-01T10:00+25:00", "impossible UTC offset"),
        (instant_ns, np.datetime64("NaT"), "NaT is not an instant"),
        (instant_ns, 3.5, "is not an instant"),
        (duration_ns, "1.5h", "is not a duration"),
        (duration_ns, "-1h", "is not a duration"),
        (duration_ns, np.datetime64("2026-01-01"), "is not a duration"),
    ],
)
def test_mistakes_are_usage_errors_saying_what_to_write(fn, value, message):
    with pytest.raises(UsageError, match=r"^where: ") as e:
        fn(value, "where")
    assert message in str(e.value)


def test_time_types():
    assert time_type("datetime64[ns]") == ("datetime64", "ns")
    assert time_type("timedelta64[s]") == ("timedelta64", "s")
    assert time_type("int64") is None and time_type("datetime64[D]") is None


def test_durations_and_coordinates_are_shown_as_written():
    from loader.model.times import describe_coordinate, format_duration

    assert [format_duration(n) for n in (3600 * 10**9, 900 * 10**9, 250 * 10**6, 7, 86400 * 10**9)] == [
        "1h",
        "15min",
        "250ms",
        "7ns",
        "1d",
    ]
    assert describe_coordinate("datetime64[s]", 3600, duration=True) == "1h"
    assert describe_coordinate("datetime64[s]", 1767364200) == "2026-01-02T14:30:00Z"
    assert describe_coordinate("timedelta64[ms]", 1500) == "1500ms"
    assert describe_coordinate("int32", 1000, duration=True) == "1000"
