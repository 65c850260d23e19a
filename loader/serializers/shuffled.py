"""Compressed record regions: a byte shuffle by record stride, then LZ4 or zstd.

A Cap'n Proto batch with ``--compression lz4|zstd`` (capnp_framing.py) stores its
40-byte header as is, followed by the records region compressed. LZ4 (the default) is
written as BLZ3, a block per field, each with its hash::

    offset  bytes  what
         0      4  magic b"BLZ3"
         4      1  codec: 1 = LZ4
         5      3  zero
         8      4  stride: bytes per record (u32 little-endian)
        12      8  bytes of the records region (u64)
        20      4  k: blocks (u32)
        24      4  zero
        28  16 * k the block table, one entry a block, in plane order:
                   u32 lo, u32 hi: its planes [lo, hi) (byte offsets in a record; the
                   blocks cover 0 .. stride exactly); u8 mode; 3 zero bytes; u32 its
                   compressed bytes
         -   8 * k the block hashes: xxh3_64 (u64, seed 0) of each block's stored bytes
         -      -  the blocks, in table order, back to back

The catalog row's checksum of a BLZ3 value is the xxh3_64 of the value's bytes up to the
end of the block hashes (the Cap'n Proto header, head, table, hashes: infra/checksums.py);
a reader checks that, then each block it decodes against its hash before decoding it (C,
`_shuffle.blocks_decode`), so a scan of a few columns hashes only their blocks. LZ4 values
written before BLZ3 are BLZ2 (read forever: the same without the block hashes, checked by
the whole value's xxh3).

Plane k is byte k of every record (n records: ``n`` bytes, at ``k * n`` of the shuffled
region). A block's mode: 1 = an LZ4 block of its planes; 2 = an LZ4 block of its records
unshuffled (n records of ``hi - lo`` bytes: whole values that repeat, which planes split);
3 = a dictionary of a field of w = ``hi - lo`` bytes (2, 4 or 8) that takes few distinct
values in the batch (ticks' symbols, prices, sizes, bids and asks)::

    offset  bytes  what
         0      4  d: the distinct values (u32), 1 <= d <= min(n, 65536)
         4      1  the index planes' coding: 0 = raw, 1 = an LZ4 block of them
         5      3  zero
         8  d * w  the distinct values, w bytes each as in a record, in first-seen order
         -      -  the index planes: 1 byte a record if d <= 256, else 2 (plane 0 the
                   indexes' low bytes, plane 1 their high bytes): n or 2n bytes, raw or
                   LZ4 (giving exactly that many)

(values compared as bytes: NaNs of other bits, -0.0 and 0.0 are distinct values; a
reader checks the sizes, d and the largest index before it gathers); 0 = its planes
stored raw (LZ4 did not shrink them: random bytes; decoding is a copy). Readers older
than mode 3 refuse such a value as damaged (its table names a mode they do not know).
A Cap'n Proto value has a block per field (its
`layout.capnp_span`; a field Cap'n Proto scattered: a block per element), one for the
byte of bools, one per gap (padding). A reader decodes only the blocks of the planes it
asks for (a scan's columns: `planes_of`), after checking the table whole; the writer
chooses each block's mode from a sample of 256 records (_shufflemodule.c `compress_block`:
a dictionary only where its sample repeats values and it could take under 7/8 of the
planes' bytes - ticks: 229 KB -> 169 KB a 10,000-record batch, in ~70 % of the time).

zstd, and LZ4 values written before BLZ2 (read forever), are BLZ1, one stream of every plane::

    offset  bytes  what
         0      4  magic b"BLZ1"
         4      1  codec: 1 = LZ4 block, 2 = zstd frame
         5      3  zero
         8      4  stride: bytes per record (u32 little-endian)
        12      8  bytes of the records region (u64)
        20      -  the codec's compressed bytes of the shuffled region

The shuffle (C, _shufflemodule.c) puts byte k of every record together, which
turns fixed-size numeric records into long runs: scidb96 records compress to ~2 % (LZ4)
/ ~1 % (zstd level 1) of their bytes, where a columnar LZ4 store (ArcticDB) keeps ~28 %;
gen://ticks records (symbols and prices among a thousand values: mode 3) to ~41 % (~55 %
with modes 0-2, ~64 % in one BLZ1 block). LZ4 blocks are LZ4's block format (no size
prefix: the sizes are in the head and table), written by third_party/lz4
(`LZ4_compress_fast_extState_fastReset`: one hash table for a value's blocks), zstd is
one zstandard frame. Both release the GIL, as
the shuffle does; each worker compresses its own batches (the workers are the
parallelism). The codecs import in milliseconds (the blosc2 chunks of an earlier
development version took 0.24 s to import and are not read).

In the `bulkload` command's own processes freed heap is kept for reuse (infra/heap.py):
each batch allocates ~2 buffers of its size, and glibc's default trimming turned that into
page faults (verify of a 5M-record lz4 dataset in one process: 0.52 s -> 0.10 s).

A region that is neither framing, names another stride or size than its batch header,
has a block table that does not cover exactly its planes and bytes, or a block that does
not decompress to exactly its size (BLZ3: whose bytes do not have its hash) raises
`loader.errors.VerifyError` saying which block.
"""

