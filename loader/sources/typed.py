"""Files with a schema: what .npy, Arrow IPC and Parquet sources share (npy.py, arrow_files.py).

- The layout of their records comes from the file (`model.layouts.layout_of_fields`):
  into a new dataset without --layout, the file's own fields in its order, named as a
  known layout with exactly those fields (e.g. ``scidb96``), else after the file; into a
  dataset, or with --layout, the layout wanted, whose every field the file must hold
  under its name as a number (`check_fields`: LayoutError naming the field). A column
  of another type is converted only if every value is kept (model/conversions.py:
  int64 beyond 2**53 is not a float64, 0.5 not an int): its values are checked when
  the file is planned, before anything is written (`check_values`), and again as they
  are copied - a ConversionError names the column, the first changed row and its value. Columns the layout does not name are not loaded (nor checked: a
  column of strings may sit beside the records' columns); a loaded column with nulls is
  a NullValuesError naming it and where (exit 1).
- A source is planned once, from the file's header or footer (records, per-batch or
  per-row-group row counts, nulls); workers write each batch's records from the file's
  columns (`copy_fields`: the C library for columns of the field's own type, numpy
  converting the others).
- Identity, for resume and "already loaded": the record count, the size and a sampled
  xxh3 of the whole file, as for a raw file (files.py); such a file does not grow by
  appending, so any change is a changed file (refused; --new-run loads it again).
- What is not records is refused before anything is read (`refuse_unsupported`):
  by suffix (.csv, .json, .npz, .gz, ...) or by content (a compressed file, an archive
  or HDF5 under another name): SourceTypeError, exit 2, with what to do.

Reads files, never writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import BulkloadError, LayoutError, NullValuesError, SourceTypeError
from ..model.conversions import casts_exactly
from ..model.layouts import TYPES, Field, Layout, available_layouts, get_layout, layout_of_fields
from .base import Source
from .files import sample_digest
from .memory import exact_values

#: what each suffix holds, and how to load it instead
_TEXT = "convert it to Parquet or Arrow first (e.g. pyarrow.csv.read_csv, then pyarrow.parquet.write_table)"
UNSUPPORTED_SUFFIXES = {
    ".csv": ("CSV text", _TEXT), ".tsv": ("tab-separated text", _TEXT), ".txt": ("text", _TEXT),
    ".json": ("JSON", _TEXT), ".jsonl": ("JSON lines", _TEXT), ".ndjson": ("JSON lines", _TEXT),
    ".xml": ("XML", _TEXT), ".xlsx": ("an Excel workbook", _TEXT),
    ".npz": ("a NumPy .npz archive", "save each array as its own .npy file (numpy.save)"),
    ".h5": ("HDF5", "export its table to .npy, Arrow or Parquet"),
    ".hdf5": ("HDF5", "export its table to .npy, Arrow or Parquet"),
    ".orc": ("ORC", "convert it to Parquet or Arrow first (pyarrow.orc.read_table)"),
    ".avro": ("Avro", "convert it to Parquet or Arrow first"),
    ".pkl": ("a Python pickle", "save the array with numpy.save"),
    ".pickle": ("a Python pickle", "save the array with numpy.save"),
    ".gz": ("gzip-compressed", "decompress it into a pipe: zcat FILE | bulkload load - DATASET"),
    ".bz2": ("bzip2-compressed", "decompress it into a pipe: bzcat FILE | bulkload load - DATASET"),
    ".xz": ("xz-compressed", "decompress it into a pipe: xzcat FILE | bulkload load - DATASET"),
    ".zst": ("zstd-compressed", "decompress it into a pipe: zstdcat FILE | bulkload load - DATASET"),
    ".lz4": ("lz4-compressed", "decompress it into a pipe: lz4cat FILE | bulkload load - DATASET"),
    ".zip": ("a zip archive", "extract it into a pipe: unzip -p FILE | bulkload load - DATASET"),
    ".tar": ("a tar archive", "extract it into a pipe: tar -xOf FILE | bulkload load - DATASET"),
    ".tgz": ("a compressed tar archive", "extract it into a pipe: tar -xzOf FILE | bulkload load - DATASET"),
}
#: content that is not records whatever the file's name (magics of 4 bytes or more)
UNSUPPORTED_MAGICS = ((b"\x28\xb5\x2f\xfd", ".zst"), (b"\xfd7zXZ\x00", ".xz"), (b"PK\x03\x04", ".zip"),
                      (b"\x89HDF\r\n\x1a\n", ".h5"))
SUPPORTED = ("a file of raw records, .npy, Arrow IPC (.arrow, .feather) or Parquet (.parquet)")


def refuse_unsupported(ref: str, suffix: str, head: bytes) -> None:
    """SourceTypeError if a file named ``*suffix`` starting with ``head`` holds something
    other than records."""
    by_content = next((s for magic, s in UNSUPPORTED_MAGICS if head.startswith(magic)), None)
    found = UNSUPPORTED_SUFFIXES.get(suffix.lower()) or UNSUPPORTED_SUFFIXES.get(by_content)
    if found is not None:
        what, todo = found
        how = "" if suffix.lower() in UNSUPPORTED_SUFFIXES else " (by its content)"
        raise SourceTypeError(f"source {ref} is {what}{how}, not records: bulkload loads {SUPPORTED}; {todo}")


@dataclass(frozen=True)
class TypedFile(Source):
    """A file with a schema, as read when it was planned: its path, its fields that are
    of a layout type ((name, type) in the file's order), why each other one is not
    (``others``: (name, message)), the first nulls found in a column (``nulls``: (name,
    message); a column is checked only if it is loaded) and its record count."""

    path: str
    fields: tuple[tuple[str, str], ...]
    others: tuple[tuple[str, str], ...]
    nulls: tuple[tuple[str, str], ...]
    records: int

    by_extent = True  # matched by path and extent (loading/file_runs.py): a changed file is refused

    @property
    def uri(self) -> str:
        return self.path

    def file_layout(self) -> Layout:
        """The layout of the file's own fields, named after the file (LayoutError naming
        the first field of no layout type)."""
        if self.others:
            raise LayoutError(f"{self.path}: {self.others[0][1]}")
        if not self.fields:
            raise LayoutError(f"{self.path} has no fields: records need named fields (columns)")
        return Layout(stem(self.path), tuple(Field(n, t) for n, t in self.fields))

    def records_layout(self, given: Layout | None, dataset: Layout | None) -> Layout:
        wanted = given or dataset
        if wanted is None:
            layout = known_layout(self.file_layout())
        else:
            for name, message in self.others:
                if name in wanted.names:
                    raise LayoutError(f"{self.path}: {message}")
            check_fields(dict(self.fields), wanted, self.path)
            layout = wanted
        for name, message in self.nulls:
            if name in layout.names:
                raise NullValuesError(message)
        if wanted is not None:
            self.check_values(wanted)
        return layout

    def check_values(self, layout: Layout) -> None:
        """ConversionError naming the first row of a column whose value the layout's field
        cannot hold exactly (only the columns of another type are read: before anything is
        written, the first such row of the file)."""
        own = dict(self.fields)
        for f in layout.fields:
            if casts_exactly(np.dtype(TYPES[own[f.name]][0]), np.dtype(TYPES[f.type][0])):
                continue
            for first_row, values in self.column_pieces(f.name):
                exact_values(values, f, self.path, first_row)

    def column_pieces(self, name: str):
        """(first row, values) of column ``name``, piece by piece (bounded memory)."""
        raise NotImplementedError

    def count(self, layout: Layout) -> int:
        return self.records

    def fingerprint(self, layout: Layout, records: int | None = None) -> str:
        """The record count, size and sampled xxh3 of the whole file (``records``: the
        extent a run loads, files.py; a file with a schema only ever has one)."""
        size = os.stat(self.path).st_size
        records = self.records if records is None else records
        return f"records={records};size={size};sample={sample_digest(self.path, 0, size)}"


def stem(path: str) -> str:
    """A file's name without its suffix: the name of the layout of its own fields."""
    return os.path.splitext(os.path.basename(path))[0] or "records"


