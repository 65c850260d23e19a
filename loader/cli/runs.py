"""CLI: ``bulkload runs DATASET`` (list the run records) and ``bulkload runs prune DATASET``
(forget old ones). ``register(app)`` adds the ``runs`` group to the typer app of main.py.

``runs`` is a group of two commands, ``list`` and ``prune``; a first word that is neither
(a dataset, an option) means ``list``, so ``bulkload runs DATASET`` lists. A dataset is
always SCHEME://PATH, so a dataset at ``./prune`` is ``bulkload runs lmdb://prune``:
never taken for the sub-command (``bulkload runs list DATASET`` spells the listing out).
"""

from __future__ import annotations

import time

import typer
from typer.core import TyperGroup

from .. import api
from .main import emit_json, handle_errors, print_table
from .options import api_command

LIST = "list"


class RunsGroup(TyperGroup):
    """`runs` whose default command is ``list``."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [LIST, *args]
        return super().parse_args(ctx, args)


runs_app = typer.Typer(
    cls=RunsGroup,
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
    help="List a dataset's runs (bulkload runs DATASET) or prune old run records "
    "(bulkload runs prune DATASET --keep N).",
)


def _when(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@runs_app.command(LIST)
@handle_errors
@api_command(api.runs)
def list_cmd(
    options: dict, json_out: bool = typer.Option(False, "--json", help="Print a JSON list of the runs.")
) -> None:
    """The dataset's runs, newest first: id, kind, status, started (UTC), seconds,
    records, the generation `info --as-of` reads it at while its data is kept (as-of), and
    the error (or the source)."""
    found = api.runs(**options)
    if json_out:
        emit_json([r.to_dict() for r in found])
        return
    if not found:
        print("no runs")
        return
    print_table(
        ("id", "kind", "status", "started", "seconds", "records", "as-of", "error / source"),
        [
            (
                r.id,
                r.kind,
                r.status,
                _when(r.started),
                "" if r.seconds is None else str(r.seconds),
                f"{r.records or 0:,}",
                "" if r.as_of is None else str(r.as_of),
                r.error or r.source_uri() or "",
            )
            for r in found
        ],
    )


@runs_app.command("prune")
@handle_errors
@api_command(api.prune_runs)
def prune_cmd(options: dict, json_out: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    """Remove old run records. Never removed: a running run, a resumable interrupted or
    failed run (and a compaction after it), the newest run of each loaded source (a
    re-run of it is recognised by it) and the last --replace run. Records, ingested
    files and readers are not affected."""
    rep = api.prune_runs(**options)
    if json_out:
        emit_json(rep.to_dict())
        return
    verb = "would remove" if rep.dry_run else "removed"
    print(
        f"runs prune {rep.dataset}: {verb} {len(rep.removed)} run record(s), kept {rep.kept}"
        + (f" ({len(rep.protected)} protected)" if rep.protected else "")
    )
    for r in rep.removed:
        print(f"  {verb:<12} {r['id']}  {r['kind']:<8} {r['status']:<11} {_when(r['started'])}")
    for p in rep.protected:
        print(f"  {'kept':<12} {p['id']}  {p['reason']}")


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")
