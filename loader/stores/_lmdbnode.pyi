"""Types of the C extension loader.stores._lmdbnode (source: _lmdbnodemodule.c beside this)."""

from typing import Any, Protocol, TypeAlias

from typing_extensions import Buffer

class _Array(Protocol):
    """A numpy array (numpy's stubs give it the buffer protocol only on Python 3.12+)."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...

#: an object with the buffer protocol
_Buffer: TypeAlias = Buffer | _Array

def value_span(key: _Buffer, base: int, in_use: int, psize: int, /) -> tuple[int, int, bool] | int:
    """(offset of the value in data.mdb, size, whether it fills overflow pages) of the leaf
    node whose key is the zero-copy buffer ``key`` in the map at ``base``; 1 when the key
    lies outside the ``in_use`` bytes of pages in use, 2 when the value would."""

def find_value(
    key: _Buffer, base: int, in_use: int, psize: int, root: int, depth: int, /
) -> tuple[int, int, bool] | None:
    """The same (offset, size, big) for ``key`` in the B-tree whose root page is ``root``,
    found by walking its pages in the map; None when not found or anything unexpected is
    met (then ask LMDB)."""

def buffer_offset(obj: _Buffer, base: int = 0, /) -> int:
    """The address of the first byte of ``obj``'s buffer minus ``base`` (negative below
    it; with base 0, the address). TypeError without a buffer, ValueError for a released
    memoryview."""
