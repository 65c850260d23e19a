"""arrays/build_emit.py: the build's row-radix ordering (`_ordered_by_rows`: a stable sort of
the rows alone, used when it leaves the keys ascending) is the argsort's order whenever it
answers, and answers for every window whose columns come in order within each row."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.arrays.build_emit import ROW_RADIX_LIMIT, _ordered_by_rows


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.integers(0, 70_000), min_size=1, max_size=400),
    l1=st.sampled_from([1, 7, 1000]),
    ordered=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_row_radix_order_is_the_argsort_order(rows, l1, ordered, seed):
    rng = np.random.default_rng(seed)
    rows = np.array(rows, np.int64)
    cols = rng.integers(0, l1, len(rows))
    if ordered:  # the columns of each row in ascending order, rows interleaved
        cols = np.sort(cols)
    key = rows * l1 + cols
    order, sk = _ordered_by_rows(key, l1)
    if order is None:  # only an unordered window, or one of too many rows, falls back
        assert not ordered or rows.max() >= ROW_RADIX_LIMIT
        return
    assert (sk == key[order]).all() and (sk == np.sort(key)).all()
    if len(np.unique(key)) == len(key):
        assert (order == np.argsort(key)).all()


def test_an_unordered_window_past_the_probe_falls_back():
    n = 200_000  # ordered for the first probe's cells, then one column out of order
    key = np.arange(n, dtype=np.int64)
    key[-2], key[-1] = key[-1], key[-2]
    assert _ordered_by_rows(key, 1 << 20) == (None, None)
    assert _ordered_by_rows(key[:-2], 1 << 20)[0] is not None