from __future__ import annotations

import functools
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ..errors import BlockChecksumError, VerifyError
from ..infra import checksums, heap
from . import _shuffle

if TYPE_CHECKING:
    import numpy as np

    from ..infra.bytes_like import BytesLike

MAGIC = checksums.MAGIC  # what this version writes: BLZ3, a block per run of planes, each hashed
MAGIC_V2 = b"BLZ2"  # the same blocks without their hashes (read forever: older datasets)
MAGIC_V1 = b"BLZ1"  # one LZ4 block of every plane (read forever: older datasets)
_BLOCKS = (MAGIC, MAGIC_V2)
_HEAD = struct.Struct("<4sB3xIQ")
HEAD_BYTES = _HEAD.size
_CODEC_IDS = {"lz4": 1, "zstd": 2}
_CODEC_NAMES = {v: k for k, v in _CODEC_IDS.items()}
#: zstd's level (1: the fast end; level 3 costs ~2x the time for ~10 % fewer bytes here)
ZSTD_LEVEL = 1

_scratch = threading.local()  # a thread's shuffle buffer, reused from batch to batch


def scratch(size: int, slot: int = 0) -> memoryview:
    """This thread's scratch buffer ``slot`` (0: `compress`'s own), ``size`` bytes of it; its
    content is garbage until written, and valid until the thread's next call for ``slot``."""
    bufs = getattr(_scratch, "bufs", None)
    if bufs is None:
        bufs = _scratch.bufs = {}
    buf = bufs.get(slot)
    if buf is None or len(buf) < size:
        buf = bufs[slot] = bytearray(max(size, 1 << 20))
    return memoryview(buf)[:size]


def cuts(bounds: Iterable[int], stride: int) -> bytes:
    """The blocks of a value of records of ``stride`` bytes whose planes split at ``bounds``
    (byte offsets in a record, e.g. each field's first and past-last byte): for `lz4_value`."""
    points = sorted({0, stride, *(b for b in bounds if 0 < b < stride)})
    return struct.pack(f"<{len(points)}I", *points)


def compress(region: BytesLike, compression: str, stride: int, blocks: bytes | None = None) -> bytes:
    """``region`` (records of ``stride`` bytes) shuffled and compressed, with its head;
    LZ4: in the ``blocks`` of `cuts` (None: one block of every plane)."""
    if compression == "lz4":
        return lz4_value(b"", region, stride, blocks)
    size = len(region)
    flat = scratch(size)
    _shuffle.shuffle(region, flat, stride)
    return compress_planes(flat, compression, stride)


