"""The document generator of ``gen://docs`` (layout ``docs``, loader/docs.py).

`generate_docs(seed, start, n)` returns documents ``start .. start+n-1``: id = the record
index, text of uniformly random length 0..2000 (inclusive) whose characters are uniform
over the 95 printable ASCII characters 32..126, created_at uniform in
[2015-01-01, 2026-01-01) UTC. The output does not depend on how [0, N) is split into
ranges: randomness is counter-based per block of `BLOCK_RECORDS` records (block b of
seed S draws from ``Generator(SFC64(SeedSequence([S, b])))``: the lengths, then the
created_at values, then the characters); a range is cut from whole blocks. Characters
are exact: uint32 words are rejection-sampled below 52 * 95**4 (98.6 % accepted) and
each accepted word gives 4 base-95 digits.
"""

from __future__ import annotations

import numpy as np

from .docs import DocBatch
from .errors import UsageError


# --- the generator ------------------------------------------------------------------

#: Records per unit of counter-based randomness (changing it changes every output).
BLOCK_RECORDS = 256
TEXT_MAX = 2000
#: created_at is uniform in [CREATED_MIN, CREATED_MAX): 2015-01-01 .. 2026-01-01 UTC
CREATED_MIN = 1420070400
CREATED_MAX = 1767225600

_P2 = 95 * 95
_P4 = _P2 * _P2
_WORD_LIMIT = 52 * _P4  # largest multiple of 95**4 below 2**32
_INV2 = 1.0 / _P2
_INV4 = 1.0 / _P4
# two characters per entry: low byte = first character (little-endian uint16)
_PAIRS = ((np.arange(_P2) // 95 + 32) | ((np.arange(_P2) % 95 + 32) << 8)).astype("<u2")


def _block_rng(seed: int, block: int) -> np.random.Generator:
    return np.random.Generator(np.random.SFC64(np.random.SeedSequence([seed, block])))


def _printable(rng: np.random.Generator, n: int) -> np.ndarray:
    """n characters, exactly uniform over 32..126 (uint8)."""
    m = (n + 3) // 4
    extra = m // 50 + 64
    w = np.frombuffer(rng.bytes((m + extra) * 4), "<u4")
    w = w[w < _WORD_LIMIT]
    while len(w) < m:
        more = np.frombuffer(rng.bytes(extra * 4), "<u4")
        w = np.concatenate([w, more[more < _WORD_LIMIT]])
    f = w[:m].astype(np.float64)
    # exact floor division of integers < 2**32 in float64: (x + 0.5) / d is never
    # within rounding error of an integer
    f -= np.floor((f + 0.5) * _INV4) * _P4
    hi = np.floor((f + 0.5) * _INV2)
    f -= hi * _P2
    out = np.empty((m, 2), "<u2")
    np.take(_PAIRS, hi.astype(np.intp), out=out[:, 0])
    np.take(_PAIRS, f.astype(np.intp), out=out[:, 1])
    return out.view(np.uint8).reshape(-1)[:n]


def _block(seed: int, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = _block_rng(seed, block)
    lengths = rng.integers(0, TEXT_MAX + 1, BLOCK_RECORDS, dtype=np.int64)
    created = rng.integers(CREATED_MIN, CREATED_MAX, BLOCK_RECORDS, dtype=np.int64)
    return lengths, created, _printable(rng, int(lengths.sum()))


def generate_docs(seed: int, start: int, n: int) -> DocBatch:
    """Documents start..start+n-1 of the deterministic stream `seed` (see module doc)."""
    seed, start, n = int(seed), int(start), int(n)
    if seed < 0 or start < 0 or n < 0:
        raise UsageError(f"generate_docs: seed, start and n must be >= 0 (got {seed}, {start}, {n})")
    if n == 0:
        return DocBatch.empty()
    if start + n > 2**64:
        raise UsageError(f"generate_docs: ids {start}..{start + n - 1} exceed uint64")
    b0, b1 = start // BLOCK_RECORDS, (start + n - 1) // BLOCK_RECORDS
    lens, cas, texts = [], [], []
    for b in range(b0, b1 + 1):
        lengths, created, chars = _block(seed, b)
        lo = start - b * BLOCK_RECORDS if b == b0 else 0
        hi = start + n - b * BLOCK_RECORDS if b == b1 else BLOCK_RECORDS
        if lo or hi != BLOCK_RECORDS:
            c0 = int(lengths[:lo].sum())
            c1 = c0 + int(lengths[lo:hi].sum())
            chars = chars[c0:c1]
        lens.append(lengths[lo:hi])
        cas.append(created[lo:hi])
        texts.append(chars)
    lengths = np.concatenate(lens)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return DocBatch(
        np.arange(start, start + n, dtype=np.uint64),
        np.concatenate(cas),
        offsets,
        np.concatenate(texts) if len(texts) > 1 else texts[0].copy(),
    )


