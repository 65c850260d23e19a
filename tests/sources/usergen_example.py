"""User generators for the tests (imported by name in the workers: `sources.usergen_example`)."""

import numpy as np

from loader.sources.generators import generate

#: a layout of no declared name: inferred as `records`
DTYPE = np.dtype([("key", "<u8"), ("half", "<f8"), ("mod7", "<i4"), ("flag", "<u1")])


def records(start, n):
    """Record j: key j, half j / 2, mod7 j % 7, flag j % 2."""
    j = np.arange(start, start + n, dtype=np.uint64)
    out = np.empty(n, DTYPE)
    out["key"], out["half"] = j, j / 2
    out["mod7"], out["flag"] = j % 7, j % 2
    return out


def scidb96(start, n):
    """The built-in scidb96 records, through the user-generator path."""
    return generate("scidb96", start, n, impl="python")


def raises_from_1000(start, n):
    if start + n > 1000:
        raise ValueError(f"no records past 999 (asked up to {start + n - 1})")
    return records(start, n)


def one_short(start, n):
    return records(start, max(0, n - 1))


def other_dtype(start, n):
    return records(start, n).astype([("key", "<u8"), ("half", "<f4"), ("mod7", "<i4"), ("flag", "<u1")])


def not_an_array(start, n):
    return list(range(start, start + n))


def strings(start, n):
    return np.zeros(n, [("name", "U3")])