def lz4_value(prefix: BytesLike, region: BytesLike, stride: int, blocks: bytes | None = None) -> bytes:
    """``prefix`` + `compress` (region, "lz4", stride, blocks), in one C call."""
    heap.keep_freed_if_owned()  # a value per batch: reuse freed heap (infra/heap.py)
    size = len(region)
    head = _HEAD.pack(MAGIC, _CODEC_IDS["lz4"], stride, size)
    return _shuffle.lz4_blocks(
        prefix, head, region, scratch(size), stride, blocks or cuts((), stride), _tmp(size, stride)
    )


def lz4_encoder(prefix: memoryview, region: memoryview, stride: int, blocks: bytes) -> Callable[[], bytes]:
    """`lz4_value` (prefix, region, stride, blocks) with everything but the bytes in
    ``prefix`` and ``region`` fixed: one C call a value, with scratch buffers of its own (one
    caller, one thread: a load worker's batches of one size, loading/worker.py `_inline`)."""
    heap.keep_freed_if_owned()
    size = len(region)
    head = _HEAD.pack(MAGIC, _CODEC_IDS["lz4"], stride, size)
    need = _tmp_bytes(size, stride)
    tmp = memoryview(bytearray(need)) if need else _NO_TMP
    return functools.partial(
        _shuffle.lz4_blocks, prefix, head, region, memoryview(bytearray(size)), stride, blocks, tmp
    )


#: records from which `_shuffle.lz4_blocks` samples a block to choose its mode (2 x its SAMPLE)
SAMPLED_FROM = 512
_NO_TMP = memoryview(bytearray(0))


def _tmp_bytes(size: int, stride: int) -> int:
    """Bytes of scratch for the samples that choose each block's mode and for a dictionary
    (its index planes, its hash slots: 18 bytes a record at most) (`_shuffle.lz4_blocks`) of
    ``size`` bytes of ``stride``-byte records: none for fewer than `SAMPLED_FROM` records,
    which are not sampled (``stride`` 0: the planes, always sampled)."""
    if stride and size < SAMPLED_FROM * stride:
        return 0
    n = size // stride if stride else size
    return 2 * size + size // 255 + 64 + 18 * n + 264


def _tmp(size: int, stride: int) -> memoryview:
    """`_tmp_bytes` of scratch, this thread's slot 5."""
    need = _tmp_bytes(size, stride)
    return scratch(need, 5) if need else _NO_TMP


def compress_planes(
    flat: memoryview,
    compression: str,
    stride: int,
    blocks: bytes | None = None,
    prefix: BytesLike = b"",
    records: BytesLike = b"",
) -> bytes:
    """``prefix`` + `compress` of the records whose shuffled bytes (byte k of record i at
    ``k * n + i``) ``flat`` holds already: a caller that builds the planes itself
    (capnp_framing.py). LZ4 writes the prefix in the same C call: no copy of the value.
    ``records``: n records (of any size up to ``stride``) whose bytes the first planes
    hold unchanged; a field stored as a dictionary reads its values there."""
    heap.keep_freed_if_owned()  # a buffer per batch: reuse freed heap (infra/heap.py)
    size = len(flat)
    if compression == "lz4":
        head = _HEAD.pack(MAGIC, _CODEC_IDS[compression], stride, size)
        nbytes = memoryview(records).nbytes
        rsize = nbytes * stride // size if size and nbytes else 0
        return _shuffle.lz4_blocks(
            prefix, head, flat, flat, 0, blocks or cuts((), stride), _tmp(size, stride), records, rsize
        )
    import zstandard

    framed: bytes = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(flat)
    return bytes(prefix) + _HEAD.pack(MAGIC_V1, _CODEC_IDS[compression], stride, size) + framed