def split_fields(columns, path: str) -> tuple[tuple, tuple]:
    """(fields, others) of a file's ``columns`` ((name, numpy dtype, or the message saying
    why it has none)): each column of a layout type as (name, type), the others as
    (name, message) - `layout_of_fields` decides, one column at a time."""
    fields, others = [], []
    for name, dtype in columns:
        if isinstance(dtype, str):
            others.append((name, dtype))
            continue
        try:
            field = layout_of_fields(np.dtype([(name, dtype)]), stem(path)).fields[0]
        except (LayoutError, ValueError, TypeError) as e:
            others.append((name, str(e)))
            continue
        fields.append((field.name, field.type))
    names = [n for n, _ in columns]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise LayoutError(f"{path}: column {twice!r} appears more than once; a layout names each field once")
    return tuple(fields), tuple(others)


def known_layout(have: Layout) -> Layout:
    """A known layout with exactly the fields of ``have`` (so that the file's records can
    join a dataset of it, e.g. ``scidb96``), else ``have``."""
    for name in available_layouts():
        try:
            known = get_layout(name)
        except BulkloadError:
            continue  # a broken declaration in ./schemas is not this file's problem
        if not known.variable_length and known.fields == have.fields:
            return known
    return have


#: the kinds of numpy types whose values convert into one another when every value is exact
NUMBERS = "biuf"


