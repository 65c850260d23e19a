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
from .options import api_command

QUIET = typer.Option(False, "--quiet", "-q", help="No status line.")
JSON_OUT = typer.Option(False, "--json", help="Print the report as JSON (on stderr when the data goes to stdout).")


@api_command(
    api.export,
    override={
        "format": {"default": ..., "help": "arrow, parquet, csv, jsonl or npy.", "show_default": True},
        "out": {"help": "Output file; - for stdout (nothing but the data goes there)."},
    },
)
def scan_cmd(options: dict, quiet: bool = QUIET, json_out: bool = JSON_OUT) -> None:
    """Stream the records (or some columns, a record range, a box of an array) to a file."""
    from ..read.export import SCAN_FORMATS

    rep = api.export(**options, formats=SCAN_FORMATS)
    _report(rep, options["out"], quiet, json_out)


@api_command(api.export, skip=("box", "array"))
def export_cmd(options: dict, quiet: bool = QUIET, json_out: bool = JSON_OUT) -> None:
    """Write the flat records, in order, to a file."""
    rep = api.export(**options)
    _report(rep, options["out"], quiet, json_out)


def sql_cmd(
    dataset: str = typer.Argument(...),
    query: str = typer.Argument(
        ..., help='A DuckDB query over the table data, e.g. "SELECT i0, avg(d1) FROM data GROUP BY i0".'
    ),
    format: str = typer.Option("table", "--format", help="table, csv, json, arrow, parquet or npy."),
    out: str | None = typer.Option(None, "--out", help="Write to this file (default: stdout)."),
    stats: bool = typer.Option(
        False, "--stats", help="Then print the stored bytes and batches the query read, on stderr."
    ),
) -> None:
    """Run a DuckDB query over the records (needs duckdb: pip install 'bulkload[duckdb]')."""
    from ..read.dataset import open as open_ds
    from ..read.tables import check_format, write_table

    check_format(format)
    with open_ds(dataset) as ds:
        table = ds.sql(query)
        root, read, stored = ds.spec.root, ds.read_stats, ds.manifest.stored_bytes
    write_table(table, format, out, protect=(root,))
    if stats:
        n = read.batches
        print(f"read {read.bytes:,} of {stored:,} stored bytes ({n:,} batch{'' if n == 1 else 'es'})", file=sys.stderr)


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
