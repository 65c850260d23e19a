"""`wait_until` returns as soon as its condition holds and fails saying what did not happen."""

import time

import pytest

from .waiting import wait_until


def test_wait_until_returns_the_conditions_value_as_soon_as_it_holds():
    start, calls = time.monotonic(), []
    assert wait_until(lambda: calls.append(1) or (len(calls) >= 3 and "ready"), 10, "three calls") == "ready"
    assert len(calls) == 3 and time.monotonic() - start < 5


def test_wait_until_fails_after_its_deadline_saying_what_did_not_happen():
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"^waited 0\.2 s for the file to appear, and it did not happen$"):
        wait_until(lambda: False, 0.2, "the file to appear")
    assert 0.2 <= time.monotonic() - start < 5
