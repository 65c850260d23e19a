"""Types of the C extension loader.serializers._shuffle (source: _shufflemodule.c beside this)."""

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
