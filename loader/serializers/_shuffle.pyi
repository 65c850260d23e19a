"""Types of the C extension loader.serializers._shuffle (source: _shufflemodule.c beside this)."""

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias

from typing_extensions import Buffer

class _Array(Protocol):
    """A numpy array (numpy's stubs give it the buffer protocol only on Python 3.12+)."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...

#: an object with the buffer protocol
_Buffer: TypeAlias = Buffer | _Array

def shuffle(src: _Buffer, dst: _Buffer, stride: int, /) -> None:
    """dst[k * n + i] = src[i * stride + k] for the n records of ``stride`` bytes of
    ``src``; ``dst`` is writable and the same size. ValueError / TypeError otherwise."""

def unshuffle(src: _Buffer, dst: _Buffer, stride: int, /) -> None:
    """The inverse of `shuffle`: dst[i * stride + k] = src[k * n + i]."""

def lz4_planes(src: _Buffer, dst: _Buffer, want: int, /) -> int:
    """Decompress the LZ4 block ``src`` into the writable ``dst``, stopping once ``want``
    bytes are out; the bytes decoded. ValueError: a damaged block, ``want`` past ``dst``."""

def unshuffle_fields(planes: _Buffer, n: int, fields: Sequence[tuple[int, int, _Buffer]], /) -> None:
    """For each (offset, width, out): ``out`` = `unshuffle` of planes [offset * n, (offset + width) * n)
    with stride ``width``. ValueError: a field outside ``planes``, an ``out`` of another size."""

def lz4_blocks(
    prefix: _Buffer,
    head: _Buffer,
    region: _Buffer,
    scratch: _Buffer,
    stride: int,
    cuts: _Buffer,
    tmp: _Buffer,
    records: _Buffer = ...,
    rsize: int = ...,
    /,
) -> bytes:
    """``prefix + head +`` the BLZ2 block table and blocks of `shuffle` (region, stride)
    (a ``head`` starting b"BLZ3": each block's xxh3_64 between the table and the blocks),
    shuffled in the writable ``scratch`` (at least as big as ``region``), or of ``region``
    itself when ``stride`` is 0; ``cuts``: u32 plane indexes from 0 up to the record's
    bytes, a block between each two; ``tmp``: writable scratch of ``2 * len(region) +
    len(region) // 255 + 64 + 18 * n + 264`` bytes for n records (the samples that choose
    each block's mode, a dictionary's index planes and hash slots). Each block in the mode
    that stores it smallest: LZ4 of its planes or records, a dictionary (mode 3), raw.
    ``records`` (``stride`` 0 only): the n records of ``rsize`` bytes whose bytes the
    first ``rsize`` planes hold unchanged: a dictionary reads a field's values there
    rather than unshuffling its planes (the same bytes out).
    ValueError: bad cuts, a region that is not whole records, a scratch or tmp too small,
    ``records`` that are not n records of ``rsize`` bytes, or with a ``stride``."""

class BlockHashError(ValueError):
    """`blocks_decode`: a BLZ3 block whose bytes do not have the hash its value stores."""

def blocks_decode(
    src: _Buffer,
    dst: _Buffer,
    n: int,
    ranges: _Buffer | None,
    fields: Sequence[tuple[int, int, _Buffer]] | None,
    hashed: bool = False,
    /,
) -> int:
    """Decode into the writable ``dst`` (planes of ``n`` bytes) the blocks of the BLZ2 table
    and blocks ``src`` that hold a plane of ``ranges`` (u32 pairs lo, hi; None: all), then
    each (offset, width, out) of ``fields`` its records (a block of its records or its
    dictionary: straight into ``out``, not into ``dst``); the blocks decoded. ``hashed`` (BLZ3): the table is
    followed by each block's xxh3_64, checked before the block is decoded. ValueError: a
    damaged table or block, a field outside ``dst`` or an ``out`` of another size;
    `BlockHashError` (a ValueError): a block of another hash."""
