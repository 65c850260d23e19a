"""Arrow IPC files and streams (``.arrow``, ``.feather``, ``.arrows``) and Parquet (``.parquet``).

Both are read by pyarrow, imported only here and only when such a file is loaded. Their
columns make the layout (typed.py, `schema_fields`): integers, floats (float16 too) and
bool; ``timestamp(unit, tz)`` and ``duration(unit)`` of s..ns; ``fixed_size_binary(N)``;
``string`` / ``binary`` (a width only from --layout's bytes[N] / string[N]); and
``fixed_size_list`` of numbers; dictionary-encoded ones as their values (a file with
dictionaries is read through pyarrow's reader, which resolves them: `_plan_decoded`). A
column of any other type (dates, decimals, nested) that the run would load is a
LayoutError naming it (exit 2); nulls in a loaded column whose field is not nullable a
NullValuesError naming the column and the record batch / row group (exit 1).

- **Arrow IPC** (file format: ``ARROW1`` magic and a footer; stream format: messages
  only). Planning reads every record batch's header from a memory map (zero copy: no
  data is decoded unless the file is compressed) to count its rows and nulls and note
  where its columns' values lie in the file; a worker reads exactly the record batches
  its batches overlap, from its own memory map of the file, as numpy views at those
  offsets - without pyarrow, which costs a worker a fifth of a second to import (a
  compressed file, or one with columns other than plain numbers or with nulls: the
  worker decodes the record batch with pyarrow). Splits across workers by record batch.
- **Parquet**: planning reads the footer only (row counts per row group; null counts
  from the column statistics, else checked as each row group is decoded). A worker
  decodes the row groups its batches overlap (the loaded columns only), one at a time,
  and keeps the last one (memory stays at one row group per worker: bounded, whatever
  the file's size). Batch -> worker is seq mod K (model/placement.py), so every worker
  whose batches fall in a row group decodes it: with row groups larger than a batch and
  W workers, each row group is decoded up to W times (splits across workers by row
  group exactly when a row group holds no more than a batch).
- A decoded record batch or row group is kept for the worker's next batches (`_piece`),
  which read on from it.

A file that pyarrow cannot read as its suffix says is a FileFormatError naming it.
"""

from __future__ import annotations

import bisect
import functools
import mmap
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import FileFormatError, NullValuesError
from ..model.arrow_numpy import to_numpy
from ..model.conversions import arrow_field_type
from ..model.field_types import NUMBERS, parse_type
from .base import FileType, register_file_type
from .typed import TypedFile, split_fields

if TYPE_CHECKING:
    from ..model.layouts import Layout


def schema_fields(schema, path: str) -> tuple[tuple, tuple]:
    """(fields, others) of an Arrow schema's columns (typed.split_fields): a column of a
    layout type (or of text / binary of variable length) is a field; any other type is
    named in ``others``."""
    import pyarrow as pa  # why: heavy; only a load of an Arrow or Parquet file gets here

    columns = []
    for f in schema:
        kind = f.type.value_type if pa.types.is_dictionary(f.type) else f.type  # dictionaries: decoded
        found = arrow_field_type(kind)
        found = (found, None) if isinstance(found, str) else found
        columns.append(
            (
                f.name,
                found
                if found is not None
                else (
                    f"column {f.name!r} has type {f.type}, which no layout type holds; a field is a number, bool, "
                    "timestamp, duration, binary or string, or a fixed-size list of numbers (cast or drop the column first)"
                ),
            )
        )
    return split_fields(columns, path)


def _plain(type_name: str) -> bool:
    """A column whose values lie in the file as the field's numpy values (no bits, no offsets)."""
    return (
        type_name in NUMBERS or parse_type(type_name).base in ("datetime64", "timedelta64")
        if type_name not in ("string", "bytes") and not type_name.endswith("[]")
        else False
    )


