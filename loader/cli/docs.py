"""CLI commands for documents (layout ``docs``): ``get``. ``register(app)`` adds them to
the typer app of cli.py."""

from __future__ import annotations

import json
import sys

import typer

from ..errors import EXIT_FAILED, UsageError
from ..infra import logs
from .main import emit_json, handle_errors


def get_cmd(
    dataset: str = typer.Argument(..., help="A dataset of layout docs: lmdb://PATH, rocksdb://PATH or mem://NAME."),
    ids: list[str] = typer.Argument(..., help="Document ids."),
    json_out: bool = typer.Option(False, "--json", help="Print the documents as JSON (a list of objects)."),
    format: str = typer.Option(
        "tsv",
        "--format",
        help="tsv (id, created_at, text; tab, newline, carriage "
        "return and backslash escaped as \\t \\n \\r \\\\) or jsonl (one object a line).",
    ),
):
    """Print documents by id; exit 1 if any id is not found ("id N not found")."""
    from ..docs.access import check_id  # start-up: the documents plug-in loads only for `get`
    from ..read.dataset import open as open_ds

    if format not in ("tsv", "jsonl"):
        raise UsageError(f"--format {format!r} is unknown; use tsv or jsonl")
    wanted = [check_id(i) for i in ids]
    with open_ds(dataset) as ds:
        found, missing = ds.get_many(wanted)
    by_id = {i: (c, t) for i, c, t in found.records()}
    if json_out:
        out = [{"id": i, "created_at": by_id[i][0], "text": by_id[i][1].decode("utf-8")} for i in wanted if i in by_id]
        emit_json(out if len(wanted) > 1 or not out else out[0])
    elif format == "jsonl":
        for i in wanted:
            if i in by_id:
                c, t = by_id[i]
                sys.stdout.write(json.dumps({"id": i, "created_at": c, "text": t.decode("utf-8")}) + "\n")
    else:
        for i in wanted:
            if i in by_id:
                c, t = by_id[i]
                sys.stdout.write(f"{i}\t{c}\t{tsv_field(t.decode('utf-8'))}\n")
    for i in missing:
        logs.error_line(f"id {i} not found", id=i)
    if missing:
        raise typer.Exit(EXIT_FAILED)


_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def tsv_field(text: str) -> str:
    r"""``text`` as one TSV field: backslash, tab, newline and carriage return escaped
    (``\\``, ``\t``, ``\n``, ``\r``: the escapes of PostgreSQL's and MySQL's text format)."""
    return text.translate(_TSV_ESCAPES)


def register(app: typer.Typer) -> None:
    app.command("get")(handle_errors(get_cmd))
