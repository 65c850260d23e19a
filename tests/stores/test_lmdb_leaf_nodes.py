"""Where a leaf node's value lies (`Pages.value_span`, in C: _lmdbnode.c) is what stands
between a damaged node and a SIGBUS on every LMDB get: for any bytes where the node sits
and any key position it gives what LMDB's node format says (the Python reading of it
below), and it never reads outside the pages in use."""

from __future__ import annotations

import ctypes
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from loader.stores.lmdb_files import OVERFLOW_HEAD, Pages

PSIZE = 4096
PAGES = 4


def _reference(buf: bytes, at: int, n: int, in_use: int, psize: int):
    """LMDB 0.9's leaf node read in Python: (start, size, big), or 1 (the key lies outside
    the pages in use) / 2 (the value would)."""
    if not 8 <= at <= in_use - n - 8:
        return 1
    lo, hi, flags, ksize = struct.unpack_from("<HHHH", buf, at - 8)
    size, big = lo | hi << 16, bool(flags & 1)
    start = struct.unpack_from("<Q", buf, at + n)[0] * psize + OVERFLOW_HEAD if big else at + n
    if ksize != n or start + size > in_use:
        return 2
    return start, size, big


@settings(max_examples=400, deadline=None)
@given(
    data=st.data(),
    n=st.integers(0, 64),
    header=st.binary(min_size=8, max_size=8),
    pgno=st.one_of(st.integers(0, PAGES + 1), st.integers(0, 2**64 - 1)),
    used=st.integers(1, PAGES),
)
def test_value_span_reads_the_node_as_lmdb_lays_it_out(data, n, header, pgno, used):
    size = PAGES * PSIZE
    at = data.draw(st.integers(0, size - n - 8))
    buf = bytearray(size)
    if at >= 8:
        buf[at - 8 : at] = header
        if data.draw(st.booleans()):  # a plausible node: its key size, a value that may fit
            buf[at - 8 : at] = struct.pack(
                "<HHHH", data.draw(st.integers(0, 2 * size)), 0, data.draw(st.sampled_from([0, 1])), n
            )
    buf[at + n : at + n + 8] = pgno.to_bytes(8, "little")
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    pages = Pages(base, size, used, PSIZE)  # the pages in use may end before the buffer does
    key = memoryview(buf)[at : at + n]
    want = _reference(bytes(buf), at, n, used * PSIZE, PSIZE)
    got = pages.value_span(key)
    if want == 1:
        assert got == "a key lies outside the pages in use of data.mdb"
    elif want == 2:
        assert isinstance(got, str) and "lies outside the pages in use" in got and bytes(key).hex() in got
    else:
        assert got == want
        start, length, _ = got
        assert start >= 0 and start + length <= used * PSIZE
    key.release()
    del pages
