"""The batch serializer interface: records (numpy, ``layout.dtype``) <-> one stored value.

A batch is a contiguous record range ``[start, start + n)``. A serializer turns it into one
bytes-like value for a store and back. The worker pool's hot path is::

    buf, records = ser.new_buffer(n)      # records: writable array of layout.dtype, n rows
    fill(records)                         # e.g. the C generator writes into records' memory
    value = ser.encode_buffer(buf, records, start)   # bytes-like, ready for the store

For Cap'n Proto on a framable layout ``records`` is a view into ``buf`` (which *is* the
message), so ``encode_buffer`` only writes a 40-byte header and returns a memoryview of
``buf``: zero copies. The value then aliases ``buf``: do not refill ``buf`` until the
value has been written.

``encode(records, start)`` is the convenience path (copies into a new buffer).
`part_spans` / `decode_part`: formats that store records flat (Cap'n Proto, uncompressed)
read a few records of a value without the rest of it.
``decode(value) -> (start, records)`` and ``count(value)`` (cheap, header/metadata only)
read a value back (``decode_into(value, out)``: into a given array); a malformed value
raises `loader.errors.VerifyError` naming what is wrong.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..model.layouts import Layout

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from numpy.typing import ArrayLike, DTypeLike

    from ..infra.bytes_like import BytesLike

    #: a decoded value's columns: field name -> contiguous 1-D array (`decode_columns`)
    Columns = dict[str, np.ndarray]

#: Every compression name any serializer knows; each serializer accepts a subset.
COMPRESSIONS = ("none", "lz4", "zstd")

#: Batch start indexes are Cap'n Proto UInt64 (and Arrow metadata integers).
MAX_START = 2**64 - 1


def normalize_compression(compression: str | None) -> str:
    c = "none" if compression in (None, "", False) else str(compression).lower()
    if c not in COMPRESSIONS:
        raise UsageError(f"unknown compression {compression!r}; use one of {', '.join(COMPRESSIONS)}")
    return c


class Serializer(ABC):
    """Encode/decode one batch of records of one layout."""

    #: "capnp" | "arrow"
    name: str
    #: compressions this format accepts
    compressions: tuple[str, ...] = ("none",)
    #: whether its values carry block hashes (BLZ3): their row checksum covers the head
    #: (infra/checksums.py `batch_checksum`)
    hashes_blocks = False

    def __init__(self, layout: Layout, compression: str = "none") -> None:
        self.layout = layout
        self.compression = normalize_compression(compression)
        if self.compression not in self.compressions:
            raise UsageError(self._bad_compression_message())

    def _bad_compression_message(self) -> str:
        return (
            f"format {self.name!r} does not support compression {self.compression!r}; "
            f"use one of {', '.join(self.compressions)}"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(layout={self.layout.name!r}, compression={self.compression!r})"

    def __reduce__(self) -> tuple[type[Serializer], tuple[Layout, str]]:
        return (type(self), (self.layout, self.compression))

    # --- limits -------------------------------------------------------------
    #: largest number of records in one batch (None: no format limit)
    @property
    def max_records(self) -> int | None:
        return None

    def check_batch_records(self, n: int) -> None:
        """Raise UsageError if a batch of n records cannot be stored in this format."""
        if n < 0:
            raise UsageError(f"a batch cannot hold {n} records")
        m = self.max_records
        if m is not None and n > m:
            raise UsageError(self._too_big_message(n, m))

    def _too_big_message(self, n: int, m: int) -> str:
        return f"a {self.name} batch holds at most {m} records of layout {self.layout.name!r}, got {n}; use a smaller --batch-records"

    # --- encoding -----------------------------------------------------------
    @abstractmethod
    def new_buffer(self, n: int) -> tuple[BytesLike, np.ndarray]:
        """(buf, records): records is a writable array of layout.dtype with n rows; buf is
        the format's own (pass it to `encode_buffer` as it is)."""

    @abstractmethod
    def encode_buffer(self, buf: BytesLike, records: np.ndarray, start: int) -> BytesLike:
        """Encode the records (filled in place) of `new_buffer`, batch start `start`."""

    def encode(self, records: ArrayLike, start: int) -> BytesLike:
        """Encode any array of the layout's records (copies into a new buffer)."""
        recs = self._check_records(records)
        buf, view = self.new_buffer(len(recs))
        if len(recs):
            view[...] = recs
        return self.encode_buffer(buf, view, start)

    # --- decoding -----------------------------------------------------------
    @abstractmethod
    def decode(self, value: BytesLike) -> tuple[int, np.ndarray]:
        """(start, records of layout.dtype); a zero-copy view where the format allows."""

    def decode_into(self, value: BytesLike, out: np.ndarray) -> int | None:
        """Decode ``value`` into ``out`` (a contiguous array of layout.dtype) when it holds
        exactly ``len(out)`` records; returns its start, or None (``out`` untouched) when it
        holds another count. Formats that can decompress straight into ``out`` do."""
        start, recs = self.decode(value)
        if len(recs) != len(out):
            return None
        if recs.dtype == out.dtype and recs.flags.c_contiguous:
            out.view("u1")[...] = recs.view("u1")  # one memcpy, not field by field
        else:
            out[...] = recs
        return start

    def decode_columns(
        self, value: BytesLike, names: list[str], out: Columns | None = None
    ) -> tuple[int, int, Columns]:
        """(start, record count, {name: contiguous 1-D array}) of the fields ``names`` of a
        value: a scan's projection. ``out``: arrays to fill (name -> array), used when the
        value holds ``len`` of them records (a reader allocates them in its own thread: a
        decoding thread's heap would be returned to the kernel and faulted in again). Here:
        the whole value decoded, then each field gathered (numpy's strided copy, in C);
        formats that can skip the other fields override it."""
        start, recs = self.decode(value)
        return start, len(recs), {n: copy_into(recs[n], out, n) for n in names}

    @property
    def decode_copies(self) -> bool:
        """Whether `decode` builds the records in new memory (a decompression, a conversion)
        rather than viewing the value: then they outlive the value."""
        return self.compression != "none"

    @abstractmethod
    def count(self, value: BytesLike) -> int:
        """Number of records in a stored value, reading only its header."""

    # --- reading a few records of a value (formats that store records flat) ---
    @property
    def reads_parts(self) -> bool:
        """Whether this format can read some records of a value without the rest of it."""
        return False

    def part_spans(self, lo: int, hi: int, size: int, count: int) -> list[tuple[int, int]] | None:
        """The (offset, length) byte ranges that `decode_part` reads for records [lo, hi) of
        a value of ``size`` bytes said to hold ``count`` records; None when this format cannot
        read them without the rest of the value, or the value is not ``size`` bytes of
        ``count`` records (then read it whole: that names what is wrong). The ranges lie
        inside the value."""
        return None

    def decode_part(self, parts: Sequence[memoryview], size: int, start: int, count: int) -> np.ndarray | None:
        """The records of ``parts`` - the bytes of the ranges `part_spans` named - of a value
        of ``size`` bytes said to hold ``count`` records from ``start``; None when the value's
        framing is not that (then read it whole)."""
        return None

    # --- helpers ------------------------------------------------------------
    def _check_records(self, records: ArrayLike) -> np.ndarray:
        import numpy as np  # start-up: a serializer class is looked up without numpy (info); records need it

        records = np.asarray(records)
        if records.ndim != 1:
            raise UsageError(f"records must be a 1-D array, got shape {records.shape}")
        dt = self.layout.dtype
        if records.dtype != dt:
            if records.dtype.names != dt.names:
                raise UsageError(f"records have dtype {records.dtype}, expected layout {self.layout.name!r} dtype {dt}")
            out = np.empty(len(records), dt)
            for name in dt.names or ():
                out[name] = records[name]
            records = out
        return records

    @staticmethod
    def _check_start(start: int) -> int:
        s = int(start)
        if not 0 <= s <= MAX_START:
            raise UsageError(f"batch start {start} is out of range 0..2**64-1")
        return s


def column_out(out: Columns | None, name: str, n: int, dtype: DTypeLike) -> np.ndarray:
    """``out[name]`` when it is a contiguous array of ``n`` values (C decodes into it as a
    buffer), else a new array (see decode_columns)."""
    import numpy as np  # start-up: numpy only when records are read

    a = None if out is None else out.get(name)
    return a if a is not None and len(a) == n and a.flags.c_contiguous else np.empty(n, dtype)


def copy_into(col: np.ndarray, out: Columns | None, name: str) -> np.ndarray:
    """The 1-D field view ``col`` copied into a contiguous array (``out[name]`` when it fits)."""
    import numpy as np  # start-up: numpy only when records are read

    a = column_out(out, name, len(col), col.dtype)
    np.copyto(a, col)
    return a
