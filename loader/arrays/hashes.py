"""Order-independent checksums of records: equal for equal multisets of records.

`record_hashes` mixes each record's bytes (in 8-byte words, zero-padded) into a 64-bit
hash (a splitmix-style finalizer); `hash_sum` adds them modulo 2**64. Finalize records
the hash sum of the duplicates it drops (``dropped_hash``), and verify checks that the
cells of an array plus those dropped records are exactly the flat records it was built
from, whatever order chunks, pieces and batches come in. Pure functions; the values are
stored in manifests, so the function must never change.
"""

from __future__ import annotations

import numpy as np

_P1 = np.uint64(0x9E3779B97F4A7C15)
_P2 = np.uint64(0xBF58476D1CE4E5B9)
_P3 = np.uint64(0x94D049BB133111EB)


def record_hashes(raw: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row of ``raw`` ((n, record_size) uint8, or records)."""
    if raw.dtype != np.uint8 or raw.ndim != 2:
        raw = np.ascontiguousarray(raw).view(np.uint8).reshape(len(raw), -1)
    n, rs = raw.shape
    w8 = -(-rs // 8) * 8
    if w8 != rs or not raw.flags.c_contiguous:
        pad = np.zeros((n, w8), np.uint8)
        pad[:, :rs] = raw
        raw = pad
    words = raw.view("<u8")
    h = np.full(n, np.uint64(rs), np.uint64)
    for k in range(words.shape[1]):
        h ^= words[:, k]
        h *= _P1
        h ^= h >> np.uint64(29)
    h ^= h >> np.uint64(30)
    h *= _P2
    h ^= h >> np.uint64(27)
    h *= _P3
    h ^= h >> np.uint64(31)
    return h


def hash_sum(raw: np.ndarray) -> int:
    """Sum (mod 2**64) of record_hashes: equal for equal multisets of records."""
    if len(raw) == 0:
        return 0
    return int(record_hashes(raw).sum(dtype=np.uint64))
