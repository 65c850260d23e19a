"""The commands that read a dataset, as Python functions: verify, export, query, info, runs.

Each opens the dataset (a snapshot: see read/dataset.py), does one job and returns a typed
report (or, for `query`, the cells as a pyarrow Table). The CLI's ``verify``, ``export``,
``query`` and ``info`` print exactly these.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..arrays import query as array_query
from ..infra import executors
from ..infra.outputs import refuse_dataset_paths
from ..model.optspec import DEFAULT_ARRAY
from ..model.run_retention import RunFilter
from ..model.runs import Run
from ..read.dataset import open as open_dataset
from ..read.export import EXPORT_FORMATS, ExportReport, Selection
from ..read.export import export as export_records
from ..read.tables import check_format, write_table
from ..read.verifying import VerifyReport

if TYPE_CHECKING:
    import pyarrow as pa


def verify(dataset: str) -> VerifyReport:
    """Recompute every stored batch's checksum and count (and the arrays' chunk indexes);
    ``report.ok`` is False and ``report.problems`` lists each damage. In this process on
    the local engine; one task per shard on another (Dask: api/verify_tasks.py)."""
    if not executors.current().local:
        from .verify_tasks import verify_on_executor  # only off the local engine

        return verify_on_executor(dataset)
    with open_dataset(dataset) as ds:
        report: VerifyReport = ds.verify()
    return report


def export(
    dataset: str,
    out: str,
    format: str = "arrow",
    *,
    columns: str | Sequence[str] | None = None,
    records: str | tuple[int | None, int | None] | None = None,
    box: str | dict[str, tuple[int, int]] | None = None,
    array: str | None = None,
    compression: str | None = None,
    row_group_rows: int | None = None,
    formats: Sequence[str] | None = None,
) -> ExportReport:
    """Write the records (or the ``columns`` of ``records`` / of a ``box`` of ``array``: see
    `Dataset.scan`), in order, to ``out`` as arrow, parquet, csv, jsonl, npy or capnp."""
    with open_dataset(dataset) as ds:
        return export_records(
            ds,
            out,
            format,
            Selection(columns, records, box, array),
            compression=compression,
            row_group_rows=row_group_rows,
            formats=EXPORT_FORMATS if formats is None else formats,
        )


def query(
    dataset: str,
    box: str | dict[str, tuple[int, int]],
    *,
    array: str = DEFAULT_ARRAY,
    attrs: str | None = None,
    format: str | None = None,
    out: str | None = None,
) -> pa.Table:
    """The cells of a half-open box of a 2-D array (``"i0=2:5,i1=0:1000"`` or
    ``{"i0": (2, 5), ...}``) as a pyarrow Table; with ``format``, also written to ``out``
    (standard output when ``out`` is None) as `bulkload query` writes it."""
    if format is not None:
        check_format(format)
    ranges = array_query.parse_box(box) if isinstance(box, str) else dict(box)
    with open_dataset(dataset) as ds:
        if format is not None and out is not None:
            refuse_dataset_paths(out, (ds.spec.root,))  # before reading: fail fast
        table = ds.read_box(array=array, attrs=attrs, **ranges)
        root = ds.spec.root
    if format is not None:
        write_table(table, format, out, protect=(root,))
    return table


def info(dataset: str, as_of: int | str | None = None) -> dict[str, Any]:
    """What `bulkload info --json` prints: layout, format, shards, records, bytes, runs,
    arrays, problems (missing or damaged shards); ``as_of`` (a generation or a run id):
    of the dataset as it stood after that commit (`loader.open`'s ``as_of``)."""
    with open_dataset(dataset, as_of=as_of) as ds:
        described: dict[str, Any] = ds.info()
    return described


def runs(
    dataset: str,
    status: str | None = None,
    kind: str | None = None,
    since: str | float | datetime.datetime | None = None,
    limit: int | None = None,
) -> list[Run]:
    """The dataset's run records, newest first, as `info` shows them (a dead job's
    ``running`` run ``interrupted``, the runs before the last --replace ``replaced``):
    those of ``status`` and ``kind``, started at or after ``since`` (``"30d"``, ``"12h"``,
    an ISO-8601 instant, a datetime or epoch seconds), at most ``limit``. Each is a `Run`
    (``to_dict()``: what ``bulkload runs --json`` prints). Bad values: UsageError."""
    chosen = RunFilter.of(status, kind, since, limit)  # before the dataset is opened
    from ..model.catalog_history import readable_runs

    with open_dataset(dataset) as ds:
        found = chosen.select(ds.runs_seen())
        readable = readable_runs(ds.manifest)
    for r in found:
        r.as_of = readable.get(r.id)
    return found
