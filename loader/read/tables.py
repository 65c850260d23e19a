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


def write_table(table, fmt: str, out: str | None, protect: tuple[str, ...] = ()) -> None:
    """``out`` None or ``-``: standard output; ``protect``: the dataset read (never written)."""
    check_format(fmt)
    binary = fmt in BINARY_FORMATS
    with open_output(out or "-", text=not binary, protect=protect) as o:
        _write(table, fmt, o.file)


def _write(table, fmt: str, sink) -> None:
    _WRITERS[fmt](table, sink)
    sink.flush()


def _text(table, sink) -> None:
    cols = table.column_names
    cells = [[_cell(v) for v in table.column(c).to_pylist()] for c in cols]
    widths = [max([len(c)] + [len(v) for v in col]) for c, col in zip(cols, cells)]
    sink.write("  ".join(c.rjust(w) for c, w in zip(cols, widths)) + "\n")
    for i in range(table.num_rows):
        sink.write("  ".join(col[i].rjust(w) for col, w in zip(cells, widths)) + "\n")
    sink.write(f"({table.num_rows:,} cells)\n")


def _cell(v) -> str:
    if isinstance(v, bytes):  # bytes[N]: the text up to its zero padding, as JSON shows it
        return _json_bytes(v)
    return repr(v) if isinstance(v, float) else str(v)


def _csv(table, sink) -> None:
    import pyarrow.csv as pcsv  # only this format needs pyarrow's CSV module

    buf = pa.BufferOutputStream()
    pcsv.write_csv(table, buf)
    sink.write(buf.getvalue().to_pybytes().decode())


def _json(table, sink) -> None:
    json.dump(_json_ready(table).to_pylist(), sink, default=_json_bytes)
    sink.write("\n")


def _json_ready(table):
    """``table`` with its timestamp columns as exact ISO-8601 text (``2026-01-02T15:00:00.123456789``,
    ``Z`` with a zone) and durations as their integer counts: JSON has neither."""
    cols = []
    for f, col in zip(table.schema, table.columns):
        if pa.types.is_timestamp(f.type):
            import pyarrow.compute as pc  # only a table with times needs it

            col = pc.replace_substring(col.cast(pa.string()), " ", "T")
        elif pa.types.is_duration(f.type):
            col = col.cast(pa.int64())
        cols.append(col)
    return pa.Table.from_arrays(cols, names=table.column_names)


def _json_bytes(value):
    """A bytes[N] value in JSON: its text up to the zero padding (undecodable bytes escaped)."""
    if isinstance(value, bytes):
        return value.rstrip(b"\0").decode("utf-8", "backslashreplace")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _arrow(table, sink) -> None:
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)


def _parquet(table, sink) -> None:
    import pyarrow.parquet as pq  # only this format needs pyarrow's Parquet module

    pq.write_table(table, sink)


def _npy(table, sink) -> None:
    arr = np.empty(table.num_rows, [(f.name, f.type.to_pandas_dtype()) for f in table.schema])
    for name in table.column_names:
        arr[name] = to_numpy(table.column(name))
    npy = io.BytesIO()  # np.save wants a seekable file for a file object it recognises
    np.save(npy, arr)
    sink.write(npy.getbuffer())


_WRITERS = {"table": _text, "csv": _csv, "json": _json, "arrow": _arrow, "parquet": _parquet, "npy": _npy}
