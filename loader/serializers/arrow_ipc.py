"""Arrow batches: one Arrow IPC *stream* per stored value.

The value is a complete IPC stream (schema message, one RecordBatch, end-of-stream
marker), so any Arrow reader opens it with ``pyarrow.ipc.open_stream(value)``. The
columns are the layout's fields (``layout.arrow_schema``: native types - timestamps,
durations, bool, fixed_size_binary, string, fixed_size_list - and real nulls for the
nullable fields, model/arrow_records.py), optionally compressed per buffer with lz4 (frame) or zstd
(``IpcWriteOptions(compression=...)``). The schema metadata carries the batch:

    bulkload.layout  the layout name
    bulkload.start   the batch's first record index (decimal)
    bulkload.count   its record count (decimal), so `count` reads only the schema message

`decode` returns a new structured array of ``layout.dtype`` (Arrow is columnar, so the
rows are interleaved with one vectorised copy per column; the nulls become ``_validity``). Malformed values, or values
of another layout, raise `loader.errors.VerifyError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..errors import ConversionError, LayoutError, VerifyError
from ..model.arrow_numpy import from_numpy, to_numpy
from ..model.arrow_records import column_to_arrow, set_bit, set_validity, validity_of
from ..model.conversions import field_values
from ..model.layouts import TYPES, VALIDITY, Layout
from .base import Serializer

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ..infra.bytes_like import BytesLike
    from ..model.layouts import Field
    from .base import Columns

_START = b"bulkload.start"
_COUNT = b"bulkload.count"


def _corrupt(msg: str) -> VerifyError:
    return VerifyError(f"corrupt Arrow batch value: {msg}")


class ArrowSerializer(Serializer):
    name = "arrow"
    compressions = ("none", "lz4", "zstd")

    def __init__(self, layout: Layout, compression: str = "none") -> None:
        super().__init__(layout, compression)
        self._schema = layout.arrow_schema
        self._options = pa.ipc.IpcWriteOptions(compression=None if self.compression == "none" else self.compression)
        self._base_meta = dict(self._schema.metadata or {})
        #: the fields that are single numbers, never null: their columns are the numpy values
        self._plain = {f.name for f in layout.fields if f.type in TYPES and not f.nullable}

    # --- encoding -----------------------------------------------------------
    def new_buffer(self, n: int) -> tuple[BytesLike, np.ndarray]:
        self.check_batch_records(n)
        return b"", np.zeros(n, dtype=self.layout.dtype)  # no buffer of its own: `encode` builds the stream

    def encode_buffer(self, buf: BytesLike, records: np.ndarray, start: int) -> BytesLike:
        return self.encode(records, start)

    def encode(self, records: ArrayLike, start: int) -> BytesLike:
        records = self._check_records(records)
        n = len(records)
        self.check_batch_records(n)
        start = self._check_start(start)
        arrays = [
            from_numpy(records[f.name])
            if f.name in self._plain
            else column_to_arrow(records[f.name], f, validity_of(records, self.layout, f.name))
            for f in self.layout.fields
        ]
        meta = dict(self._base_meta)
        meta[_START] = str(start).encode()
        meta[_COUNT] = str(n).encode()
        schema = self._schema.with_metadata(meta)
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema, options=self._options) as writer:
            writer.write_batch(batch)
        value: BytesLike = sink.getvalue()  # a pyarrow Buffer
        return value

    # --- decoding -----------------------------------------------------------
    def _schema_meta(self, schema: pa.Schema) -> tuple[int, int]:
        names = [f.name for f in schema]
        if names != self.layout.names or any(a.type != b.type for a, b in zip(schema, self._schema)):
            raise _corrupt(
                f"columns {', '.join(f'{f.name}:{f.type}' for f in schema)} do not match layout {self.layout.name!r}"
            )
        meta = schema.metadata or {}
        try:
            return int(meta[_START]), int(meta[_COUNT])
        except (KeyError, ValueError):
            raise _corrupt("schema metadata lacks bulkload.start/bulkload.count") from None

    @property
    def decode_copies(self) -> bool:
        return True  # `decode` assembles the columns into a new record array

    def count(self, value: BytesLike) -> int:
        try:
            schema = pa.ipc.read_schema(pa.py_buffer(value))
        except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
            raise _corrupt(f"cannot read the schema message: {e}") from None
        return self._schema_meta(schema)[1]

    def _read(self, value: BytesLike, fields: list[int] | None = None) -> tuple[int, int, pa.Table]:
        """(start, count, Table) of a value: all columns, or only those at ``fields``
        (IPC ``included_fields``: the others' buffers are neither read nor decompressed)."""
        try:
            if fields is None:
                reader = pa.ipc.open_stream(pa.py_buffer(value))
                start, n = self._schema_meta(reader.schema)
            else:
                start, n = self._schema_meta(pa.ipc.read_schema(pa.py_buffer(value)))
                reader = pa.ipc.open_stream(pa.py_buffer(value), options=pa.ipc.IpcReadOptions(included_fields=fields))
            table = reader.read_all()
        except VerifyError:
            raise
        except (pa.ArrowException, OSError, ValueError) as e:
            raise _corrupt(f"{type(e).__name__}: {e}") from None
        if table.num_rows != n:
            raise _corrupt(f"metadata says {n} records, the stream holds {table.num_rows}")
        return start, n, table

    def decode(self, value: BytesLike) -> tuple[int, np.ndarray]:
        start, n, table = self._read(value)
        out = np.empty(n, dtype=self.layout.dtype)
        if self.layout.validity_bytes:
            out[VALIDITY] = 0
        for i, f in enumerate(self.layout.fields):
            col = table.column(i)
            if f.name not in self._plain:
                out[f.name], valid = self._typed(col, f)
                if f.nullable:
                    set_validity(out, self.layout, f.name, valid)
                continue
            _no_nulls(col, f.name)
            for chunk, at in _chunks(col):
                out[f.name][at : at + len(chunk)] = to_numpy(chunk)
        return start, out

    def decode_columns(
        self, value: BytesLike, names: list[str], out: Columns | None = None
    ) -> tuple[int, int, Columns]:
        """Only the buffers of ``names`` are read (and decompressed); a plain number column
        is a zero-copy view of the stream's (or its decompressed) buffer, a typed one is
        converted (`field_values`). ``_validity`` among ``names``: built from the null
        bitmaps of the nullable fields (read for it)."""
        lay = self.layout
        want = [name for name in names if name != VALIDITY]
        if VALIDITY in names:
            want += [name for name in lay.nullable_names if name not in want]
        start, n, table = self._read(value, sorted(lay.names.index(name) for name in want))
        cols: Columns = {}
        if VALIDITY in names:
            cols[VALIDITY] = np.zeros((n, lay.validity_bytes), np.uint8)
        for name in want:
            f, col = lay.field(name), table.column(name)
            if name in self._plain:
                _no_nulls(col, name)
                cols[name] = to_numpy(col)
                continue
            values, valid = self._typed(col, f)
            cols[name] = values
            if f.nullable and VALIDITY in cols:
                set_bit(cols[VALIDITY], lay, name, valid)  # (the values are zero where null)
        return start, n, {name: cols[name] for name in names}

    @staticmethod
    def _typed(col: pa.ChunkedArray, f: Field) -> tuple[np.ndarray, np.ndarray | None]:
        """(values, valid mask or None) of a stored column of a field that is not a plain number."""
        try:
            return field_values(col, f, "stored batch")
        except (ConversionError, LayoutError) as e:
            raise _corrupt(str(e)) from None


def _no_nulls(col: pa.ChunkedArray, name: str) -> None:
    if col.null_count:
        raise _corrupt(f"column {name!r} has {col.null_count} nulls")


def _chunks(col: pa.ChunkedArray) -> Iterator[tuple[pa.Array, int]]:
    at = 0
    for chunk in col.chunks:
        yield chunk, at
        at += len(chunk)
