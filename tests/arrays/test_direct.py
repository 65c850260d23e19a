"""arrays/direct.py: direct-build windows against a plain Python model of the scan's rows."""

from collections import Counter, defaultdict

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from loader.arrays.chunks import chunk_shard
from loader.arrays.direct import DIRECT_MAX_SCAN_RATIO, direct_window_records, plan_direct
from loader.arrays.scan import ENTRY_DTYPE
from loader.model.manifest import BatchEntry

CHUNK = st.tuples(st.integers(-4, 4), st.integers(-6, 6))


def scan_rows(batches: list[list[tuple]]) -> tuple[np.ndarray, list]:
    """The scan's rows and the flat batches for batches given as the chunk of each record."""
    rows, flat, first = [], [], 0
    for i, chunks in enumerate(batches):
        for (r, c), n in sorted(Counter(chunks).items()):
            rows.append((i, r, c, n))
        flat.append(BatchEntry(seq=i, shard=i % 3, first=first, count=len(chunks), checksum=0, nbytes=0))
        first += len(chunks)
    return np.array(rows, ENTRY_DTYPE), flat


def window_chunks(win) -> list[tuple]:
    crmin, ccmin, nc = win.box
    return [(crmin + o // nc, ccmin + o % nc) for o in np.flatnonzero(win.lut).tolist()]


@given(
    st.lists(st.lists(CHUNK, min_size=1, max_size=30), min_size=1, max_size=12),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 60),
)
def test_windows_cover_each_shards_chunks_once_in_key_order(batches, nshards, workers, cap):
    entries, flat = scan_rows(batches)
    plan, why = plan_direct(entries, flat, nshards, workers, cap, (10, 10), strict=True)
    records = Counter(c for chunks in batches for c in chunks)
    holders = defaultdict(set)  # chunk -> positions of the batches holding its records
    for i, chunks in enumerate(batches):
        for c in chunks:
            holders[c].add(i)
    seen = []
    for s, wins in plan.items():
        order = [c for w in wins for c in window_chunks(w)]
        assert order == sorted(order)  # key order within the shard, windows one after the other
        assert all(chunk_shard(r, c, nshards) == s for r, c in order)
        for w in wins:
            mine = window_chunks(w)
            assert w.n == sum(records[c] for c in mine)
            assert w.n <= cap or len(mine) == 1  # at least one whole chunk, else within the cap
            want = sorted(set().union(*(holders[c] for c in mine)))
            assert w.batches.tolist() == want
            assert w.whole.tolist() == [set(batches[b]) <= set(mine) for b in want]
        seen += order
    assert sorted(seen) == sorted(records)
    assert why.endswith("records read per record owned") and f"{sum(map(len, plan.values()))} windows" in why


def test_scattered_records_spill_in_auto_mode_only():
    # every batch holds one record of each of 8 chunks: a window of one chunk reads all batches
    batches = [[(0, c) for c in range(8)] for _ in range(40)]
    entries, flat = scan_rows(batches)
    plan, why = plan_direct(entries, flat, 1, 1, 40, (10, 10))
    assert plan is None and why == "each worker would read 8.0 records per record it owns"
    assert DIRECT_MAX_SCAN_RATIO < 8.0
    plan, why = plan_direct(entries, flat, 1, 1, 40, (10, 10), strict=True)
    assert len(plan[0]) == 8 and why == "8 windows, 8.00 records read per record owned"


def test_nothing_to_plan_and_boxes_too_wide():
    assert plan_direct(np.empty(0, ENTRY_DTYPE), [], 2, 2, 10, (1, 1)) == ({}, "empty")
    entries, flat = scan_rows([[(0, 0), (1, 1)]])
    assert plan_direct(entries, flat, 1, 1, 10, (2**31, 2**31), strict=True) == (
        None,
        "chunk windows too wide for one sort key",
    )
    entries, flat = scan_rows([[(0, 0), (0, 1 << 23)]])  # a window of 2**23 + 1 chunk columns
    assert plan_direct(entries, flat, 1, 1, 10, (1, 1), strict=True)[0] is None


def test_window_records_fit_three_quarters_of_the_budget():
    assert direct_window_records(512 << 20, 96) == (512 << 20) * 3 // 4 // (96 + 48)
    assert direct_window_records(1, 96) == 1
