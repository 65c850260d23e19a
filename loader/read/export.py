"""Export the flat records of a dataset (or a selection: columns, a record range, a box
of an array), in order, batch by batch from `Dataset.scan` (bounded memory).

- ``arrow``: an Arrow IPC file, one record batch per stored batch (``compression`` lz4 or
  zstd: compressed buffers)
- ``parquet``: a Parquet file, row groups of ``row_group_rows`` rows (default: one per
  stored batch), ``compression`` none, snappy (default), gzip, brotli, lz4 or zstd
- ``csv``: a header line, then one line per record (pyarrow's CSV writer)
- ``jsonl``: one JSON object per record and line
- ``npy``: a NumPy .npy file of the selected fields' structured dtype
- ``capnp``: a Cap'n Proto message stream of ``Batch`` messages (schemas/LAYOUT.capnp),
  readable by any Cap'n Proto reader (e.g. pycapnp's ``Batch.read_multiple``); the whole
  dataset only

The file is written through outputs.open_output: a regular file to a temporary name,
renamed when complete; a FIFO, a device or ``-`` (standard output) as a stream; never
into a dataset (the one exported or any other). Nothing but the data goes to it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from ..errors import UsageError
from ..infra.outputs import open_output, refuse_dataset_paths
from ..serializers import get_serializer
from ..stores.health import check_value
from .dataset import Dataset

if TYPE_CHECKING:
    import pyarrow as pa

    from ..model import manifest as mf
    from ..model.layouts import Layout
    from .scan import Box, Columns, RecordRange

EXPORT_FORMATS = ("arrow", "parquet", "npy", "capnp", "csv", "jsonl")
SCAN_FORMATS = ("arrow", "parquet", "csv", "jsonl", "npy")
TEXT_FORMATS = ("csv", "jsonl")
#: the --compression each format takes (None: none)
COMPRESSIONS = {"arrow": ("none", "lz4", "zstd"), "parquet": ("none", "snappy", "gzip", "brotli", "lz4", "zstd")}


@dataclass(frozen=True)
class ExportReport:
    dataset: str
    out: str
    format: str
    records: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Selection:
    """What a scan or export reads (see `Dataset.scan`); all None: every record."""

    columns: Columns | None = None
    records: RecordRange | None = None
    box: Box | None = None
    array: str | None = None

    @property
    def whole(self) -> bool:
        return all(v is None for v in (self.columns, self.records, self.box, self.array))


def check_options(
    fmt: str,
    formats: Sequence[str] = EXPORT_FORMATS,
    compression: str | None = None,
    row_group_rows: int | None = None,
) -> None:
    """UsageError for an unknown format, or a --compression / --row-group-rows it does not take."""
    if fmt not in formats:
        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(formats)}")
    if compression is not None and compression not in COMPRESSIONS.get(fmt, ()):
        takes = COMPRESSIONS.get(fmt)
        raise UsageError(
            f"--compression {compression} is not one of format {fmt}'s: "
            + (", ".join(takes) if takes else "it takes none")
        )
    if row_group_rows is not None and (fmt != "parquet" or row_group_rows < 1):
        raise UsageError("--row-group-rows takes a positive number of rows, for --format parquet only")


def export(
    ds: Dataset,
    out: str,
    fmt: str,
    sel: Selection | None = None,
    *,
    compression: str | None = None,
    row_group_rows: int | None = None,
    formats: Sequence[str] = EXPORT_FORMATS,
) -> ExportReport:
    sel = sel or Selection()
    check_options(fmt, formats, compression, row_group_rows)
    if ds.layout.variable_length and fmt not in ("arrow", "parquet"):
        raise UsageError(f"dataset {ds.uri} holds documents: export them as arrow or parquet (not {fmt})")
    if ds.layout.variable_length and not sel.whole:
        raise UsageError(f"dataset {ds.uri} holds documents: columns, records and boxes select fixed-size records")
    if fmt == "capnp" and not sel.whole:
        raise UsageError(
            "--format capnp exports the whole dataset; use arrow, parquet, csv, jsonl or npy for a selection"
        )
    refuse_dataset_paths(out, (ds.spec.root,))  # before reading: fail fast
    reader = (
        None if ds.layout.variable_length or fmt == "capnp" else ds.scan(sel.columns, sel.records, sel.box, sel.array)
    )
    rows = [0]
    with open_output(out, text=fmt in TEXT_FORMATS, protect=(ds.spec.root,)) as o:
        if reader is None:
            _WHOLE[fmt](ds, o.file, compression, row_group_rows)
            rows[0] = ds.records
        else:
            args = (_counted(reader, rows), reader.schema, o.file, compression, row_group_rows)
            _WRITERS[fmt](*args, known_rows(ds, sel), ds.layout) if fmt == "npy" else _WRITERS[fmt](*args)
    return ExportReport(dataset=ds.uri, out=out, format=fmt, records=rows[0], bytes=o.nbytes)


def known_rows(ds: Dataset, sel: Selection) -> int | None:
    """The record count of a selection known before reading it (None for a box)."""
    from .scan import parse_records

    if sel.box is not None or sel.array is not None:
        return None
    rng = parse_records(sel.records) or (0, None)
    return (ds.records if rng[1] is None else rng[1]) - rng[0]


def _counted(reader: Iterable[pa.RecordBatch], rows: list[int]) -> Iterator[pa.RecordBatch]:
    for b in reader:
        rows[0] += b.num_rows
        yield b


def _doc_tables(ds: Dataset) -> Iterator[pa.Table]:
    """pyarrow Tables of the documents, in id order, batch by batch."""
    import pyarrow as pa  # heavy: npy and capnp exports do without it

    schema = ds.layout.arrow_schema
    pos = 0
    for b in ds.docs.index.batches:  # by lowest id; a scan covers overlapping batches too
        lo, hi = b.lo, b.hi  # a keyed batch's ids: never None
        if lo is None or hi is None or hi < pos:
            continue
        chunk = ds.scan(ids=(max(lo, pos), hi + 1))
        pos = hi + 1
        yield pa.Table.from_batches([chunk.to_arrow()], schema=schema)


def _arrow(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, f: IO[bytes], compression: str | None, _rows: int | None
) -> None:
    import pyarrow as pa  # heavy: npy and capnp exports do without it

    opts = pa.ipc.IpcWriteOptions(compression=None if compression in (None, "none") else compression)
    with pa.ipc.new_file(f, schema, options=opts) as w:
        for b in batches:
            w.write(b)


def _parquet(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    f: IO[bytes],
    compression: str | None,
    row_group_rows: int | None,
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq  # heavy: only the parquet export

    with pq.ParquetWriter(f, schema, compression=compression or "snappy") as w:
        if row_group_rows is None:
            for b in batches:
                w.write(b)
            return
        held, n = [], 0
        for b in batches:
            held.append(b)
            n += b.num_rows
            if n >= row_group_rows:
                t = pa.Table.from_batches(held, schema)
                full = n - n % row_group_rows
                w.write_table(t.slice(0, full), row_group_size=row_group_rows)
                held, n = ([t.slice(full).combine_chunks().to_batches()[0]], n - full) if n > full else ([], 0)
        if n:
            w.write_table(pa.Table.from_batches(held, schema), row_group_size=row_group_rows)


def _csv(batches: Iterable[pa.RecordBatch], schema: pa.Schema, f: IO[str], _c: str | None, _r: int | None) -> None:
    import pyarrow as pa
    import pyarrow.csv as pcsv  # only this format needs pyarrow's CSV module

    from .tables import as_text  # with pyarrow: only text formats convert

    header = True
    for b in batches:
        buf = pa.BufferOutputStream()
        pcsv.write_csv(as_text(b, lists=True), buf, pcsv.WriteOptions(include_header=header))
        header = False
        f.write(buf.getvalue().to_pybytes().decode())
    if header:  # no records: the header alone
        buf = pa.BufferOutputStream()
        pcsv.write_csv(as_text(schema.empty_table(), lists=True), buf)
        f.write(buf.getvalue().to_pybytes().decode())


def _jsonl(batches: Iterable[pa.RecordBatch], _schema: pa.Schema, f: IO[str], _c: str | None, _r: int | None) -> None:
    from .tables import as_text  # with pyarrow: only text formats convert

    for b in batches:
        f.write("".join(json.dumps(r) + "\n" for r in as_text(b, lists=False).to_pylist()))


def _npy(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    f: IO[bytes],
    _c: str | None,
    _r: int | None,
    n: int | None = None,
    layout: Layout | None = None,
) -> None:
    """The records of the selected fields in the layout's dtype (a nullable field's nulls
    in a trailing ``_validity``, bit j for the j-th nullable field selected: a whole-dataset
    export is `read_records`' bytes); a box's dimension columns as their numbers. ``n``: the
    record count when known before reading (a record range); else (a box) the batches are
    held until it is, as the header names it."""
    from ..model.arrow_numpy import to_numpy  # with pyarrow: only Arrow input converts
    from ..model.arrow_records import set_validity
    from ..model.conversions import field_values
    from ..model.layouts import TYPES, VALIDITY, Field, Layout

    given = {} if layout is None else {fld.name: fld for fld in layout.fields}
    sub = Layout(
        getattr(layout, "name", "export"),
        tuple(given.get(fld.name) or Field(fld.name, np.dtype(fld.type.to_pandas_dtype()).name) for fld in schema),
    )
    dtype = sub.dtype
    held = batches if n is not None else list(batches)
    n = sum(b.num_rows for b in held) if n is None else n
    np.lib.format.write_array_header_2_0(
        f, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n,)}
    )
    for b in held:
        recs = np.empty(b.num_rows, dtype)
        if sub.validity_bytes:
            recs[VALIDITY] = 0
        for fld, col in zip(sub.fields, b.columns):
            if fld.type in TYPES and not fld.nullable:
                recs[fld.name] = to_numpy(col)
                continue
            recs[fld.name], valid = field_values(col, fld, "export")
            if fld.nullable:
                set_validity(recs, sub, fld.name, valid)
        f.write(recs.view(np.uint8).data)


class _StoredValues:
    """The checked stored values of whole batches (`read_batches`' decoder for ``--format
    capnp`` of an uncompressed capnp dataset: they are already standard messages)."""

    zero_copy = False  # the value is the result: a copy of it, not a view of the map
    output_bytes = 0  # a stream

    def __init__(self, ds: Dataset) -> None:
        self.ds = ds
        self.row_bytes = ds.layout.record_size  # (checked: an xxh3 of the value a batch)

    def alloc(self, b: mf.BatchEntry, threaded: bool) -> None:
        return None

    def whole(self, b: mf.BatchEntry, value: bytes, out: None) -> bytes:
        check_value(self.ds.uri, b, value)
        return value

    def part(self, b: mf.BatchEntry, lo: int, hi: int) -> bytes:
        raise AssertionError("an export reads whole batches")  # pragma: no cover - (0, records)


def _capnp(ds: Dataset, f: IO[bytes], _c: str | None, _r: int | None) -> None:
    from .scan import read_batches

    if ds.manifest.format == "capnp" and ds.manifest.compression == "none":
        for v in read_batches(ds, 0, ds.records, _StoredValues(ds)):
            f.write(v)
        return
    ser = get_serializer("capnp", ds.layout)
    for first, recs in ds.iter_batches():
        f.write(ser.encode(recs, first))


def _docs(fmt: str) -> _WholeWriter:
    def write(ds: Dataset, f: IO[Any], compression: str | None, row_group_rows: int | None) -> None:
        _WRITERS[fmt](
            (b for t in _doc_tables(ds) for b in t.to_batches()), ds.layout.arrow_schema, f, compression, row_group_rows
        )

    return write


#: a writer of scanned batches: (batches, schema, file, compression, row_group_rows)
_BatchWriter = Callable[..., None]
#: a writer of a whole dataset: (dataset, file, compression, row_group_rows)
_WholeWriter = Callable[[Dataset, IO[Any], str | None, int | None], None]

_WRITERS: dict[str, _BatchWriter] = {"arrow": _arrow, "parquet": _parquet, "csv": _csv, "jsonl": _jsonl, "npy": _npy}
#: formats written from the dataset itself (documents; capnp)
_WHOLE: dict[str, _WholeWriter] = {
    "arrow": _docs("arrow"),
    "parquet": _docs("parquet"),
    "capnp": _capnp,
}
