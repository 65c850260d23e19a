"""Files with a schema: what .npy, Arrow IPC and Parquet sources share (npy.py, arrow_files.py).

- The layout of their records comes from the file (`model.layouts.layout_of_fields`):
  into a new dataset without --layout, the file's own fields in its order (a column
  with nulls makes a nullable field; text or binary of variable length a string[N] /
  bytes[N] of its longest value, read when the file is planned), named as a known layout with exactly those
  fields (e.g. ``scidb96``), else after the file; into a dataset, or with --layout, the
  layout wanted, whose every field the file must hold under its name in a type that
  can become the field's (`check_fields`: numbers and bools into numbers and bools,
  times of any unit into times of the same kind, text/binary into bytes[N]/string[N],
  lists of k numbers into T[k]; else a LayoutError naming the field). A column of
  another type is converted only if every value is kept (model/conversions.py:
  int64 beyond 2**53 is not a float64, 0.5 not an int, 1 ns not a whole us, 9 bytes
  not a bytes[8]): its values are checked when the file is planned, before anything is
  written (`check_values`), and again as they are copied - a ConversionError names the
  column, the first changed row and its value. Columns the layout does not name are not
  loaded (nor checked: a column of another type may sit beside the records' columns); a
  loaded column with nulls into a field that is not nullable is a NullValuesError naming
  it and where (exit 1).
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

import copy
import os
from dataclasses import dataclass

import numpy as np

from ..errors import LayoutError, NullValuesError, SourceTypeError
from ..model.arrow_records import set_validity
from ..model.conversions import field_values, uniform_length
from ..model.field_types import MAX_WIDTH
from ..model.layouts import VALIDITY, Field, Layout, known_layout, layout_of_fields, parse_type
from .base import Source, SourcePlan
from .files import sample_digest

#: what each suffix holds, and how to load it instead
_TEXT = "convert it to Parquet or Arrow first (e.g. pyarrow.csv.read_csv, then pyarrow.parquet.write_table)"
UNSUPPORTED_SUFFIXES = {
    ".csv": ("CSV text", _TEXT),
    ".tsv": ("tab-separated text", _TEXT),
    ".txt": ("text", _TEXT),
    ".json": ("JSON", _TEXT),
    ".jsonl": ("JSON lines", _TEXT),
    ".ndjson": ("JSON lines", _TEXT),
    ".xml": ("XML", _TEXT),
    ".xlsx": ("an Excel workbook", _TEXT),
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
UNSUPPORTED_MAGICS = (
    (b"\x28\xb5\x2f\xfd", ".zst"),
    (b"\xfd7zXZ\x00", ".xz"),
    (b"PK\x03\x04", ".zip"),
    (b"\x89HDF\r\n\x1a\n", ".h5"),
)
SUPPORTED = "a file of raw records, .npy, Arrow IPC (.arrow, .feather) or Parquet (.parquet)"


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
    of a layout type ((name, type, tz) in the file's order; type ``string`` / ``bytes``:
    text / binary of variable length), why each other one is not (``others``: (name,
    message)), the first nulls found in a column (``nulls``: (name, message); a column is
    checked only if it is loaded) and its record count. Planned for a layout, it carries
    it (``bound``: the workers fill records of it)."""

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
        with_nulls = {n for n, _ in self.nulls}
        fields = []
        for name, t, tz in self.fields:
            if t in VARIABLE:  # text / binary: as wide as the longest value (one pass over the column)
                t = f"{t}[{self.longest(name)}]"
            elif t.endswith("[]"):  # lists: T[k] when every one holds k (one pass over the column)
                t = f"{t[:-2]}[{self.list_length(name)}]"
            fields.append(Field(name, t, name in with_nulls, tz))
        return Layout(stem(self.path), tuple(fields))

    def list_length(self, name: str) -> int:
        """The length of every list of the list column ``name``; LayoutError if they differ."""
        lengths = {uniform_length(values) for _, values in self.column_pieces(name)}
        if len(lengths) != 1 or None in lengths:
            raise LayoutError(
                f"{self.path}: column {name!r} holds lists of different lengths (or over {MAX_WIDTH:,}); "
                f'a field holds k values: give --layout with {name} = "T[k]", or make them one length'
            )
        return lengths.pop()

    def longest(self, name: str) -> int:
        """Bytes of the longest value of the text / binary column ``name`` (at least 1);
        LayoutError if it is longer than a field holds."""
        import pyarrow.compute as pc  # why: heavy; only files with text columns get here

        longest = max([pc.max(pc.binary_length(values)).as_py() or 0 for _, values in self.column_pieces(name)] or [0])
        if longest > MAX_WIDTH:
            raise LayoutError(
                f"{self.path}: column {name!r} holds a value of {longest:,} bytes; a field holds at "
                f"most {MAX_WIDTH:,}: drop the column, or shorten its values"
            )
        return max(1, longest)

    def records_layout(self, given: Layout | None, dataset: Layout | None) -> Layout:
        wanted = given or dataset
        if wanted is None:
            layout = known_layout(self.file_layout())
        else:
            for name, message in self.others:
                if name in wanted.names:
                    raise LayoutError(f"{self.path}: {message}")
            check_fields({n: t for n, t, _ in self.fields}, wanted, self.path)
            layout = wanted
        for name, message in self.nulls:
            if name in layout.names and not layout.field(name).nullable:
                raise NullValuesError(message)
        if wanted is not None:
            self.check_values(wanted)
        return layout

    def plan(self, layout: Layout) -> SourcePlan:
        """The plan of this file for records of ``layout``, which its workers fill."""
        bound = copy.copy(self)
        object.__setattr__(bound, "bound", layout)  # (not a dataclass field: equality and hashing ignore it)
        return SourcePlan(bound, self.count(layout), self.fingerprint(layout))

    def check_values(self, layout: Layout) -> None:
        """ConversionError naming the first row of a column whose value the layout's field
        cannot hold exactly (only the columns of another type are read: before anything is
        written, the first such row of the file)."""
        own = {n: t for n, t, _ in self.fields}
        for f in layout.fields:
            if own[f.name] == f.type:
                continue
            for first_row, values in self.column_pieces(f.name):
                field_values(values, f, self.path, first_row)

    def copy_into(self, records: np.ndarray, columns, lo: int, hi: int, first_row: int) -> None:
        """`copy_fields` of rows lo..hi of ``columns`` into records of the planned layout."""
        copy_fields(records, columns, lo, hi, self.path, first_row, self.filled_layout(records))

    def filled_layout(self, records: np.ndarray) -> Layout:
        """The layout planned (`plan`), else the one of ``records``' own fields (none nullable)."""
        bound = getattr(self, "bound", None)
        return bound if bound is not None else layout_of_fields(records.dtype, stem(self.path))

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
    """(fields, others) of a file's ``columns`` ((name, numpy dtype, or (type, tz) of a
    layout type, or the message saying why it has none)): each column of a layout type
    as (name, type, tz), the others as (name, message) - `layout_of_fields` decides the
    numpy ones, one column at a time."""
    fields, others = [], []
    for name, dtype in columns:
        if name == VALIDITY:
            others.append(
                (
                    name,
                    f"it has a {VALIDITY} field: records of a layout with nullable fields, which the "
                    "file does not name; pass --layout",
                )
            )
            continue
        if isinstance(dtype, str):
            others.append((name, dtype))
            continue
        if isinstance(dtype, tuple):
            fields.append((name, *dtype))
            continue
        try:
            field = layout_of_fields(np.dtype([(name, dtype)]), stem(path)).fields[0]
        except (LayoutError, ValueError, TypeError) as e:
            others.append((name, str(e)))
            continue
        fields.append((field.name, field.type, None))
    names = [n for n, _ in columns]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise LayoutError(f"{path}: column {twice!r} appears more than once; a layout names each field once")
    return tuple(fields), tuple(others)


