"""Types of the C extension loader.stores._preads (source: _preadsmodule.c beside this)."""

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias

from typing_extensions import Buffer

class _Array(Protocol):
    """A numpy array (numpy's stubs give it the buffer protocol only on Python 3.12+)."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...

#: an object with the buffer protocol (writable)
_WritableBuffer: TypeAlias = Buffer | _Array

def read_spans(
    fd: int, at: int, size: int, spans: Sequence[tuple[int, int]], into: _WritableBuffer, advise: bool, /
) -> int:
    """Copy bytes [at + offset, at + offset + length) of file ``fd`` for each (offset,
    length) of ``spans`` (inside a value of ``size`` bytes at ``at``) one after another
    into ``into``, with one release of the GIL (``advise``: posix_fadvise WILLNEED each
    first). Returns the bytes copied (fewer when the file ended first); OSError when a
    read fails, ValueError for a span outside the value or an ``into`` too small."""
