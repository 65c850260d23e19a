"""Writing a query's result (a pyarrow Table) in one of the query formats.

`write_table(table, fmt, out)`: ``table`` (aligned text), ``csv``, ``json``, ``arrow``,
``parquet`` or ``npy``, to the file ``out`` (through infra.outputs: a regular file is
written under a temporary name and renamed when complete; a FIFO or a device is written
as a stream) or, with ``out`` None or ``-``, to standard output (binary formats never to
a terminal: UsageError); never into a dataset. Used by ``bulkload query`` and a
pipeline's [query] step.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import IO, Any

import numpy as np
import pyarrow as pa

from ..errors import UsageError
from ..infra.outputs import open_output
from ..model.arrow_numpy import to_numpy

QUERY_FORMATS = ("table", "csv", "json", "arrow", "parquet", "npy")
BINARY_FORMATS = ("arrow", "parquet", "npy")


def check_format(fmt: str, given: str | None = None) -> None:
    if fmt not in QUERY_FORMATS:
        raise UsageError(f"--format {given or fmt!r} is unknown; use one of {', '.join(QUERY_FORMATS)}")


def write_table(table: pa.Table, fmt: str, out: str | None, protect: tuple[str, ...] = ()) -> None:
    """``out`` None or ``-``: standard output; ``protect``: the dataset read (never written)."""
    check_format(fmt)
    binary = fmt in BINARY_FORMATS
    with open_output(out or "-", text=not binary, protect=protect) as o:
        _write(table, fmt, o.file)


def _write(table: pa.Table, fmt: str, sink: IO[Any]) -> None:
    _WRITERS[fmt](table, sink)
    sink.flush()


def _text(table: pa.Table, sink: IO[str]) -> None:
    cols = table.column_names
    cells = [[_cell(v) for v in table.column(c).to_pylist()] for c in cols]
    widths = [max([len(c)] + [len(v) for v in col]) for c, col in zip(cols, cells)]
    sink.write("  ".join(c.rjust(w) for c, w in zip(cols, widths)) + "\n")
    for i in range(table.num_rows):
        sink.write("  ".join(col[i].rjust(w) for col, w in zip(cells, widths)) + "\n")
    sink.write(f"({table.num_rows:,} cells)\n")


def _cell(v: object) -> str:
    if isinstance(v, bytes):  # bytes[N]: the text up to its zero padding, as JSON shows it
        return _json_bytes(v)
    return repr(v) if isinstance(v, float) else str(v)


def _csv(table: pa.Table, sink: IO[str]) -> None:
    import pyarrow.csv as pcsv  # only this format needs pyarrow's CSV module

    buf = pa.BufferOutputStream()
    pcsv.write_csv(as_text(table, lists=True), buf)
    sink.write(buf.getvalue().to_pybytes().decode())


def _json(table: pa.Table, sink: IO[str]) -> None:
    json.dump(as_text(table, lists=False).to_pylist(), sink)
    sink.write("\n")


def _json_bytes(value: object) -> str:
    """A bytes[N] value in JSON: its text up to the zero padding (undecodable bytes escaped)."""
    if isinstance(value, bytes):
        return value.rstrip(b"\0").decode("utf-8", "backslashreplace")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _arrow(table: pa.Table, sink: IO[bytes]) -> None:
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)


def _parquet(table: pa.Table, sink: IO[bytes]) -> None:
    import pyarrow.parquet as pq  # only this format needs pyarrow's Parquet module

    pq.write_table(table, sink)


def _npy(table: pa.Table, sink: IO[bytes]) -> None:
    arr = np.empty(table.num_rows, [(f.name, _npy_dtype(f)) for f in table.schema])
    for name in table.column_names:
        col = table.column(name)
        arr[name] = to_numpy(col) if arr.dtype[name].kind in "iuf" else col.to_numpy()
    npy = io.BytesIO()  # np.save wants a seekable file for a file object it recognises
    np.save(npy, arr)
    sink.write(npy.getbuffer())


def _npy_dtype(field: pa.Field) -> np.dtype[Any]:
    """The numpy dtype of a result column in a .npy: numbers, bool, times (the zone dropped:
    numpy's are UTC), fixed-size bytes; anything else (text of varying length, lists) is a
    UsageError naming the column and the formats that hold it."""
    t = field.type
    if pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return np.dtype(f"{'M8' if pa.types.is_timestamp(t) else 'm8'}[{t.unit}]")
    if pa.types.is_fixed_size_binary(t):
        return np.dtype(f"S{t.byte_width}")
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        dt: np.dtype[Any] = np.dtype(t.to_pandas_dtype())
        return dt
    raise UsageError(
        f"--format npy holds fixed-width values; column {field.name!r} is {t}: "
        "use --format arrow, parquet, csv or json for it, or cast it in the query"
    )


def as_text(batch: pa.RecordBatch | pa.Table, lists: bool) -> pa.RecordBatch | pa.Table:
    """``batch`` (or a Table) with the columns text formats (CSV, JSON) cannot hold as they
    are made text: timestamps as exact ISO 8601 (``2026-01-02T15:00:00.123456789``, ``Z``
    with a zone), dates, times and decimals as their text, durations as integers of their
    unit, bytes as their text up to the zero padding (undecodable bytes escaped, ``\\xff``);
    with ``lists`` (CSV) an array as its JSON list (``[1.0, 2.5, 3.0]``). A null stays a
    null (an empty CSV field, JSON null). Number, bool and string columns are left as they
    are (no copy). The one conversion of `bulkload scan`/`export` (csv, jsonl) and of query
    results (csv, json)."""
    import pyarrow.compute as pc  # only text output converts

    arrays, changed = [], False
    for col in batch.columns:
        t = col.type
        if pa.types.is_timestamp(t):
            col = pc.replace_substring(col.cast(pa.string()), " ", "T", max_replacements=1)
        elif (pa.types.is_temporal(t) and not pa.types.is_duration(t)) or pa.types.is_decimal(t):
            col = col.cast(pa.string())
        elif pa.types.is_duration(t):
            col = col.cast(pa.int64())
        elif pa.types.is_fixed_size_binary(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
            col = pa.array([None if v is None else bytes_text(v) for v in col.to_pylist()], pa.string())
        elif lists and (pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t)):
            col = pa.array([None if v is None else json.dumps(v) for v in col.to_pylist()], pa.string())
        else:
            arrays.append(col)
            continue
        arrays.append(col)
        changed = True
    if not changed:
        return batch
    return type(batch).from_arrays(arrays, names=batch.schema.names)


def bytes_text(value: bytes) -> str:
    """A bytes[N] value as text: up to its zero padding, UTF-8, undecodable bytes escaped."""
    return value.rstrip(b"\0").decode("utf-8", "backslashreplace")


_WRITERS: dict[str, Callable[[pa.Table, Any], None]] = {
    "table": _text,
    "csv": _csv,
    "json": _json,
    "arrow": _arrow,
    "parquet": _parquet,
    "npy": _npy,
}
