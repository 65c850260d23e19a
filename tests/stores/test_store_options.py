"""Reading option values (stores/options.py): sizes, booleans, counts, RocksDB integers -
the value a user wrote, or one UsageError naming the option and what it takes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader.errors import UsageError
from loader.stores.options import (
    DEFAULT_MAP_SIZE,
    DEFAULT_MAX_DBS,
    LmdbOptions,
    RocksdbOptions,
    parse_bool,
    parse_count,
    parse_int32,
    parse_size,
)

UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@given(
    n=st.integers(1, 1 << 20),
    unit=st.sampled_from(sorted(UNITS)),
    tail=st.sampled_from(["", "b", "ib"]),
    upper=st.booleans(),
    pad=st.booleans(),
)
def test_a_size_is_a_number_with_an_optional_unit(n, unit, tail, upper, pad):
    text = f"{n}{unit}{tail if unit else ''}"
    text = (text.upper() if upper else text).center(len(text) + 2 * pad)
    assert parse_size("map_size", text) == n * UNITS[unit]


def test_sizes_take_fractions_and_ints_and_refuse_the_rest():
    assert parse_size("map_size", "1.5g") == 3 << 29
    assert parse_size("map_size", 4096) == 4096
    for bad, text in [
        ("abc", "is not a size (e.g. 64m, 2g)"),
        ("", "is not a size"),
        ("1e999g", "is not a size"),
        ("0", "must be positive"),
        ("-5m", "must be positive"),
        (0, "must be positive"),
    ]:
        with pytest.raises(UsageError) as ei:
            parse_size("map_size", bad)
        assert str(ei.value).startswith(f"store option map_size={bad!r} ") and text in str(ei.value)


@pytest.mark.parametrize(
    "text,want",
    [
        ("1", True),
        ("true", True),
        (" YES ", True),
        ("on", True),
        (True, True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        ("", False),
        (False, False),
    ],
)
def test_booleans(text, want):
    assert parse_bool("writemap", text) is want


def test_a_boolean_option_refuses_anything_else():
    with pytest.raises(UsageError, match=r"store option writemap='2' is not a boolean; use 1/0, true/false"):
        parse_bool("writemap", "2")


def test_counts_and_rocksdb_integers():
    assert parse_count("max_dbs", " 12 ") == 12 and parse_count("max_dbs", 3) == 3
    for bad, text in [("0", "must be at least 1"), ("1.5", "is not a whole number"), ("x", "is not a whole number")]:
        with pytest.raises(UsageError, match=text):
            parse_count("max_dbs", bad)
    assert parse_int32("zstd_level", "-5") == -5 and parse_int32("block_size", 16384, minimum=1) == 16384
    with pytest.raises(UsageError, match=r"rocksdb option block_size=0 is out of range \(1 \.\. 2147483647\)"):
        parse_int32("block_size", "0", minimum=1)
    with pytest.raises(UsageError, match="rocksdb option zstd_level='x' is not an integer"):
        parse_int32("zstd_level", "x")
    with pytest.raises(UsageError, match="out of range"):
        parse_int32("zstd_level", 1 << 31)


def test_defaults_are_what_no_option_means():
    assert LmdbOptions.parse({}) == LmdbOptions() == LmdbOptions(DEFAULT_MAP_SIZE, False, True, DEFAULT_MAX_DBS)
    assert RocksdbOptions.parse({}) == RocksdbOptions() == RocksdbOptions("none", 3, None)
    assert RocksdbOptions.parse(
        {"compression": "ZSTD-Dict", "zstd_level": "7", "block_size": "16384"}
    ) == RocksdbOptions("zstd-dict", 7, 16384)
    assert LmdbOptions.parse(
        {
            "map_size": "64k",
            "writemap": "1",
            "readahead": "off",
            "max_dbs": "3",
            "shards": "ignored: not a backend option",
        }
    ) == LmdbOptions(64 << 10, True, False, 3)
