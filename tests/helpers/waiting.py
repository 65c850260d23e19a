"""`wait_until`: wait for a condition (a process started, a file written), not for luck."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 30.0, what: str = "the condition", every: float = 0.01
) -> T:
    """Call ``predicate`` every ``every`` seconds until it returns a true value, and return
    that value; after ``timeout`` seconds fail the test, saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}, and it did not happen")
        time.sleep(every)
