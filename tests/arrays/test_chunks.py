"""arrays/chunks.py: chunk keys keep numeric order (negatives included), the shard map,
and the chunk histogram of a batch, against plain Python models."""

from collections import Counter

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from loader.arrays.chunks import (
    KEY_DTYPE,
    batch_chunks,
    box_fits,
    chunk_key,
    chunk_keys,
    chunk_shard,
    decode_key,
)

INT64 = st.integers(-(2**63), 2**63 - 1)
PIECE = st.integers(0, 2**32 - 1)


@given(st.lists(st.tuples(INT64, INT64, PIECE), min_size=1, max_size=60, unique=True))
def test_key_byte_order_is_row_major_chunk_order(coords):
    keys = [chunk_key(*c) for c in coords]
    assert all(len(k) == 20 for k in keys)
    assert sorted(keys) == [chunk_key(*c) for c in sorted(coords)]  # bytes order == numeric order
    assert [decode_key(k) for k in keys] == coords


@given(st.lists(st.tuples(INT64, INT64, PIECE), max_size=60))
def test_vectorised_keys_equal_one_by_one(coords):
    crow = np.array([c[0] for c in coords], np.int64)
    ccol = np.array([c[1] for c in coords], np.int64)
    piece = np.array([c[2] for c in coords], np.uint32)
    assert chunk_keys(crow, ccol, piece) == [chunk_key(*c) for c in coords]
    assert KEY_DTYPE.itemsize == 20


@given(INT64, INT64, st.integers(1, 1024))
def test_shard_map_is_sum_mod_k_without_overflow(crow, ccol, k):
    want = (crow + ccol) % k  # Python ints: no overflow
    assert chunk_shard(crow, ccol, k) == want
    got = chunk_shard(np.array([crow], np.int64), np.array([ccol], np.int64), k)
    assert int(got[0]) == want


def test_neighbouring_chunks_land_on_different_shards():
    for k in (2, 3, 7):
        for r in range(-3, 4):
            for c in range(-3, 4):
                s = chunk_shard(r, c, k)
                assert s != chunk_shard(r + 1, c, k) and s != chunk_shard(r, c + 1, k)


REC = np.dtype([("x", "<i8"), ("y", "<i4"), ("v", "<f8")])


@given(
    st.lists(st.tuples(st.integers(-(2**40), 2**40), st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=300),
    st.sampled_from([1, 2, 3, 10, 1000, 2**62]),
    st.sampled_from([1, 5, 64, 2**40]),
    st.integers(0, 2),
)
def test_batch_chunks_counts_records_per_chunk_in_key_order(xy, l0, l1, spread):
    recs = np.zeros(len(xy), REC)
    recs["x"] = [p[0] for p in xy]
    recs["y"] = [p[1] for p in xy]
    if spread == 1:  # one chunk only
        recs["x"], recs["y"] = 7, -3
    elif spread == 2:  # a narrow domain: the bincount path
        recs["x"] %= 50
        recs["y"] %= 40
    want = Counter((x // l0, y // l1) for x, y in zip(recs["x"].tolist(), recs["y"].tolist(), strict=True))
    crow, ccol, count = batch_chunks(recs, ("x", "y"), (l0, l1))
    got = list(zip(crow.tolist(), ccol.tolist(), strict=True))
    assert got == sorted(want) and count.tolist() == [want[c] for c in got]


def test_box_fits_one_int64_sort_key():
    assert box_fits(0, 0, 0, 0, (2**31, 2**30))  # 2**61 cells
    assert not box_fits(0, 0, 0, 0, (2**31, 2**31))  # 2**62: too many for one key
    assert not box_fits(-5, 4, 0, 0, (2**30, 2**29))  # 10 chunk rows * 2**59
    assert box_fits(-(2**40), -(2**40), 2**40, 2**40, (1, 1))
