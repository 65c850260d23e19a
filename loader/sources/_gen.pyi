"""Types of the C extension loader.sources._gen (source: _genmodule.c beside this; the
generator library it binds is in generators/)."""

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias

from typing_extensions import Buffer

class _Array(Protocol):
    """A numpy array (numpy's stubs give it the buffer protocol only on Python 3.12+)."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...

#: an object with the buffer protocol
_Buffer: TypeAlias = Buffer | _Array

#: bytes of a scidb96 record (generators/scidb96.h)
SCIDB96_RECORD_SIZE: int
#: bytes of a ticks record (generators/ticks.h)
TICKS_RECORD_SIZE: int
#: the longest text of a gen://docs document, in bytes (generators/docs_gen.h)
DOCS_TEXT_MAX: int
#: a gen://docs document's created_at is in [DOCS_CREATED_MIN, DOCS_CREATED_MAX), seconds since the epoch
DOCS_CREATED_MIN: int
DOCS_CREATED_MAX: int

def fill_scidb96(buffer: _Buffer, start: int, /) -> int:
    """Fill the whole buffer with scidb96 records start, start+1, ...; returns their number."""

def fill_scidb96_into(buffer: _Buffer, start: int, n: int, /) -> int:
    """Fill the first ``n`` scidb96 records of the buffer; returns ``n``."""

def fill_ticks(buffer: _Buffer, start: int, t0: int, step: int, /) -> int:
    """Fill the whole buffer with ticks records (t0 in ns since the epoch, step >= 1 ns);
    returns their number."""

def docs_meta(seed: int, start: int, created_at: _Buffer, offsets: _Buffer, /) -> int:
    """created_at (int64) and text offsets (n + 1 int64) of documents start .. start+n-1
    (n = the items of created_at); returns the bytes of their texts."""

def docs_text(seed: int, start: int, n: int, text: _Buffer, /) -> int:
    """The texts of documents start .. start+n-1 one after the other; returns the bytes written."""

def scatter_fields(records: _Buffer, record_size: int, fields: Sequence[tuple[_Buffer, int, int]], /) -> int:
    """Records of ``record_size`` bytes from columns: ``fields`` holds (column, byte offset,
    size 1/2/4/8); returns the number of records."""