#: the types of a file's text / binary columns of variable length (no layout type of their own)
VARIABLE = {"string": "text", "bytes": "binary"}


def convertible(own: str, field: Field) -> bool:
    """Can a column of type ``own`` (a layout type, or ``string`` / ``bytes`` of variable
    length) become ``field``, value by value (each exactly or refused)?"""
    want = field.spec
    if own.endswith("[]"):  # lists of variable length: checked value by value
        return want.count is not None
    if own in VARIABLE or want.base in ("bytes", "string"):
        return own in VARIABLE or (parse_type(own).base in ("bytes", "string") and want.base in ("bytes", "string"))
    have = parse_type(own)
    if want.base in ("datetime64", "timedelta64"):
        return have.base == want.base
    if want.count is not None:
        return have.count == want.count
    return have.count is None and (have.is_number or have.base == "bool")


def check_fields(have: dict[str, str], wanted: Layout, what: str) -> None:
    """LayoutError unless every field of ``wanted`` is one of the fields ``have`` (name ->
    type) of the file ``what``, of a type `convertible` into it; its values are converted
    as they are copied, each exactly or not at all (`copy_fields`)."""
    for f in wanted.fields:
        own = have.get(f.name)
        if own is None:
            raise LayoutError(
                f"{what} has no field {f.name!r} of layout {wanted.name!r} (its fields: "
                f"{', '.join(have) or 'none'}); load it into a dataset of its own layout, or give "
                "--layout of its fields"
            )
        if not convertible(own, f):
            shown = f"{VARIABLE.get(own, 'lists')} of variable length" if own in VARIABLE or own.endswith("[]") else own
            raise LayoutError(
                f"{what}: field {f.name!r} is {shown}, but layout {wanted.name!r} stores it as "
                f"{f.type}; load it into a dataset of its own layout"
            )


def copy_fields(dst: np.ndarray, columns, lo: int, hi: int, what: str, first_row: int, layout: Layout) -> None:
    """``dst[name] = columns[name][lo:hi]`` for every field of ``layout`` (``dst``: its
    records): the C library writes the records whole from the numpy columns of the
    field's own type (about twice as fast as numpy's field-by-field copy); the others
    (another type or byte order, a strided column, an Arrow column) are converted
    (model/conversions.py), each value exactly or a ConversionError naming the file
    ``what``, the column and the row (``first_row``: the file's row ``lo``). The
    ``_validity`` bits are those of the columns' nulls."""
    same, fields = {}, dst.dtype.fields
    if layout.validity_bytes:
        dst[VALIDITY] = 0
    for f in layout.fields:
        column = columns[f.name][lo:hi]
        if (
            isinstance(column, np.ndarray)
            and column.dtype == fields[f.name][0]
            and column.flags.c_contiguous
            and dst.flags.c_contiguous
        ):
            same[f.name] = column
            valid = None
        else:
            dst[f.name], valid = field_values(column, f, what, first_row)
        if f.nullable:
            set_validity(dst, layout, f.name, valid)
    if same:
        try:
            from . import _gen  # the C extension: optional on a broken install (numpy does the same)
        except ImportError:
            pass
        else:
            _gen.scatter_fields(dst, dst.dtype.itemsize, [(c, fields[n][1], c.dtype.itemsize) for n, c in same.items()])
            return
    for name, column in same.items():
        dst[name] = column
