"""Where a cell goes: its chunk, the chunk's key and the shard that stores it.

- Chunk of a cell: ``(crow, ccol) = (floor(r / L0), floor(c / L1))`` (negative
  coordinates included: floor, not truncation).
- Key of a chunk piece: 20 bytes, big-endian, ``crow + 2**63`` (u64), ``ccol + 2**63``
  (u64), piece (u32) (`KEY_FORMAT`): byte order is numeric, row-major chunk order, so
  chunks are written in key order (LMDB append, RocksDB SST files).
- Chunk -> shard: ``(crow + ccol) mod K`` (`SHARD_MAP`): neighbouring chunks, left/right
  and up/down, land on different shards.

`KEY_FORMAT` and `SHARD_MAP` are also written into each array's manifest summary. Pure
functions.
"""

from __future__ import annotations

import struct

import numpy as np

from ..errors import InputError

SHARD_MAP = "(chunk_row + chunk_col) mod shards"
KEY_FORMAT = "u64be(chunk_row + 2**63) u64be(chunk_col + 2**63) u32be(piece)"
KEY_DTYPE = np.dtype([("r", ">u8"), ("c", ">u8"), ("p", ">u4")])
#: sort keys of one window are int64: (chunk ordinal in the box * L0 + row) * L1 + column
SORT_KEY_LIMIT = 2**62

_KEY = struct.Struct(">QQI")
_TOP = 1 << 63


def chunk_key(crow: int, ccol: int, piece: int = 0) -> bytes:
    """Big-endian, order-preserving key of a chunk piece (negative coordinates included)."""
    return _KEY.pack(int(crow) + _TOP, int(ccol) + _TOP, int(piece))


def decode_key(key: bytes) -> tuple[int, int, int]:
    r, c, p = _KEY.unpack(bytes(key))
    return r - _TOP, c - _TOP, p


def chunk_keys(crow: np.ndarray, ccol: np.ndarray, piece: np.ndarray) -> list[bytes]:
    """Vectorised chunk_key."""
    a = np.empty(len(crow), KEY_DTYPE)
    a["r"] = np.asarray(crow, np.int64).view(np.uint64) ^ np.uint64(_TOP)
    a["c"] = np.asarray(ccol, np.int64).view(np.uint64) ^ np.uint64(_TOP)
    a["p"] = piece
    raw = a.tobytes()
    n = KEY_DTYPE.itemsize
    return [raw[i : i + n] for i in range(0, len(raw), n)]


def chunk_shard(crow, ccol, nshards: int):
    """The shard that owns chunk (crow, ccol): (crow + ccol) mod K (no int64 overflow)."""
    return (crow % nshards + ccol % nshards) % nshards


def box_fits(crmin: int, crmax: int, ccmin: int, ccmax: int, chunks: tuple) -> bool:
    """Whether one int64 sort key covers a window whose chunks lie in this box."""
    return (crmax - crmin + 1) * (ccmax - ccmin + 1) * chunks[0] * chunks[1] < SORT_KEY_LIMIT


def int64_coordinates(values: np.ndarray, dim: str, record_of) -> np.ndarray:
    """A dimension's values as int64 coordinates (a time field's counts of its unit); an
    InputError naming the record (``record_of(i)``: the dataset index of value i) when a
    uint64 value is beyond int64 (>= 2**63)."""
    if values.dtype == np.uint64 and len(values):
        big = values >= np.uint64(2**63)
        if big.any():
            i = int(np.argmax(big))
            raise InputError(
                f"dimension {dim!r}: record {record_of(i)} holds {int(values[i])}, beyond the int64 "
                "coordinates of an array (at most 2**63-1); nothing was written - use another "
                "dimension, or load the records with that field below 2**63"
            )
    return values.astype(np.int64)


def batch_chunks(
    recs: np.ndarray, dims: tuple, chunks: tuple, first: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(crow, ccol, count) of the chunks the records (dataset records first..) fall in, in key order."""
    r = int64_coordinates(recs[dims[0]], dims[0], lambda i: first + i)
    c = int64_coordinates(recs[dims[1]], dims[1], lambda i: first + i)
    qr = np.floor_divide(r, chunks[0])
    qc = np.floor_divide(c, chunks[1])
    rmin, rmax, cmin, cmax = int(qr.min()), int(qr.max()), int(qc.min()), int(qc.max())
    if rmin == rmax and cmin == cmax:
        return np.array([rmin]), np.array([cmin]), np.array([len(recs)])
    nc = cmax - cmin + 1
    if (rmax - rmin + 1) * nc <= max(4 * len(recs), 1 << 16):
        cnt = np.bincount((qr - rmin) * nc + (qc - cmin))
        g = np.flatnonzero(cnt)
        return g // nc + rmin, g % nc + cmin, cnt[g]
    o = np.lexsort((qc, qr))
    sr, sc = qr[o], qc[o]
    st = np.flatnonzero(np.r_[True, (sr[1:] != sr[:-1]) | (sc[1:] != sc[:-1])])
    return sr[st], sc[st], np.diff(np.r_[st, len(recs)])