def _column(column):
    """An Arrow column as numpy when it is plain numbers without nulls, else as it is
    (converted by the field, model/conversions.py)."""
    import pyarrow as pa  # why: heavy; only a worker reading a decoded Arrow column gets here

    t = column.type
    if not column.null_count and (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return to_numpy(column)
    return column


def nulls_message(path: str, column: str, count: int, where: str) -> str:
    return (
        f"{path}: column {column!r} holds {count:,} null(s) in {where}, but its field is not nullable - "
        "fill or drop them first (pyarrow.compute.fill_null, drop_null), or declare the field nullable "
        f'({column} = {{ type = "...", nullable = true }})'
    )


def first_nulls(found: dict, path: str, column: str, count: int, where: str) -> None:
    """Note the first nulls of ``column`` in ``found`` (name -> message)."""
    if count and column not in found:
        found[column] = nulls_message(path, column, count, where)


class _RowRanges:
    """Sources cut into pieces of consecutive rows (record batches, row groups):
    ``row_starts[i]`` is the first row of piece i, ``row_starts[-1]`` the row count."""

    row_starts: tuple[int, ...]

    if TYPE_CHECKING:  # provided by TypedFile, the other base of every such source

        def filled_layout(self, records: np.ndarray) -> Layout: ...

        def copy_into(
            self, records: np.ndarray, columns: dict[str, np.ndarray], lo: int, hi: int, first_row: int
        ) -> None: ...

    def fill(self, records: np.ndarray, offset: int) -> None:
        """Copy rows offset.. of the pieces they fall in into ``records``."""
        starts, end, names = self.row_starts, offset + len(records), tuple(self.filled_layout(records).names)
        i = bisect.bisect_right(starts, offset) - 1
        pos = offset
        while pos < end:
            lo, hi = starts[i], starts[i + 1]
            if hi > lo:
                upto = min(hi, end)
                self.copy_into(records[pos - offset : upto - offset], _piece(self, i, names), pos - lo, upto - lo, pos)
                pos = upto
            i += 1

    def columns(self, i: int, names: tuple[str, ...]) -> dict:
        """Piece ``i``'s columns ``names`` as numpy arrays, by name."""
        raise NotImplementedError

    def column_pieces(self, name: str):
        for i, first in enumerate(self.row_starts[:-1]):
            if self.row_starts[i + 1] > first:
                yield first, self.columns(i, (name,))[name]


@functools.lru_cache(maxsize=1)  # one decoded piece per worker: memory stays bounded
def _piece(source: _RowRanges, i: int, names: tuple[str, ...]) -> dict:
    """Piece ``i``'s columns, decoded once for the consecutive batches that read it."""
    return source.columns(i, names)


@dataclass(frozen=True)
class ArrowIpcSource(_RowRanges, TypedFile):
    """An Arrow IPC file or stream: record batch i starts at byte ``offsets[i]``; the
    values of its column ``fields[j]`` at byte ``values_at[i][j]`` (None: a compressed
    file, whose record batches are decoded)."""

    row_starts: tuple[int, ...]
    offsets: tuple[int, ...]
    values_at: tuple[tuple[int, ...], ...] | None
    dictionaries: bool = False  # dictionary-encoded columns: batches read by pyarrow's reader

    @classmethod
    def open(cls, path: str) -> ArrowIpcSource:
        import pyarrow as pa  # why: heavy; only a load of an Arrow file gets here

        try:
            with pa.memory_map(path) as mm:
                return cls._plan(path, mm)
        except (pa.ArrowException, OSError) as e:
            with open(path, "rb") as f:
                feather_v1 = f.read(4) == b"FEA1"
            hint = (
                "it is a Feather version 1 file: write it again with pyarrow.feather.write_feather (version 2)"
                if feather_v1
                else "write it with pyarrow.ipc or pyarrow.feather"
            )
            raise FileFormatError(f"{path} is not a valid Arrow IPC file ({str(e).strip()}); {hint}") from None

    @classmethod
    def _plan(cls, path: str, mm) -> ArrowIpcSource:
        import pyarrow as pa  # why: heavy; only a load of an Arrow file gets here

        schema, start = _open_reader(mm)
        fields, others = schema_fields(schema, path)
        if _has_dictionaries(schema):
            return cls._plan_decoded(path, mm, fields, others)
        mm.seek(0)
        whole = mm.read_buffer()  # the file, zero copy: its address locates the columns' values
        reader = pa.BufferReader(whole)
        reader.seek(start)
        messages = pa.ipc.MessageReader.open_stream(reader)
        starts, values_at = [0], []
        offsets: list[int] = []
        nulls: dict[str, str] = {}
        while True:
            at = reader.tell()
            try:
                msg = messages.read_next_message()
            except StopIteration:
                break
            if msg.type != "record batch":
                continue
            batch = pa.ipc.read_record_batch(msg, schema)
            for name, *_ in fields:
                first_nulls(nulls, path, name, batch.column(name).null_count, f"record batch {len(offsets)}")
            offsets.append(at)
            starts.append(starts[-1] + batch.num_rows)
            values_at.append(
                tuple(_values_at(batch.column(name), whole) if _plain(t) else None for name, t, _ in fields)
            )
        in_file = (
            all(at is not None for batch in values_at for at in batch)
            and not nulls
            and all(_plain(t) for _, t, _ in fields)
        )
        return cls(
            path,
            fields,
            others,
            tuple(nulls.items()),
            starts[-1],
            tuple(starts),
            tuple(offsets),
            tuple(tuple(at for at in batch if at is not None) for batch in values_at) if in_file else None,
        )

    @classmethod
    def _plan_decoded(cls, path: str, mm, fields, others) -> ArrowIpcSource:
        """A file with dictionary-encoded columns: its record batches read through pyarrow's
        reader (which holds the dictionaries); ``offsets``: the batches' indexes."""
        starts = [0]
        nulls: dict[str, str] = {}
        for i, batch in enumerate(_batches(mm)):
            for name, *_ in fields:
                first_nulls(nulls, path, name, batch.column(name).null_count, f"record batch {i}")
            starts.append(starts[-1] + batch.num_rows)
        return cls(
            path,
            fields,
            others,
            tuple(nulls.items()),
            starts[-1],
            tuple(starts),
            tuple(range(len(starts) - 1)),
            None,
            True,
        )

    def columns(self, i: int, names: tuple[str, ...]) -> dict:
        rows = self.row_starts[i + 1] - self.row_starts[i]
        if self.dictionaries:  # record batch i through pyarrow's reader (dictionaries decoded)
            batch = _decoded_batch(self, i)
            return {name: _column(batch.column(name)) for name in names}
        if self.values_at is not None:  # views of the file's bytes
            st = os.stat(self.path)
            mm = _file_map(self.path, st.st_size, st.st_mtime_ns)
            where = dict(zip((n for n, *_ in self.fields), self.values_at[i]))
            types = {n: t for n, t, _ in self.fields}
            return {name: np.frombuffer(mm, parse_type(types[name]).scalar_code, rows, where[name]) for name in names}
        import pyarrow as pa  # why: heavy; only a worker decoding a compressed Arrow file gets here

        mm, schema = _mapped_ipc(self)
        mm.seek(self.offsets[i])
        batch = pa.ipc.read_record_batch(pa.ipc.read_message(mm), schema)
        return {name: _column(batch.column(name)) for name in names}


def _has_dictionaries(schema) -> bool:
    import pyarrow as pa  # why: heavy; only a load of an Arrow file gets here

    return any(pa.types.is_dictionary(f.type) for f in schema)


def _batches(mm):
    """The record batches of an Arrow IPC file or stream, in order, dictionaries resolved."""
    import pyarrow as pa  # why: heavy; only a load of an Arrow file gets here

    mm.seek(0)
    is_file = mm.read(6) == b"ARROW1"
    mm.seek(0)
    if is_file:
        reader = pa.ipc.open_file(mm)
        return (reader.get_batch(i) for i in range(reader.num_record_batches))
    return iter(pa.ipc.open_stream(mm))


_decoding: dict = {}  # source -> (its batches iterator, index of the next one): a worker reads on


def _decoded_batch(source: ArrowIpcSource, i: int):
    """Record batch ``i`` of a file with dictionaries (read on from the last one asked for)."""
    import pyarrow as pa  # why: heavy; only a worker reading an Arrow file gets here

    it, at = _decoding.get(source, (None, 0))
    if it is None or at > i:
        _decoding.clear()  # one file at a time per worker: memory stays bounded
        it, at = _batches(pa.memory_map(source.path)), 0
    for _ in range(i - at):
        next(it)
    batch = next(it)
    _decoding[source] = (it, i + 1)
    return batch


def _values_at(array, whole) -> int | None:
    """Byte offset in the file (``whole``) of the values of a column read from it, None if
    they are not there as they are (decompressed, or sliced)."""
    if len(array) == 0:
        return 0
    values = array.buffers()[1]
    at = values.address - whole.address
    return at if array.offset == 0 and at >= 0 and at + values.size <= whole.size else None


def _open_reader(mm) -> tuple[object, int]:
    """(schema, byte offset of its first message) of an Arrow IPC file or stream."""
    import pyarrow as pa  # why: heavy; only a load of an Arrow file gets here

    is_file = mm.read(6) == b"ARROW1"
    mm.seek(0)
    if is_file:
        return pa.ipc.open_file(mm).schema, 8  # (opening checks the footer)
    return pa.ipc.open_stream(mm).schema, 0


@functools.lru_cache(maxsize=4)
def _file_map(path: str, size: int, mtime_ns: int) -> mmap.mmap:
    """A read-only memory map of a file (as it is: size, mtime), opened once per process."""
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


@functools.lru_cache(maxsize=4)
def _mapped_ipc(source: ArrowIpcSource):
    """(memory map, schema) of an Arrow IPC source's file, opened once per worker process."""
    import pyarrow as pa  # why: heavy; only a worker reading an Arrow file gets here

    mm = pa.memory_map(source.path)
    return mm, _open_reader(mm)[0]


@dataclass(frozen=True)
class ParquetSource(_RowRanges, TypedFile):
    """A Parquet file: row group i holds rows ``row_starts[i]``..; ``unchecked``: the
    columns whose statistics do not count nulls (checked when decoded)."""

    row_starts: tuple[int, ...]
    unchecked: tuple[str, ...]

    @classmethod
    def open(cls, path: str) -> ParquetSource:
        import pyarrow as pa  # why: heavy; only a load of a Parquet file gets here
        import pyarrow.parquet as pq

        try:
            md = pq.ParquetFile(path).metadata
            fields, others = schema_fields(md.schema.to_arrow_schema(), path)
        except (pa.ArrowException, OSError) as e:
            raise FileFormatError(
                f"{path} is not a valid Parquet file ({str(e).strip()}); write it with pyarrow.parquet.write_table"
            ) from None
        starts, unchecked = [0], set()
        nulls: dict[str, str] = {}
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for j in range(rg.num_columns):
                stats, name = rg.column(j).statistics, rg.column(j).path_in_schema
                if stats is None or not stats.has_null_count:
                    unchecked.add(name)
                else:
                    first_nulls(nulls, path, name, stats.null_count, f"row group {g}")
            starts.append(starts[-1] + rg.num_rows)
        return cls(
            path,
            fields,
            others,
            tuple(nulls.items()),
            starts[-1],
            tuple(starts),
            tuple(n for n, *_ in fields if n in unchecked),
        )

    def columns(self, i: int, names: tuple[str, ...]) -> dict:
        """Row group ``i``, decoded (nulls the footer did not count are looked for now)."""
        import pyarrow.parquet as pq  # why: heavy; only a worker reading a Parquet file gets here

        table = pq.ParquetFile(self.path, memory_map=True).read_row_group(i, columns=list(names), use_threads=False)
        layout = getattr(self, "bound", None)  # (None: values checked before a load, by their field)
        for name in set(self.unchecked) & set(names):
            count = table.column(name).null_count
            if count and layout is not None and not layout.field(name).nullable:
                raise NullValuesError(nulls_message(self.path, name, count, f"row group {i}"))
        return {name: _column(table.column(name)) for name in names}


register_file_type((".arrow", ".feather", ".arrows", ".ipc"), FileType("Arrow IPC", b"ARROW1", ArrowIpcSource.open))
register_file_type((".parquet", ".pq"), FileType("Parquet", b"PAR1", ParquetSource.open))
