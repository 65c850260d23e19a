"""The ``gen://docs`` document generator: loader/docs_gen.py and generators/docs_gen.c."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.docs import gen as docs_gen
from loader.docs.batch import DocBatch
from loader.docs.gen import CREATED_MAX, CREATED_MIN, TEXT_MAX, generate_docs
from loader.errors import UsageError
from loader.sources import _gen

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
U64 = 2**64
#: a large sample for the statistical tests, made once (C: ~20 MB of text, ~10 ms)
STATS_DOCS = 20_000


@pytest.fixture(scope="module")
def sample():
    return generate_docs(12345, 777, STATS_DOCS)


# --- a plain-Python model written from the module docstring ------------------------------


def _m(z: int) -> int:
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) % U64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) % U64
    return z ^ (z >> 31)


def model_doc(seed: int, i: int) -> tuple[int, bytes]:
    """(created_at, text) of document i, straight from the definition in docs_gen's doc."""
    key = _m(_m(seed) ^ _m(i))

    def words():
        c = 0
        while True:
            u = _m((key + (c + 1) * 0x9E3779B97F4A7C15) % U64)
            yield u & 0xFFFFFFFF
            yield u >> 32
            c += 1

    ws = words()
    w = next(ws)
    while w >= 2**32 // 2001 * 2001:
        w = next(ws)
    length = w % 2001
    r = CREATED_MAX - CREATED_MIN
    w = next(ws)
    while w >= 2**32 // r * r:
        w = next(ws)
    created = CREATED_MIN + w % r
    text = bytearray()
    while len(text) < length:
        w = next(ws)
        if w < 52 * 95**4:
            v = w % 95**4
            text += bytes(32 + d for d in (v // 95**3, v // 95**2 % 95, v // 95 % 95, v % 95))
    return created, bytes(text[:length])


@pytest.mark.parametrize("seed,start", [(0, 0), (7, 2**63 - 2), (U64 - 1, U64 - 6)])
@pytest.mark.parametrize("impl", docs_gen.IMPLS)
def test_matches_the_documented_definition(seed, start, impl):
    b = generate_docs(seed, start, 6, impl=impl)
    for k in range(6):
        created, text = model_doc(seed, start + k)
        assert (int(b.ids[k]), int(b.created_at[k]), b.text_of(k)) == (start + k, created, text)


# --- C == numpy ------------------------------------------------------------------------------

ANCHORS = [0, 2**32, 2**53, 2**63, U64]


@st.composite
def ranges(draw, max_n=300):
    n = draw(st.integers(0, max_n))
    start = draw(st.sampled_from(ANCHORS)) + draw(st.integers(-400, 400))
    return max(0, min(start, U64 - n)), n


@settings(SETTINGS, max_examples=40)
@given(seed=st.integers(0, U64 - 1), r=ranges())
def test_c_and_numpy_are_byte_identical(seed, r):
    start, n = r
    c = generate_docs(seed, start, n, impl="c")
    py = generate_docs(seed, start, n, impl="numpy")
    assert c.equals(py)
    assert bytes(c.text) == bytes(py.text) and np.array_equal(c.offsets, py.offsets)


def test_numpy_redraws_documents_left_short(monkeypatch):
    # no spare outputs: many documents run out of accepted words and are drawn again
    monkeypatch.setattr(docs_gen, "_SPARE_DIV", 10**9)
    monkeypatch.setattr(docs_gen, "_SPARE_MIN", 0)
    assert generate_docs(3, 0, 400, impl="numpy").equals(generate_docs(3, 0, 400, impl="c"))


def test_c_constants_match():
    assert (_gen.DOCS_TEXT_MAX, _gen.DOCS_CREATED_MIN, _gen.DOCS_CREATED_MAX) == (TEXT_MAX, CREATED_MIN, CREATED_MAX)


def test_c_api_checks_its_buffers():
    ca, off = np.empty(3, np.int64), np.empty(4, np.int64)
    total = _gen.docs_meta(1, 5, ca, off)
    assert off[0] == 0 and off[-1] == total
    with pytest.raises(ValueError, match="offsets"):
        _gen.docs_meta(1, 5, ca, np.empty(3, np.int64))
    with pytest.raises(ValueError, match="2\\*\\*64"):
        _gen.docs_meta(1, U64 - 2, ca, off)
    with pytest.raises(ValueError, match="do not fit"):
        _gen.docs_text(1, 5, 3, np.empty(total - 1, np.uint8))
    text = np.empty(total, np.uint8)
    assert _gen.docs_text(1, 5, 3, text) == total
    assert bytes(text) == b"".join(model_doc(1, i)[1] for i in (5, 6, 7))


# --- split invariance, ranges, errors ---------------------------------------------------


@SETTINGS
@given(seed=st.integers(0, 2**63), n=st.integers(0, 5000), data=st.data())
def test_generate_is_split_invariant(seed, n, data):
    whole = generate_docs(seed, 0, n)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4)))
    bounds = [0, *cuts, n]
    parts = [generate_docs(seed, a, b - a) for a, b in itertools.pairwise(bounds)]
    assert DocBatch.concat(parts).equals(whole)
    assert len(whole) == n
    assert np.array_equal(whole.ids, np.arange(n, dtype=np.uint64))


