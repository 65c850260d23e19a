"""CLI commands that stream a selection of a dataset: ``scan`` (Dataset.scan to a file or
standard output) and ``export`` (the whole dataset, or a selection, in every format).
Nothing but the data goes to standard output with ``--out -``: the status line goes to
stderr (``--quiet``: none). ``register(app)`` adds them to the typer app of cli/main.py."""

from __future__ import annotations

import json
import sys

import typer

from .. import api
from ..infra.outputs import writes_stdout
from .main import handle_errors

COLUMNS = typer.Option(None, "--columns", help="Fields to read, e.g. d0,i1 (default: all).")
RECORDS = typer.Option(None, "--records", help="Half-open record range START:STOP (either side may be empty).")
BOX = typer.Option(None, "--box", help="A box of a finalized array, e.g. 'i0=2:5,i1=0:1000' (with --array).")
ARRAY = typer.Option(None, "--array", help="The finalized 2-D array to read a box of (default grid).")
COMPRESSION = typer.Option(
    None, "--compression", help="arrow: none, lz4, zstd; parquet: none, snappy (default), gzip, brotli, lz4, zstd."
)
ROW_GROUP_ROWS = typer.Option(
    None, "--row-group-rows", help="parquet: rows per row group (default: one row group per stored batch)."
)
QUIET = typer.Option(False, "--quiet", "-q", help="No status line.")
JSON_OUT = typer.Option(False, "--json", help="Print the report as JSON (on stderr when the data goes to stdout).")


def scan_cmd(
    dataset: str = typer.Argument(...),
    columns: str | None = COLUMNS,
    records: str | None = RECORDS,
    box: str | None = BOX,
    array: str | None = ARRAY,
    format: str = typer.Option(..., "--format", help="arrow, parquet, csv, jsonl or npy."),
    out: str = typer.Option(..., "--out", help="Output file; - for stdout (nothing but the data goes there)."),
    compression: str | None = COMPRESSION,
    row_group_rows: int | None = ROW_GROUP_ROWS,
    quiet: bool = QUIET,
    json_out: bool = JSON_OUT,
):
    """Stream the records (or some columns, a record range, a box of an array) to a file."""
    from ..read.export import SCAN_FORMATS

    rep = api.export(
        dataset,
        out,
        format,
        columns=columns,
        records=records,
        box=box,
        array=array,
        compression=compression,
        row_group_rows=row_group_rows,
        formats=SCAN_FORMATS,
    )
    _report(rep, out, quiet, json_out)


def export_cmd(
    dataset: str = typer.Argument(...),
    out: str = typer.Option(..., "--out", help="Output file; - for stdout (the report then goes to stderr)."),
    format: str = typer.Option("arrow", "--format", help="arrow, parquet, csv, jsonl, npy or capnp."),
    columns: str | None = COLUMNS,
    records: str | None = RECORDS,
    compression: str | None = COMPRESSION,
    row_group_rows: int | None = ROW_GROUP_ROWS,
    quiet: bool = QUIET,
    json_out: bool = JSON_OUT,
):
    """Write the flat records, in order, to a file."""
    rep = api.export(
        dataset, out, format, columns=columns, records=records, compression=compression, row_group_rows=row_group_rows
    )
    _report(rep, out, quiet, json_out)


def sql_cmd(
    dataset: str = typer.Argument(...),
    query: str = typer.Argument(
        ..., help='A DuckDB query over the table data, e.g. "SELECT i0, avg(d1) FROM data GROUP BY i0".'
    ),
    format: str = typer.Option("table", "--format", help="table, csv, json, arrow, parquet or npy."),
    out: str | None = typer.Option(None, "--out", help="Write to this file (default: stdout)."),
):
    """Run a DuckDB query over the records (needs duckdb: pip install 'bulkload[duckdb]')."""
    from ..read.dataset import open as open_ds
    from ..read.tables import check_format, write_table

    check_format(format)
    with open_ds(dataset) as ds:
        table = ds.sql(query)
        root = ds.spec.root
    write_table(table, format, out, protect=(root,))


def _report(rep, out: str, quiet: bool, json_out: bool) -> None:
    to = sys.stderr if writes_stdout(out) else sys.stdout  # stdout carries only the data
    if json_out:
        print(json.dumps(rep.to_dict(), indent=2, default=str), file=to)
    elif not quiet:
        print(f"exported {rep.records:,} records to {rep.out} ({rep.format}, {rep.bytes:,} bytes)", file=to)


def register(app: typer.Typer) -> None:
    app.command("scan")(handle_errors(scan_cmd))
    app.command("export")(handle_errors(export_cmd))
    app.command("sql")(handle_errors(sql_cmd))
