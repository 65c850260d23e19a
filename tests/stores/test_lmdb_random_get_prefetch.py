"""Readahead off (``readahead=0``, the random-read option) covers every read path of the
LMDB backend: an exact `get` (what `Dataset.read_records` uses) and a zero-copy value
view's `get` (chunk reads of box queries) advise the kernel of a big value's overflow
pages in one request, like `seek`; with readahead on, none of them advises anything."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from .store_helpers import evict, evict_shard, k, reader, resident_pages, writer


def _spied(st) -> list:
    """The (file offset, length) of every value the store is about to advise (readahead off)."""
    spans = []
    real = st._advise

    def advise(offset, length):
        spans.append((offset, length))
        return real(offset, length)

    st._advise = advise
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
        assert len(spans) == 3  # a value in its leaf page, or none: no advice
        for i, (off, n) in zip((2, 0, 1), spans, strict=True):
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
        assert spans == []


def test_readahead_off_advises_only_what_is_not_in_the_page_cache(lmdb_spec):
    """A value whose ends are cached is not advised again (the advice walks every page of its
    range: a warm box query paid ~0.13 ms for it); else every piece whose ends are not
    cached is. Each case starts from the range evicted whole (a partial DONTNEED can leave
    a large folio behind) and caches single pages of it."""
    from loader.stores.lmdb_reads import ADVICE_BYTES as ADV

    with writer(lmdb_spec) as w:
        w.put_sorted([(k(100 + i), bytes(1 << 20)) for i in range(12)])
    data = os.path.join(lmdb_spec.shard_path(0), "data.mdb")
    off, length = 4 << 20, 3 * ADV  # three pieces inside the values, away from the file's ends
    end = off + length - 1
    cases = [
        ((off, end), 0),  # the value's ends: taken as warm, its middle faults page by page
        ((off + 2 * ADV, end), 2),  # the last piece's ends: the other two are asked for
        ((off + ADV, off + 2 * ADV - 1, end), 2),  # the middle piece's: the first and last
        ((), 3),
    ]  # none: every piece
    with reader(lmdb_spec, readahead="0") as st:
        fd = os.open(data, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # reads bring in only their page
            for warm, want in cases:
                evict(data, off, length)
                for at in warm:
                    os.pread(fd, 1, at)
                probes = (off, off + ADV - 1, off + ADV, off + 2 * ADV - 1, off + 2 * ADV, end)
                assert [resident_pages(data, at, 1) for at in probes] == [int(at in warm) for at in probes]
                assert st._advise(off, length) == want, warm
        finally:
            os.close(fd)
    with reader(lmdb_spec) as st:  # readahead on: never
        assert st._advise(off, length) is None


def _mapped_kib(path: str) -> int:
    """KiB of ``path``'s mapping resident in this process's page tables (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                inside = head[-1] == path
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.parametrize("how", ["get", "view"])
def test_readahead_off_a_warm_value_is_not_walked_and_a_cold_one_is_advised(lmdb_spec, how):
    """With readahead off, a big value found in the page cache is handed out without
    py-lmdb's walk over every page of it (~14 us for a 9.6 MB chunk piece, paid by every
    warm box query): none of its pages enters this process until its bytes are read. An
    evicted one is advised first and reads the same."""
    big = np.random.default_rng(11).bytes(8 << 20)
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), big), (k(2), b"small")])
    data = os.path.realpath(os.path.join(lmdb_spec.shard_path(0), "data.mdb"))
    with open(data, "rb") as f:
        f.read()  # warm
    with reader(lmdb_spec, readahead="0") as st:
        spans = _spied(st)
        view = st.value_view("batches")
        try:
            before = _mapped_kib(data)
            got = view.get(k(1)) if how == "view" else None
            if got is not None:
                assert _mapped_kib(data) - before < 1024  # not walked: < 1 MiB of 8 mapped
                assert bytes(got) == big
            else:
                assert st.get(k(1)) == big
            assert len(spans) == 1
        finally:
            view.close()
    evict_shard(lmdb_spec)  # unmapped (the reader is closed): dropped from the page cache
    with reader(lmdb_spec, readahead="0") as st:
        asked = []
        real = st._advise
        st._advise = lambda off, n: asked.append(real(off, n)) or asked[-1]
        view = st.value_view("batches")
        try:
            got = view.get(k(1)) if how == "view" else st.get(k(1))
            assert asked and asked[0] >= 1  # cold: advised, in pieces
            assert bytes(got) == big
        finally:
            view.close()


def test_readahead_off_never_takes_a_cold_value_for_a_warm_one(lmdb_spec):
    """The page-cache check reads nothing: a one-byte RWF_NOWAIT read of a cold page starts
    reading it, and on a fast disk finished in time to pass it for cached - 6 of 200 cold
    gets here were then handed out unadvised, faulting page by page."""
    big = np.random.default_rng(5).bytes(2 << 20)
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), big)])
    for _ in range(60):
        evict_shard(lmdb_spec)
        with reader(lmdb_spec, readahead="0") as st:
            asked = []
            real = st._advise
            st._advise = lambda off, n, asked=asked, real=real: asked.append(real(off, n)) or asked[-1]
            assert st.get(k(1)) == big
            assert asked == [len(big) // (512 << 10) + 1]  # every piece, the overflow header's too


@pytest.mark.parametrize("how", ["cachestat", "mincore"])
def test_the_page_cache_check_reads_nothing(lmdb_spec, monkeypatch, how):
    """Asking whether a page is cached leaves a cold page cold (a RWF_NOWAIT probe started
    reading it) and finds a warm one: by cachestat, or by mincore of the map where the
    kernel lacks cachestat."""
    from loader.infra import pagecache

    if how == "mincore":
        monkeypatch.setattr(pagecache, "_has_cachestat", False)
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), bytes(4 << 20))])
    data = os.path.join(lmdb_spec.shard_path(0), "data.mdb")
    spots = [(1 << 20) + i * 100_003 for i in range(20)]
    evict(data, 1 << 20, 3 << 20)
    with reader(lmdb_spec, readahead="0") as st:
        fd, base = st._data_file(), st._pages().base

        def cached(at):
            return pagecache.page_cached(fd, at, base + at)

        assert not any(cached(at) for at in spots)
        time.sleep(0.05)  # what a probe started would have landed by now
        assert [resident_pages(data, at, 1) for at in spots] == [0] * len(spots)
        with open(data, "rb") as f:
            for at in spots:
                os.pread(f.fileno(), 1, at)
        assert all(cached(at) for at in spots)
        assert st._advise(spots[1], 1) == 0 and st._advise(spots[1] - 4096, 2) == 1  # a cold page before it
