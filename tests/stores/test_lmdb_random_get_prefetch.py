"""Readahead off (``readahead=0``, the random-read option) covers every read path of the
LMDB backend: an exact `get` (what `Dataset.read_records` uses) and a zero-copy value
view's `get` (chunk reads of box queries) advise the kernel of a big value's overflow
pages in one request, like `seek`; with readahead on, none of them advises anything."""

from __future__ import annotations

import os

import numpy as np
import pytest

from .store_helpers import k, reader, writer


def _spied(st) -> list:
    spans = []
    real = st._prefetch_overflow
    st._prefetch_overflow = lambda buf: spans.append(real(buf))
    return spans


def _value_at(spec, off: int, n: int) -> bytes:
    with open(os.path.join(spec.shard_path(0), "data.mdb"), "rb") as f:
        f.seek(off + 16)  # the overflow page header, then the value
        return f.read(n)


@pytest.mark.parametrize("how", ["get", "view"])
@pytest.mark.parametrize("size", [2 * 4096, 3 * 4096 + 7, 960_000])
def test_readahead_off_get_prefetches_the_whole_value_in_one_request(lmdb_spec, how, size):
    vals = {i: np.random.default_rng(i).bytes(size + i) for i in range(3)}
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(i), vals[i]) for i in range(3)] + [(k(9), b"small")])
    with reader(lmdb_spec, readahead="0") as st:
        spans = _spied(st)
        view = st.value_view("batches") if how == "view" else None
        try:
            for i in (2, 0, 1):
                got = view.get(k(i)) if view else st.get(k(i))
                assert bytes(got) == vals[i]
            small = view.get(k(9)) if view else st.get(k(9))
            assert bytes(small) == b"small"
            assert (view.get(k(5)) if view else st.get(k(5))) is None
        finally:
            if view:
                view.close()
        assert len(spans) == 4 and spans[3] is None  # a value in its leaf page: no advice
        for i, (off, n) in zip((2, 0, 1), spans[:3]):
            assert n == len(vals[i]) + 16 and _value_at(lmdb_spec, off, len(vals[i])) == vals[i]


@pytest.mark.parametrize("how", ["get", "view"])
def test_readahead_on_get_advises_nothing(lmdb_spec, how):
    big = np.random.default_rng(3).bytes(5 * 4096)
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), big)])
    with reader(lmdb_spec) as st:
        spans = _spied(st)
        if how == "view":
            view = st.value_view("batches")
            assert bytes(view.get(k(1))) == big
            view.close()
        else:
            assert st.get(k(1)) == big
        assert spans in ([], [None])


def test_readahead_off_advises_only_what_is_not_in_the_page_cache(lmdb_spec):
    """A value whose ends are cached is not advised again (the advice walks every page of its
    range: a warm box query paid ~0.13 ms for it); else every piece not cached is."""
    from loader.stores.lmdb_reads import ADVICE_BYTES

    with writer(lmdb_spec) as w:
        w.put_sorted([(k(100 + i), bytes(1 << 20)) for i in range(12)])
    data = os.path.join(lmdb_spec.shard_path(0), "data.mdb")
    off, length = 4 << 20, 3 * ADVICE_BYTES  # inside the values, away from the file's ends
    with reader(lmdb_spec, readahead="0") as st:
        fd = os.open(data, os.O_RDONLY)
        try:
            os.fsync(fd)  # clean pages: DONTNEED drops them
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead around what the test reads
            os.pread(fd, length, off)  # cached
            assert st._advise(off, length) == 0
            os.posix_fadvise(fd, off + ADVICE_BYTES, ADVICE_BYTES, os.POSIX_FADV_DONTNEED)  # the middle piece
            assert st._advise(off, length) == 0  # its ends cached: taken as warm
            os.posix_fadvise(fd, off, 4096, os.POSIX_FADV_DONTNEED)  # the first page too
            assert st._advise(off, length) == 2
            cold = 8 << 20  # another range, never read: evicted whole
            os.posix_fadvise(fd, cold, length, os.POSIX_FADV_DONTNEED)
            assert st._advise(cold, length) == 3
        finally:
            os.close(fd)
    with reader(lmdb_spec) as st:  # readahead on: never
        assert st._advise(off, length) is None
