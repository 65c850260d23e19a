"""Export the flat records of a dataset, in order, batch by batch (bounded memory).

- ``arrow``: an Arrow IPC file, one record batch per stored batch
- ``parquet``: a Parquet file, one row group per stored batch
- ``npy``: a NumPy .npy file of the layout's structured dtype
- ``capnp``: a Cap'n Proto message stream of ``Batch`` messages (schemas/LAYOUT.capnp),
  readable by any Cap'n Proto reader (e.g. pycapnp's ``Batch.read_multiple``)

The file is written through outputs.open_output: a regular file to a temporary name,
renamed when complete; a FIFO, a device or ``-`` (standard output) as a stream; never
into a dataset (the one exported or any other).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..errors import UsageError
from ..infra.outputs import open_output
from ..serializers import get_serializer
from .dataset import Dataset, records_to_arrow

EXPORT_FORMATS = ("arrow", "parquet", "npy", "capnp")


@dataclass(frozen=True)
class ExportReport:
    dataset: str
    out: str
    format: str
    records: int
    bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


def export(ds: Dataset, out: str, fmt: str) -> ExportReport:
    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}")
    if ds.layout.variable_length and fmt not in ("arrow", "parquet"):
        raise UsageError(f"dataset {ds.uri} holds documents: export them as arrow or parquet (not {fmt})")
    with open_output(out, protect=(ds.spec.root,)) as o:
        _WRITERS[fmt](ds, o.file)
    return ExportReport(dataset=ds.uri, out=out, format=fmt, records=ds.records, bytes=o.nbytes)


def _tables(ds: Dataset):
    """pyarrow Tables of the records in order (documents: in id order, batch by batch)."""
    import pyarrow as pa  # heavy: npy and capnp exports do without it

    schema = ds.layout.arrow_schema
    if not ds.layout.variable_length:
        for _, recs in ds.iter_batches():
            yield records_to_arrow(recs, ds.layout)
        return
    pos = 0
    for b in ds.docs.index.batches:  # by lowest id; a scan covers overlapping batches too
        if b.hi < pos:
            continue
        chunk = ds.scan(max(b.lo, pos), b.hi + 1)
        pos = b.hi + 1
        yield pa.Table.from_batches([chunk.to_arrow()], schema=schema)


def _arrow(ds: Dataset, f) -> None:
    import pyarrow as pa  # heavy: npy and capnp exports do without it

    schema = ds.layout.arrow_schema
    with pa.ipc.new_file(f, schema) as w:
        for t in _tables(ds):
            w.write_table(t)


def _parquet(ds: Dataset, f) -> None:
    import pyarrow.parquet as pq  # heavy: only the parquet export

    schema = ds.layout.arrow_schema
    with pq.ParquetWriter(f, schema) as w:
        for t in _tables(ds):
            w.write_table(t)


def _npy(ds: Dataset, f) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(ds.layout.dtype), "fortran_order": False,
              "shape": (ds.records,)}
    np.lib.format.write_array_header_2_0(f, header)
    for _, recs in ds.iter_batches():
        f.write(memoryview(np.ascontiguousarray(recs).view("u1")))


def _capnp(ds: Dataset, f) -> None:
    if ds.manifest.format == "capnp" and ds.manifest.compression == "none":
        for b in ds.manifest.batches:  # stored values are already standard messages
            f.write(ds._checked_value(b))
        return
    ser = get_serializer("capnp", ds.layout)
    for first, recs in ds.iter_batches():
        f.write(ser.encode(recs, first))


_WRITERS = {"arrow": _arrow, "parquet": _parquet, "npy": _npy, "capnp": _capnp}