def check_fields(have: dict[str, str], wanted: Layout, what: str) -> None:
    """LayoutError unless every field of ``wanted`` is one of the fields ``have`` (name ->
    type) of the file ``what``, a number as the wanted field is; its values are converted
    as they are copied, each exactly or not at all (`copy_fields`)."""
    for f in wanted.fields:
        own = have.get(f.name)
        if own is None:
            raise LayoutError(f"{what} has no field {f.name!r} of layout {wanted.name!r} (its fields: "
                              f"{', '.join(have) or 'none'}); load it into a dataset of its own layout, or give "
                              "--layout of its fields")
        if np.dtype(TYPES[own][0]).kind not in NUMBERS or np.dtype(TYPES[f.type][0]).kind not in NUMBERS:
            raise LayoutError(f"{what}: field {f.name!r} is {own}, but layout {wanted.name!r} stores it as "
                              f"{f.type}; load it into a dataset of its own layout")


def copy_fields(dst: np.ndarray, columns, lo: int, hi: int, what: str, first_row: int) -> None:
    """``dst[name] = columns[name][lo:hi]`` for every field of ``dst``: the C library
    writes the records whole from the columns of the field's own type (about twice as
    fast as numpy's field-by-field copy); numpy converts the others (another type or
    byte order, a strided column), each value exactly or a ConversionError naming the
    file ``what``, the column and the row (``first_row``: the file's row ``lo``)."""
    same, fields = {}, dst.dtype.fields
    for name in dst.dtype.names:
        column = columns[name][lo:hi]
        if column.dtype == fields[name][0] and column.flags.c_contiguous and dst.flags.c_contiguous:
            same[name] = column
        else:
            dst[name] = exact_values(column, Field(name, _type_name(fields[name][0])), what, first_row)
    try:
        from . import _gen  # the C extension: optional on a broken install (numpy does the same)
    except ImportError:
        _gen = None
    if _gen is None or not same:
        for name, column in same.items():
            dst[name] = column
        return
    _gen.scatter_fields(dst, dst.dtype.itemsize, [(c, fields[n][1], c.dtype.itemsize) for n, c in same.items()])


def _type_name(dtype: np.dtype) -> str:
    """The layout type name of a field's dtype (``float64``)."""
    return np.dtype(dtype).newbyteorder("=").name