def decompress_into(chunk: BytesLike, out: memoryview, stride: int, what: str) -> None:
    """Decompress ``chunk`` (from `compress`) into the writable buffer ``out``, which it
    must fill exactly with records of ``stride`` bytes."""
    mv = memoryview(chunk).cast("B")
    size = len(out)
    if _codec(mv, size, stride, what) == "blocks" and size:
        flat = scratch(size, 4)  # slot 4: decompress_into's own
        _blocks_decode(mv, flat, size // stride, None, what)
        _shuffle.unshuffle(flat, out, stride)
        return
    planes = decompressed_planes(chunk, size, stride, what)
    if planes is not None:
        _shuffle.unshuffle(planes, out, stride)


def decompressed_planes(chunk: BytesLike, size: int, stride: int, what: str) -> bytes | bytearray | None:
    """The shuffled bytes of ``chunk`` (from `compress`), which must hold ``size`` bytes of
    records of ``stride`` bytes: byte k of record i at ``k * n + i`` (None when ``size`` is
    0). A field of ``w`` bytes at offset ``o`` of the records is then the planes
    ``[o * n, (o + w) * n)``, which `unshuffle` with stride ``w`` turns into its column."""
    heap.keep_freed_if_owned()  # two fresh buffers per batch: reuse freed heap (infra/heap.py)
    mv = memoryview(chunk).cast("B")
    codec = _codec(mv, size, stride, what)
    if not size:
        return None
    if codec == "blocks":
        out = bytearray(size)
        _blocks_decode(mv, out, size // stride, None, what)
        return out
    try:
        flat = _decoded(codec, mv[HEAD_BYTES:], size)
    except Exception as e:  # lz4 / zstandard raise their own errors for a damaged stream
        raise VerifyError(f"{what}: compressed records do not decompress ({e})") from None
    if len(flat) != size:
        raise VerifyError(f"{what}: compressed records hold {len(flat)} bytes, the header says {size}")
    return flat


def planes_of(
    chunk: BytesLike,
    size: int,
    stride: int,
    what: str,
    ranges: bytes,
    fields: Sequence[tuple[int, int, BytesLike | np.ndarray]] = (),
) -> bytes | bytearray | memoryview | None:
    """`decompressed_planes`, of which only the planes ``ranges`` (half-open ranges of byte
    offsets in a record: the fields a scan asks for) need be decoded: the other bytes are
    garbage. LZ4 (C: third_party/lz4, the GIL released) decodes into this thread's reused
    buffer - no fresh pages per batch: BLZ2/3 only the blocks that hold those planes
    (``ranges``: `packed_ranges`), BLZ1 its one block up to the last of them. BLZ3: each of those blocks' hash is checked
    before it is decoded (the reader checks the head, table and hashes against the row:
    infra/checksums.py); BLZ2, BLZ1: the reader checks the whole value's xxh3 first.

    Each (offset, width, out) of ``fields`` gets its records, as `unshuffle_fields` gives
    them (their planes must be in ``ranges``); BLZ2 in the same C call, a field whose block
    holds its records (mode 2) decompressed, or its dictionary (mode 3) gathered, straight
    into its ``out`` - whose planes are then not in the planes returned."""
    mv = memoryview(chunk).cast("B")
    codec = _codec(mv, size, stride, what)
    if not size:
        return None
    n = size // stride
    if codec == "blocks":
        flat = scratch(size, 3)  # slot 3: a decode's own (capnp_framing uses 1 and 2, compress 0)
        _blocks_decode(mv, flat, n, ranges, what, fields)
        return flat
    planes = _blz1_planes(mv, codec, size, stride, what, ranges)
    _shuffle.unshuffle_fields(planes, n, fields)
    return planes


def packed_ranges(ranges: Iterable[tuple[int, int]]) -> bytes:
    """Half-open ranges of byte offsets in a record as `planes_of` takes them (u32 pairs)."""
    return b"".join(_RANGE.pack(lo, hi) for lo, hi in ranges)


def _blz1_planes(
    mv: memoryview, codec: str, size: int, stride: int, what: str, ranges: bytes
) -> bytes | bytearray | memoryview:
    """`planes_of` a BLZ1 value ``mv`` (``codec``: lz4 or zstd; ``size`` > 0)."""
    if codec == "zstd":
        planes = decompressed_planes(mv, size, stride, what)
        assert planes is not None  # (size > 0)
        return planes
    n = size // stride
    flat = scratch(size, 3)
    want = max((hi for _lo, hi in _RANGE.iter_unpack(ranges)), default=0) * n
    try:
        got = _shuffle.lz4_planes(mv[HEAD_BYTES:], flat, want)
    except ValueError as e:
        raise VerifyError(f"{what}: compressed records do not decompress ({e})") from None
    if got < want or (want == size and got != size):
        raise VerifyError(f"{what}: compressed records hold {got} bytes, the header says {size}")
    return flat


_RANGE = struct.Struct("<II")


def _blocks_decode(
    mv: memoryview,
    out: BytesLike,
    n: int,
    ranges: bytes | None,
    what: str,
    fields: Sequence[tuple[int, int, BytesLike | np.ndarray]] = (),
) -> None:
    """Decode the blocks of the BLZ2 / BLZ3 value ``mv`` that hold ``ranges`` (None: all)
    into ``out``, then ``fields`` (`planes_of`); BLZ3: each block's hash checked before it
    is decoded."""
    try:
        _shuffle.blocks_decode(mv[HEAD_BYTES:], out, n, ranges, fields, mv[:4] == MAGIC)
    except _shuffle.BlockHashError as e:  # (BLZ3: a block of another hash)
        raise BlockChecksumError(f"{what}: {e}") from None
    except ValueError as e:
        raise VerifyError(f"{what}: compressed records do not decompress ({e})") from None


def _codec(mv: memoryview, size: int, stride: int, what: str) -> str:
    """The codec of compressed records ``mv`` (from `compress`): "lz4" or "zstd" (BLZ1),
    "blocks" (BLZ2, BLZ3); its head must say records of ``stride`` bytes, ``size`` bytes
    (VerifyError naming ``what`` if not)."""
    magic = bytes(mv[:4])
    if len(mv) < HEAD_BYTES or magic not in (*_BLOCKS, MAGIC_V1):
        raise VerifyError(
            f"{what}: the compressed records do not start with this version's framing "
            f"({MAGIC!r}, {MAGIC_V2!r} or {MAGIC_V1!r}); the value is damaged or was written by another bulkload version"
        )
    _magic, codec, cstride, csize = _HEAD.unpack_from(mv, 0)
    blz2_not_lz4 = magic in _BLOCKS and codec != _CODEC_IDS["lz4"]  # (BLZ2/3 are LZ4 blocks only)
    if codec not in _CODEC_NAMES or blz2_not_lz4 or cstride != stride or csize != size or (stride and size % stride):
        raise VerifyError(
            f"{what}: compressed records say codec {codec}, {cstride}-byte records, {csize} bytes; "
            f"the batch header says {stride}-byte records, {size} bytes"
        )
    return "blocks" if magic in _BLOCKS else _CODEC_NAMES[codec]


def shuffle(records: BytesLike, out: BytesLike, stride: int) -> None:
    """``out`` (writable, ``len(records)`` bytes) = the planes of records of ``stride`` bytes."""
    _shuffle.shuffle(records, out, stride)


def unshuffle(planes: BytesLike, out: memoryview, stride: int) -> None:
    """``out`` (writable, ``len(planes)`` bytes) = records of ``stride`` bytes from ``planes``."""
    _shuffle.unshuffle(planes, out, stride)


def unshuffle_fields(planes: BytesLike, n: int, fields: Sequence[tuple[int, int, BytesLike | np.ndarray]]) -> None:
    """For each (offset, width, out) of ``fields``: ``out`` = the ``n`` records of ``width``
    bytes of planes [offset * n, (offset + width) * n) - one C call, the GIL released."""
    _shuffle.unshuffle_fields(planes, n, fields)


def _decoded(codec: str, data: memoryview, size: int) -> bytes:
    if codec == "lz4":
        import lz4.block

        flat: bytes = lz4.block.decompress(data, uncompressed_size=size)
        return flat
    import zstandard

    whole: bytes = zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    return whole
