"""``.npy`` files: one array of records saved with ``numpy.save``.

The header (format 1.0, 2.0 or 3.0 - the last read here: numpy has no public reader of
it) gives the dtype, the shape and the byte offset of
the data; the array must be one-dimensional and structured, and its fields make the
layout (typed.py). Past the header the data is raw records, so an .npy splits across
workers by byte range and is fingerprinted like a raw file (files.py: its data's extent,
plus the dtype). A worker reads its batch's records with ``pread``: straight into the
batch when the file's dtype is the layout's (packed little-endian, the same fields),
else into a buffer of the file's dtype, converted field by field (another byte order,
padding, types that widen). Not a memory map: a file truncated while it is loaded
would kill the worker with SIGBUS; ``pread`` ends in SourceVanishedError naming the
byte offset, and costs the same one copy.

A header that cannot be parsed, or data shorter than the header says, is a
FileFormatError naming the file and byte offset (exit 1); a shape or dtype that is not
records, a LayoutError naming the field (exit 2).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

import numpy as np
import xxhash

from ..errors import FileFormatError, LayoutError
from ..model.layouts import VALIDITY, Layout, dtype_mismatch, layout_of_fields
from .base import FileType, register_file_type
from .files import open_input, read_exactly, sample_digest
from .typed import TypedFile, split_fields, stem

MAGIC = b"\x93NUMPY"
PIECE_RECORDS = 1 << 20  # records read at a time when a column's values are checked before a load


@dataclass(frozen=True)
class NpySource(TypedFile):
    """An .npy file: ``records`` records of ``dtype`` from byte ``data_offset``."""

    dtype: np.dtype
    data_offset: int

    @classmethod
    def open(cls, path: str) -> NpySource:
        """Parse the header of ``path`` (FileFormatError / LayoutError if it is not an
        .npy file of records)."""
        dtype, shape, data_offset = read_header(path)
        if len(shape) != 1:
            raise LayoutError(
                f"{path} holds an array of shape {shape}; records are a one-dimensional array "
                "(numpy.save a 1-D structured array)"
            )
        if dtype.names is None:
            try:
                layout_of_fields(dtype, stem(path))  # says why
            except LayoutError as e:
                raise LayoutError(f"{path}: {e}") from None
        fields, others = split_fields([(name, dtype[name]) for name in dtype.names or ()], path)
        source = cls(path, fields, others, (), shape[0], dtype, data_offset)
        source.check_size()
        return source

    def records_layout(self, given: Layout | None, dataset: Layout | None) -> Layout:
        """As a typed file's; a file with ``_validity`` (records of a layout with nullable
        fields) only as those records byte for byte: which bit is which field's is the layout's."""
        wanted = given or dataset
        if wanted is not None and VALIDITY in (self.dtype.names or ()) and self.dtype != wanted.dtype:
            raise LayoutError(
                f"{self.path} has a {VALIDITY} field but its records are not those of layout "
                f"{wanted.name!r} byte for byte ({dtype_mismatch(self.dtype, wanted)}); its bits "
                "say which fields are null only in its own layout: load it with that layout"
            )
        return super().records_layout(given, dataset)

    def check_size(self) -> None:
        """FileFormatError if the data is shorter than the header says."""
        size, end = os.stat(self.path).st_size, self.data_offset + self.records * self.dtype.itemsize
        if size < end:
            whole = (size - self.data_offset) // self.dtype.itemsize if size > self.data_offset else 0
            raise FileFormatError(
                f"{self.path}: truncated: its header says {self.records:,} records of {self.dtype.itemsize} bytes "
                f"from byte offset {self.data_offset}, but the file ends at byte offset {size} (record {whole:,} "
                "is the first missing); nothing was loaded - write the file again"
            )

    def fingerprint(self, layout: Layout, records: int | None = None) -> str:
        """Of the first ``records`` records (default: all): like a raw file's, plus the dtype."""
        records = self.records if records is None else records
        size = records * self.dtype.itemsize
        dtype = xxhash.xxh3_64_hexdigest(str(self.dtype.descr).encode())
        return f"dtype={dtype};size={size};sample={sample_digest(self.path, self.data_offset, size)}"

    def fill(self, records: np.ndarray, offset: int) -> None:
        pos = self.data_offset + offset * self.dtype.itemsize
        if records.dtype == self.dtype:  # the layout's own bytes: read in place, as a raw file
            read_exactly(self.path, records.view("u1").data, pos)
            return
        stored = np.empty(len(records), self.dtype)
        read_exactly(self.path, stored.view("u1").data, pos)
        self.copy_into(records, stored, 0, len(records), offset)

    def column_pieces(self, name: str):
        for first in range(0, self.records, PIECE_RECORDS):
            stored = np.empty(min(PIECE_RECORDS, self.records - first), self.dtype)
            read_exactly(self.path, stored.view("u1").data, self.data_offset + first * self.dtype.itemsize)
            yield first, stored[name]


def read_header(path: str) -> tuple[np.dtype, tuple, int]:
    """(dtype, shape, data offset) of an .npy file."""
    fmt = np.lib.format
    with open_input(path) as f:
        try:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = fmt.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = fmt.read_array_header_2_0(f)
            elif version == (3, 0):  # utf-8 field names: numpy has no public reader of its header
                shape, dtype = _read_header_3_0(f)
            else:
                raise ValueError(f"format version {version[0]}.{version[1]} is not one numpy writes (1.0, 2.0, 3.0)")
        except (ValueError, EOFError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
            raise FileFormatError(
                f"{path} is not a valid .npy file ({str(e).strip() or type(e).__name__}); write it with numpy.save"
            ) from None
        return dtype, shape, f.tell()


#: the largest header read (numpy's own limit for untrusted files is 10,000 bytes)
MAX_HEADER = 1 << 20


def _read_header_3_0(f) -> tuple[tuple, np.dtype]:
    """(shape, dtype) of a format 3.0 header: as 2.0 (a 4-byte length), in UTF-8."""
    size = int.from_bytes(_read(f, 4), "little")
    if size > MAX_HEADER:
        raise ValueError(f"header of {size:,} bytes is too large")
    header = ast.literal_eval(_read(f, size).decode("utf-8"))
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise ValueError("header is not a dict of descr, fortran_order and shape")
    shape = header["shape"]
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ValueError(f"shape {shape!r} is not a tuple of counts")
    if not isinstance(header["fortran_order"], bool):
        raise ValueError(f"fortran_order {header['fortran_order']!r} is not a bool")
    return shape, np.lib.format.descr_to_dtype(header["descr"])


def _read(f, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise EOFError(f"the file ends in its header (after {f.tell()} bytes)")
    return data


register_file_type((".npy",), FileType("NumPy .npy", MAGIC, NpySource.open))
