"""The document generator of ``gen://docs`` (layout ``docs``, layout.py).

`generate_docs(seed, start, n)` returns documents ``start .. start+n-1``: id = the record
index, text of uniformly random length 0..2000 (inclusive) whose characters are uniform
over the 95 printable ASCII characters 32..126, created_at uniform in
[2015-01-01, 2026-01-01) UTC. Every value is exact (rejection sampling, no modulo bias).

The definition (counter-based per document, so document i is a pure function of
(seed, i) and the output does not depend on how [0, N) is split into ranges). All
arithmetic is on uint64, mod 2**64; ``M`` is the splitmix64 finalizer::

    M(z):  z ^= z >> 30;  z *= 0xBF58476D1CE4E5B9;  z ^= z >> 27;
           z *= 0x94D049BB133111EB;  z ^= z >> 31

For document i (0 <= i < 2**64) of stream seed (0 <= seed < 2**64), with
``G = 0x9E3779B97F4A7C15``:

1. ``key = M(M(seed) ^ M(i))``; outputs ``u_c = M(key + (c + 1) * G)`` for c = 0, 1, ...
   (splitmix64 started from ``key``);
2. its word stream (uint32) is ``lo32(u_0), hi32(u_0), lo32(u_1), hi32(u_1), ...``, and
   words are consumed in that order;
3. length ``L``: the first word w < 2001 * floor(2**32 / 2001) gives ``L = w % 2001``;
4. created_at: the next word w < R * floor(2**32 / R), ``R = CREATED_MAX - CREATED_MIN``,
   gives ``created_at = CREATED_MIN + w % R``;
5. text: each next word w < 52 * 95**4 (98.6 % of them) gives 4 characters, ``32 +`` the
   4 base-95 digits of ``w % 95**4``, most significant first; words are taken until L
   characters are written (the surplus characters of the last word are dropped).

Two implementations give the same bytes: ``impl="c"`` (``loader.sources._gen``, generators/
docs_gen.c; > 1 GB/s of text per core, the GIL released) and ``impl="numpy"``
(vectorised, the reference the C code is tested against).

Pure: nothing here writes a store or a file.
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from ..sources.generators import c_generators
from .batch import DocBatch

# --- the generator ------------------------------------------------------------------

TEXT_MAX = 2000
#: created_at is uniform in [CREATED_MIN, CREATED_MAX): 2015-01-01 .. 2026-01-01 UTC
CREATED_MIN = 1420070400
CREATED_MAX = 1767225600
#: implementations of `generate_docs`
IMPLS = ("c", "numpy")

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_LO32 = np.uint64(0xFFFFFFFF)
_P2 = 95 * 95
_P4 = _P2 * _P2
_LEN_MOD = TEXT_MAX + 1
_LEN_LIMIT = 2**32 // _LEN_MOD * _LEN_MOD
_CA_MOD = CREATED_MAX - CREATED_MIN
_CA_LIMIT = 2**32 // _CA_MOD * _CA_MOD
_CHAR_LIMIT = 2**32 // _P4 * _P4  # 52 * 95**4
# two characters per entry: 32 + v // 95, 32 + v % 95
_PAIRS = np.stack([np.arange(_P2) // 95 + 32, np.arange(_P2) % 95 + 32], axis=1).astype(np.uint8)
_PAIRS16 = _PAIRS.view(np.uint16).reshape(-1)
#: documents per step of the numpy implementation (keeps the temporaries small)
_NUMPY_CHUNK = 2048
# spare outputs drawn per document for rejected words: need // _SPARE_DIV + _SPARE_MIN
# (some 10 standard deviations above the expected 1.4 % rejected; a document left short is
# redrawn with more)
_SPARE_DIV = 32
_SPARE_MIN = 4


def _mix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer M, elementwise on a uint64 array (a new array)."""
    z = z ^ (z >> np.uint64(30))
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def _word(keys: np.ndarray, k: int) -> np.ndarray:
    """Word k of the streams of the documents with these keys (uint32 values as int64)."""
    u = _mix(keys + np.uint64(k // 2 + 1) * _GAMMA)
    return ((u >> np.uint64(32 * (k & 1))) & _LO32).astype(np.int64)


def _numpy_chunk(seed: int, start: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(created_at, lengths, text) of documents start..start+n-1 (n >= 1)."""
    with np.errstate(over="ignore"):
        ids = np.arange(n, dtype=np.uint64) + np.uint64(start)
        keys = _mix(_mix(np.array([seed], np.uint64)) ^ _mix(ids))

        # header: length, then created_at, rejection-sampled word by word
        lengths = np.zeros(n, np.int64)
        created = np.zeros(n, np.int64)
        phase = np.zeros(n, np.int8)  # 0: wants the length, 1: created_at, 2: done
        first = np.zeros(n, np.uint64)  # the word index where the text starts
        k = 0
        while True:
            todo = np.flatnonzero(phase < 2)
            if not len(todo):
                break
            w = _word(keys[todo], k)
            ph = phase[todo]
            got_len = (ph == 0) & (w < _LEN_LIMIT)
            got_ca = (ph == 1) & (w < _CA_LIMIT)
            lengths[todo[got_len]] = w[got_len] % _LEN_MOD
            created[todo[got_ca]] = CREATED_MIN + w[got_ca] % _CA_MOD
            first[todo[got_ca]] = k + 1
            phase[todo] = ph + got_len + got_ca
            k += 1

        # text: need = ceil(L / 4) accepted words per document, from word `first` on. Whole
        # outputs u_c (two words) are drawn from c = first // 2; an odd `first` skips the
        # low word of the first of them.
        need = (lengths + 3) // 4
        skip = (first & np.uint64(1)).astype(np.int64)
        c0 = first >> np.uint64(1)
        extra = need // _SPARE_DIV + _SPARE_MIN  # spare outputs for rejections; more if too few
        while True:
            m = (need + 1) // 2 + 1 + extra  # outputs per document
            base = np.cumsum(m) - m
            # c = c0 + (position within the document's outputs)
            c = np.arange(int(m.sum()), dtype=np.uint64) - np.repeat(base.astype(np.uint64) - c0, m)
            u = _mix(np.repeat(keys, m) + (c + np.uint64(1)) * _GAMMA)
            w = np.empty((len(u), 2), np.uint32)
            w[:, 0] = u & _LO32
            w[:, 1] = u >> np.uint64(32)
            w = w.reshape(-1)
            accept = w < np.uint32(_CHAR_LIMIT)
            accept[2 * base[skip == 1]] = False
            before: np.ndarray = np.cumsum(accept) - accept  # accepted words before each word
            got = before[2 * (base + m) - 1] + accept[2 * (base + m) - 1] - before[2 * base]
            short = got < need
            if not short.any():
                break
            extra[short] = extra[short] * 4 + 32
        # a document's first `need` accepted words
        w = w[accept & (before < np.repeat(before[2 * base] + need, 2 * m))]

    r = w % np.uint32(_P4)
    hi = r // np.uint32(_P2)
    lo = r - hi * np.uint32(_P2)
    quads = np.empty((len(w), 2), np.uint16)  # native uint16 views of _PAIRS' byte pairs
    np.take(_PAIRS16, hi.astype(np.intp), out=quads[:, 0])
    np.take(_PAIRS16, lo.astype(np.intp), out=quads[:, 1])
    chars = quads.view(np.uint8).reshape(-1)
    # drop the 4 * need - L surplus characters at the end of each document
    ends = np.cumsum(4 * need)
    surplus = 4 * need - lengths
    keep = np.ones(len(chars), bool)
    for j in (1, 2, 3):
        keep[ends[surplus >= j] - j] = False
    return created, lengths, chars[keep]


def _generate_numpy(seed: int, start: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    parts = [_numpy_chunk(seed, start + s, min(_NUMPY_CHUNK, n - s)) for s in range(0, n, _NUMPY_CHUNK)]
    if len(parts) == 1:
        return parts[0]
    created, lengths, chars = (np.concatenate(p) for p in zip(*parts))
    return created, lengths, chars


def _generate_c(seed: int, start: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _gen = c_generators("impl='numpy'")
    created = np.empty(n, np.int64)
    offsets = np.empty(n + 1, np.int64)
    total = _gen.docs_meta(seed, start, created, offsets)
    text = np.empty(total, np.uint8)
    written = _gen.docs_text(seed, start, n, text)
    assert written == total, (written, total)
    return created, offsets, text


def generate_docs(seed: int, start: int, n: int, *, impl: str = "c") -> DocBatch:
    """Documents start..start+n-1 of the deterministic stream `seed` (see module doc)."""
    seed, start, n = int(seed), int(start), int(n)
    if impl not in IMPLS:
        raise UsageError(f"generate_docs: unknown implementation {impl!r}; use one of: {', '.join(IMPLS)}")
    if seed < 0 or start < 0 or n < 0:
        raise UsageError(f"generate_docs: seed, start and n must be >= 0 (got {seed}, {start}, {n})")
    if seed >= 2**64:
        raise UsageError(f"generate_docs: seed {seed} is too large; use a seed below 2**64")
    if n == 0:
        return DocBatch.empty()
    if start + n > 2**64:
        raise UsageError(f"generate_docs: ids {start}..{start + n - 1} exceed uint64")
    ids = np.arange(n, dtype=np.uint64) + np.uint64(start)
    if impl == "c":
        created, offsets, text = _generate_c(seed, start, n)
    else:
        created, lengths, text = _generate_numpy(seed, start, n)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
    return DocBatch(ids, created, offsets, text)
