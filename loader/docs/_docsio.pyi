"""Types of the C extension loader.docs._docsio (source: _docsiomodule.c beside this)."""

import os
from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias, final

from typing_extensions import Buffer as _BufferProtocol

class _Array(Protocol):
    """A numpy array (numpy's stubs give it the buffer protocol only on Python 3.12+)."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...

#: an object with the buffer protocol
_Buffer: TypeAlias = _BufferProtocol | _Array
#: a directory: a path, an open directory descriptor, or None (the current directory)
_Dir: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes] | int | None
#: the names of a batch's files (None: "<id>.json"), relative to the directory or absolute
_Names: TypeAlias = Sequence[str | bytes | os.PathLike[str] | os.PathLike[bytes] | None] | None

@final
class Buffer:
    """The bytes read by `read_batch` (read-only; use memoryview / numpy.frombuffer)."""

    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __len__(self) -> int: ...

def scan_dir(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], /) -> tuple[bytes, list[str]]:
    """(ids of the canonical "<digits>.json" names as native uint64 bytes, every other
    name) of the regular files of a directory, in directory order."""

def read_batch(dir: _Dir, ids: _Buffer, names: _Names = None) -> tuple[Buffer, bytes, bytes, bytes]:
    """(the files as one JSON array, native int64 (start, end) spans of each, int32 errnos,
    uint8 braced flags) of the files of a batch."""

def stat_batch(dir: _Dir, ids: _Buffer, names: _Names = None) -> tuple[bytes, bytes, bytes]:
    """(native int64 sizes, int64 mtimes in ns, int32 errnos) of the files of a batch."""

def block_columns(ids: _Buffer, created_at: _Buffer, offsets: _Buffer, i: int, j: int, flags: int, /) -> bytes:
    """The header and fixed-width columns of the document block i..j-1 of an id-sorted batch."""
