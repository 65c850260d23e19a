"""The checksum of a batch value in its catalog row, and its check: the one place that
computes it (the load's writers, compaction) and checks it (every read, `bulkload verify`).

A row pins its value by size (``nbytes``) and ``checksum``. For most values the checksum
is the xxh3_64 of all their bytes. A BLZ3 value (a Cap'n Proto batch with LZ4: its 40-byte
header, then the BLZ3 framing of serializers/shuffled.py) carries the xxh3_64 of each of
its blocks right after its block table; its row's checksum is the xxh3_64 of its bytes up
to the end of those hashes (the header, the BLZ3 head, table and block hashes), so the row
still pins every byte: the size pins where the blocks end, the hashes each block.

- whole check (`value_ok`, ``whole=True``): size, head hash and every block's hash - what
  `bulkload verify`, compaction and every read that does not decode the value check;
- head check (``whole=False``): size and head hash only, for a reader that decodes the
  value through its serializer, which checks the hash of each block it decodes before
  decoding it (C: `_shuffle.blocks_decode`): a scan of a few columns hashes only their
  blocks. A value of any other framing is checked whole either way.

Whether a value is BLZ3 is read from its bytes (magic b"BLZ3" at byte 40, a block count
that fits); a value whose bytes only look so (an uncompressed record that starts with
those bytes) was written with the whole-value checksum, which its head hash does not
match: it is then checked whole. The writer says which it wrote (``blocks``).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import xxhash

if TYPE_CHECKING:
    from .bytes_like import BytesLike

#: what a check reports of stored bytes that do not have their checksum (a batch, a chunk,
#: a range of documents; `bulkload verify` and the readers)
CHANGED = "checksum mismatch (stored bytes changed)"
#: the magic of a value framing with block hashes (serializers/shuffled.py MAGIC)
MAGIC = b"BLZ3"
#: where that framing starts in a batch value: after the Cap'n Proto header
#: (serializers/capnp_framing.py HEADER_BYTES)
FRAMED_AT = 40
_HEAD_BYTES = 28  # magic, codec, stride, size, k, zero (shuffled.py)
_PROBE = struct.Struct("<4s16xI")  # at FRAMED_AT: the magic, and k
_ENTRY = struct.Struct("<IIB3xI")  # a block table entry: lo, hi, mode, compressed bytes
_HASH = struct.Struct("<Q")


def hashed_end(value: BytesLike) -> int | None:
    """Where the block hashes of the BLZ3 value ``value`` (a buffer of bytes) end, or None
    unless it has the BLZ3 magic at `FRAMED_AT` and room for the table and hashes it names.
    (Per batch: one unpack, no views - a load's 100-record batches pay it 200,000 times.)"""
    size = len(value)
    if size < FRAMED_AT + _HEAD_BYTES:
        return None
    magic, k = _PROBE.unpack_from(value, FRAMED_AT)
    end: int = FRAMED_AT + _HEAD_BYTES + (_ENTRY.size + _HASH.size) * k
    return end if magic == MAGIC and k and end <= size else None


def batch_checksum(value: BytesLike, blocks: bool = False) -> int:
    """The ``checksum`` of a catalog row of ``value``: with ``blocks`` (its serializer
    writes BLZ3: `Serializer.hashes_blocks`) and BLZ3 framing, the xxh3_64 of its bytes up
    to the end of its block hashes; else (an older BLZ2 value compaction copies, any other
    format) of all its bytes."""
    end = hashed_end(value) if blocks else None
    return xxhash.xxh3_64_intdigest(value if end is None else memoryview(value)[:end])


def value_ok(value: bytes | bytearray | memoryview, checksum: int, whole: bool = True) -> bool:
    """Whether ``value`` (of the row's size: the caller checks it) has the row's
    ``checksum``: a BLZ3 value its head hash and (``whole``) every block's hash; any other
    value the hash of all its bytes (module doc)."""
    end = hashed_end(value)
    if end is not None and xxhash.xxh3_64_intdigest(value[:end]) == checksum:
        return not whole or _blocks_ok(memoryview(value).cast("B"), end)
    return xxhash.xxh3_64_intdigest(value) == checksum


def _blocks_ok(mv: memoryview, end: int) -> bool:
    """Whether each block of the BLZ3 value ``mv`` (its hashes end at ``end``) has its hash,
    and the blocks end where the value does."""
    table = FRAMED_AT + _HEAD_BYTES
    k = (end - table) // (_ENTRY.size + _HASH.size)
    hashes = table + _ENTRY.size * k
    pos, size = end, len(mv)
    for j in range(k):
        csize = _ENTRY.unpack_from(mv, table + _ENTRY.size * j)[3]
        if (
            pos + csize > size
            or xxhash.xxh3_64_intdigest(mv[pos : pos + csize]) != _HASH.unpack_from(mv, hashes + _HASH.size * j)[0]
        ):
            return False
        pos += csize
    return pos == size
