"""CLI commands for scheduled jobs: ``ingest`` (a directory, exactly once per file) and
``run`` (a pipeline file). ``register(app)`` adds them to the typer app of cli.py."""

from __future__ import annotations

import typer

from .. import api
from .main import emit_json, handle_errors, on_engine, progress_mode
from .options import api_command


@api_command(api.ingest)
def ingest_cmd(
    options: dict,
    json_out: bool = typer.Option(False, "--json", help="Print the run report as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
) -> None:
    """Load each new file of a directory exactly once, in name order (for cron / timers).

    Documents (layout docs): loads the <id>.json files whose id is not stored yet; a file
    whose id is stored is already ingested if its content is the stored document, else a
    bad file (documents are immutable).
    """
    rep, used = on_engine(options["dataset"], lambda: api.ingest(**options, progress=progress_mode(quiet)))
    if json_out:
        emit_json(rep.to_dict() | used)
        return
    if quiet:
        return
    if rep.layout == "docs":
        _print_docs(rep)
        return
    if rep.status == "nothing-to-do" and not rep.skipped and not rep.deferred:
        print(f"nothing new in {rep.directory} ({rep.already} file(s) already ingested into {rep.dataset})")
        return
    print(
        f"ingested {len(rep.files)} file(s), {rep.records:,} records of layout {rep.layout} "
        f"({rep.bytes / 1e6:,.1f} MB) into {rep.dataset}"
        + (f" (run {rep.run_id})" if rep.run_id else "")
        + f"; {rep.already} already ingested, {len(rep.skipped)} skipped, {len(rep.deferred)} left for later"
    )
    for s in rep.skipped:
        print(f"  skipped {s['name']}: {s['reason']}")
    for d in rep.deferred:
        print(f"  later   {d['name']}: {d['reason']}")


def _print_docs(rep) -> None:
    if rep.status == "nothing-to-do":
        print(
            f"nothing new in {rep.directory} ({rep.already} already ingested into {rep.dataset})"
            + (f"; {len(rep.skipped)} bad file(s) skipped" if rep.skipped else "")
        )
    else:
        print(
            f"ingested {len(rep.files):,} document(s) ({rep.bytes / 1e6:,.1f} MB of text) into {rep.dataset} "
            f"(run {rep.run_id}); {rep.already:,} already ingested, {len(rep.skipped)} skipped"
        )
    for s in rep.skipped:
        print(f"  skipped {s['name']}: {s['reason']}")


@api_command(api.run)
def run_cmd(
    options: dict,
    json_out: bool = typer.Option(False, "--json", help="Print the report of every step as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
) -> None:
    """Run a declarative job: load or ingest, then compact / finalize / query."""
    rep = api.run(**(options | {"sets": options["sets"] or []}), progress=progress_mode(quiet))
    if options["check"] and not json_out:
        print(f"pipeline {options['path']}: ok ({' -> '.join(s['step'] for s in rep.steps)} on {rep.dataset})")
    elif json_out:
        emit_json(rep.to_dict())
    elif not quiet:
        steps = ", ".join(f"{s['step']} {s['seconds']:.2f} s" for s in rep.steps)
        print(f"pipeline {rep.pipeline} done on {rep.dataset} in {rep.seconds:.2f} s ({steps})")


def register(app: typer.Typer) -> None:
    app.command("ingest")(handle_errors(ingest_cmd))
    app.command("run")(handle_errors(run_cmd))
