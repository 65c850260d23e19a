"""model/options.py: whole-number options within bounds, and sizes."""

import pytest
from helpers import run_cli

import loader
from loader.errors import UsageError
from loader.model.options import MAX_SHARDS, MAX_WORKERS, check_count, default_workers, parse_size


@pytest.mark.parametrize("value", [1, 7, MAX_WORKERS])
def test_check_count_takes_whole_numbers_in_bounds(value):
    assert check_count("--workers", value, 1, MAX_WORKERS) == value


@pytest.mark.parametrize("value", [0, -1, MAX_WORKERS + 1, 2.0, 1.5, "3", True, False, 10**30])
def test_check_count_refuses_the_rest_naming_the_option(value):
    with pytest.raises(UsageError) as ei:
        check_count("--workers", value, 1, MAX_WORKERS)
    assert str(ei.value) == f"--workers must be at least 1 and at most 1,024 (a whole number), not {value!r}"


def test_check_count_leaves_a_missing_value_to_the_default():
    assert check_count("--shards", None, 1, MAX_SHARDS) is None
    assert default_workers() >= 1


@pytest.mark.parametrize(
    "text,want",
    [
        ("4096", 4096),
        (" 7 ", 7),
        ("512m", 512 << 20),
        ("2g", 2 << 30),
        ("2G", 2 << 30),
        ("64MiB", 64 << 20),
        ("64mib", 64 << 20),
        ("1.5k", 1536),
        ("1kb", 1024),
        ("1t", 1 << 40),
        (4096, 4096),
        ("0", 0),
    ],
)
def test_parse_size(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["", "x", "1q", "m", "k1", "1e999", "inf", "nan", "-", "1 m b"])
def test_parse_size_refuses_what_is_not_a_size(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_cli_memory_budget_not_a_size_exit_2(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=10", uri)
    r = run_cli("finalize", uri, "--memory-budget", "12q")
    assert r.returncode == 2
    assert r.stderr == "bulkload: error: --memory-budget '12q' is not a size (e.g. 512m, 2g)\n"
    r = run_cli("finalize", uri, "--memory-budget", "1k")
    assert r.returncode == 2 and "memory budget 1024 bytes is too small; give at least 4096" in r.stderr