@SETTINGS
@given(seed=st.integers(0, U64 - 1), r=ranges(max_n=200), data=st.data())
def test_generate_is_split_invariant_near_the_anchors(seed, r, data):
    start, n = r
    whole = generate_docs(seed, start, n)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
    bounds = [0, *cuts, n]
    parts = [generate_docs(seed, start + a, b - a) for a, b in itertools.pairwise(bounds)]
    assert DocBatch.concat(parts).equals(whole)
    assert whole.ids.tolist() == list(range(start, start + n))


def test_generate_values_in_range():
    b = generate_docs(5, 1000, 785)
    lengths = b.lengths
    assert lengths.min() >= 0 and lengths.max() <= TEXT_MAX
    assert b.text.min() >= 32 and b.text.max() <= 126
    assert b.created_at.min() >= CREATED_MIN and b.created_at.max() < CREATED_MAX
    assert b.ids[0] == 1000 and b.ids.dtype == np.uint64 and b.created_at.dtype == np.int64
    assert b.offsets.dtype == np.int64 and b.text.dtype == np.uint8
    big = generate_docs(1, 0, 4000)
    counts = np.bincount(big.text, minlength=127)[32:127]
    assert (counts > 0).all()  # all 95 characters occur
    assert counts.max() / counts.min() < 1.15
    assert abs(big.lengths.mean() - TEXT_MAX / 2) < 50
    # different seeds differ; same seed is the same
    assert not generate_docs(2, 0, 10).equals(generate_docs(3, 0, 10))
    assert generate_docs(2, 0, 10).equals(generate_docs(2, 0, 10))


def test_generate_rejects_bad_arguments():
    with pytest.raises(UsageError):
        generate_docs(-1, 0, 5)
    with pytest.raises(UsageError):
        generate_docs(1, 2**64 - 2, 5)
    with pytest.raises(UsageError, match="seed"):
        generate_docs(U64, 0, 5)
    with pytest.raises(UsageError, match="implementation"):
        generate_docs(1, 0, 5, impl="python")
    assert len(generate_docs(1, 7, 0)) == 0
    last = generate_docs(1, U64 - 3, 3)  # the last ids are fine
    assert last.ids.tolist() == [U64 - 3, U64 - 2, U64 - 1]


# --- statistics ------------------------------------------------------------------------------


def test_lengths_are_uniform_over_0_to_text_max(sample):
    lengths = sample.lengths
    assert lengths.min() == 0 and lengths.max() == TEXT_MAX
    # mean 1000, standard error ~4
    assert abs(lengths.mean() - TEXT_MAX / 2) < 20
    assert len(sample.text) == lengths.sum()


def test_characters_are_uniform_printable_ascii(sample):
    counts = np.bincount(sample.text, minlength=256)
    assert counts[:32].sum() == 0 and counts[127:].sum() == 0
    counts = counts[32:127]
    assert (counts > 0).all()
    expected = len(sample.text) / 95
    chi2 = (((counts - expected) ** 2) / expected).sum()
    assert chi2 < 160  # 94 degrees of freedom: P(chi2 > 160) ~ 2e-5


def test_no_modulo_bias_in_characters(sample):
    # Taking w % 95**4 of *every* word (no rejection) would make the first character of each
    # group of 4 ~1.9 % more likely to be one of the digits 0..68 than one of 70..94.
    groups = (sample.lengths + 3) // 4  # groups of 4 characters per document
    first_group = np.cumsum(groups) - groups
    within = np.arange(groups.sum()) - np.repeat(first_group, groups)
    first = sample.text[np.repeat(sample.offsets[:-1], groups) + 4 * within].astype(np.int64) - 32
    counts = np.bincount(first, minlength=95)
    ratio = counts[:69].mean() / counts[70:].mean()
    assert abs(ratio - 1) < 0.006, ratio  # standard error ~0.001; biased: 1.019


def test_created_at_is_uniform_without_modulo_bias(sample):
    ca = sample.created_at
    assert ca.min() >= CREATED_MIN and ca.max() < CREATED_MAX
    # many more values, without their texts: the C header pass alone
    n = 200_000
    ca, offsets = np.empty(n, np.int64), np.empty(n + 1, np.int64)
    _gen.docs_meta(99, 0, ca, offsets)
    assert ca.min() >= CREATED_MIN and ca.max() < CREATED_MAX
    r = CREATED_MAX - CREATED_MIN
    assert ca.min() - CREATED_MIN < r / 10_000 and CREATED_MAX - ca.max() < r / 10_000
    # w % r of every word (no rejection) would put 39.1 % (not 37.2 %) below 2**32 - 12 r
    low = 2**32 - 12 * r
    frac = (ca - CREATED_MIN < low).mean()
    assert abs(frac - low / r) < 0.005, frac  # standard error ~0.0011
    # and the lengths: 0..2000 all occur, with the expected spread
    counts = np.bincount(np.diff(offsets), minlength=TEXT_MAX + 1)
    assert len(counts) == TEXT_MAX + 1 and (counts > 0).all()
    expected = n / (TEXT_MAX + 1)
    assert (((counts - expected) ** 2) / expected).sum() < 2300  # 2000 dof: P(>2300) ~ 1e-5
