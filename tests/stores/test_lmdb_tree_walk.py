"""An untouched LMDB get (`LmdbValueView.get(key, touch=False)`, the random-read paths)
finds its value by walking the table's branch and leaf pages itself (`Pages.find`, in C:
_lmdbnode.c), because LMDB's own lookup reads the value's first page - a disk read the
caller would wait for before asking for the pages it needs. The walk must find exactly
what LMDB finds in any tree shape, read none of the value's pages, and on a damaged tree
either find the same or hand over to LMDB: never read outside the pages in use."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.errors import CorruptStoreError
from loader.stores.lmdb_files import OVERFLOW_HEAD

from .store_helpers import evict, make_spec, reader, resident_pages, writer

SIZES = [0, 1, 40, 500, 2000, 4050, 4096, 9000, 70_000]  # in the leaf page, and in overflow pages


def _store(spec, table: dict[bytes, bytes], groups: int, drop: list[bytes]) -> None:
    """``table`` written in ``groups`` interleaved sorted calls (the first appends, the others
    insert between: ordinary page splits), then the keys in ``drop`` deleted."""
    keys = sorted(table)
    with writer(spec) as w:
        for g in range(groups):
            w.put_sorted([(key, table[key]) for key in keys[g::groups]], table="t")
        for key in drop:
            w.delete_range(key, key + b"\0", table="t")
        w.sync()


def _check_walk(spec, table: dict[bytes, bytes], probes: list[bytes]) -> int:
    """Every key through the walk gives its value; every probe not stored gives None and
    the walk does not claim it. Returns the table's depth."""
    with reader(spec, readahead="0") as st_:
        view = st_.value_view("t")
        try:
            for key, value in table.items():
                got = view.get(key, touch=False)
                assert got is not None and bytes(got) == value, key
                assert view.find(key) is not None  # found by the walk, not handed to LMDB
            for key in probes:
                if key not in table:
                    assert view.find(key) is None
                    assert view.get(key, touch=False) is None
            return view.tree[1]
        finally:
            view.close()


keys_st = st.lists(st.binary(min_size=1, max_size=90), min_size=1, max_size=400, unique=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=keys_st, groups=st.integers(1, 4), data=st.data())
def test_the_walk_finds_what_lmdb_stores_in_any_tree(tmp_path_factory, keys, groups, data):
    spec = make_spec("lmdb", tmp_path_factory.mktemp("walk"))
    rng = np.random.default_rng(len(keys))
    table = {key: rng.bytes(SIZES[i % len(SIZES)]) for i, key in enumerate(keys)}
    drop = data.draw(st.lists(st.sampled_from(keys), max_size=len(keys) // 3, unique=True))
    _store(spec, table, groups, drop)
    for key in drop:
        del table[key]
    probes = drop + [key + b"\0" for key in keys[:20]] + [key[:-1] for key in keys[:20] if len(key) > 1]
    _check_walk(spec, table, probes)


def test_the_walk_descends_three_levels(lmdb_spec):
    rng = np.random.default_rng(7)
    table = {rng.bytes(200) + i.to_bytes(4, "big"): rng.bytes(SIZES[i % len(SIZES)]) for i in range(6000)}
    _store(lmdb_spec, table, 3, [])
    assert _check_walk(lmdb_spec, table, [rng.bytes(204) for _ in range(50)]) >= 3


def test_an_untouched_get_reads_none_of_the_values_pages(lmdb_spec):
    """Cold store: the walk reads the tree's pages and leaves every page of the values out
    of the page cache; LMDB's lookup (the control, on values not looked up before) reads
    each value's first page. (The first value is not looked at: opening the store reads
    its meta pages with the kernel's readahead, which reaches into it.)"""
    big = {i.to_bytes(8, "big"): np.random.default_rng(i).bytes(64 * 4096) for i in range(7)}
    _store(lmdb_spec, big, 1, [])
    data = os.path.join(lmdb_spec.shard_path(0), "data.mdb")
    evict(data)  # whole (a partial eviction can leave a large folio behind), before anything maps it
    with reader(lmdb_spec, readahead="0") as st_:
        view = st_.value_view("t")
        try:
            keys = list(big)[1:]
            for key in keys[:3]:
                got = view.get(key, touch=False)
                start, size, in_overflow = view.find(key)
                assert in_overflow and size == len(big[key]) == len(got)
                assert resident_pages(data, start - OVERFLOW_HEAD, size + OVERFLOW_HEAD) == 0
            assert bytes(got[-100:]) == big[keys[2]][-100:]  # the bytes are the value's
            for key in keys[3:]:
                start, size, _ = view.find(key)
                assert view.cursor.set_key(key) and resident_pages(data, start - OVERFLOW_HEAD, 4096) == 1
        finally:
            view.close()


_P_BRANCH, _P_LEAF = 0x01, 0x02


@pytest.mark.parametrize("seed", range(12))
def test_a_damaged_tree_is_found_the_same_or_handed_to_lmdb(lmdb_spec, seed):
    """Random bytes of the table's branch and leaf pages flipped (any of them: headers,
    node offsets, sizes, page numbers): every get answers a value inside the map, None, or
    a CorruptStoreError - never a crash, never a read outside the pages in use."""
    rng = np.random.default_rng(seed)
    table = {rng.bytes(30) + i.to_bytes(4, "big"): rng.bytes(SIZES[i % len(SIZES)]) for i in range(1500)}
    _store(lmdb_spec, table, 2, [])
    data = os.path.join(lmdb_spec.shard_path(0), "data.mdb")
    with open(data, "r+b") as f:
        raw = f.read()
        tree = [
            p
            for p in range(2, len(raw) // 4096)
            if struct.unpack_from("<H", raw, p * 4096 + 10)[0] & 0xFF in (_P_BRANCH, _P_LEAF)
        ]
        for _ in range(40):
            p = int(rng.choice(tree))
            at = p * 4096 + int(rng.integers(8, 4096))
            f.seek(at)
            f.write(bytes([int(rng.integers(0, 256))]))
    answered = 0
    with reader(lmdb_spec, readahead="0") as st_:
        try:
            view = st_.value_view("t")
        except CorruptStoreError:
            return
        try:
            for key in table:
                try:
                    got = view.get(key, touch=False)
                except CorruptStoreError:
                    continue
                if got is not None:
                    answered += 1
                    assert len(got) <= view.pages.in_use
                    bytes(got[:1]), bytes(got[-1:])  # readable: inside the map
        finally:
            view.close()
    assert answered > 0  # most of the tree is intact: the damage did not stop every read
