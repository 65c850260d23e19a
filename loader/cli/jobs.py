"""CLI commands for scheduled jobs: ``ingest`` (a directory, exactly once per file) and
``run`` (a pipeline file). ``register(app)`` adds them to the typer app of cli.py."""

from __future__ import annotations

import typer

from .. import api
from .main import emit_json, handle_errors, on_engine, progress_mode


def ingest_cmd(
    dataset: str = typer.Argument(..., help="lmdb://PATH, rocksdb://PATH or mem://NAME (with ?shards=K)."),
    from_dir: str = typer.Option(
        ..., "--from", help="Directory of files of raw records, or of <id>.json documents (layout docs)."
    ),
    pattern: str = typer.Option(
        "*",
        "--pattern",
        help="Shell pattern of the file names, e.g. '*.bin' (not for documents: every <id>.json is read).",
    ),
    on_bad_file: str = typer.Option(
        "fail", "--on-bad-file", help="fail (exit 1 naming the file) or skip (report it, load the rest)."
    ),
    layout: str | None = typer.Option(
        None,
        "--layout",
        help="Layout of the records (default: the dataset's or scidb96); docs for a directory of <id>.json documents.",
    ),
    format: str | None = typer.Option(
        None, "--format", help="capnp (default) or arrow; documents: block (default), raw or capnp."
    ),
    compression: str | None = typer.Option(None, "--compression", help="none, lz4 or zstd (arrow)."),
    shards: int | None = typer.Option(None, "--shards", help="Shard count (default: cores)."),
    workers: int | None = typer.Option(None, "--workers", help="Worker processes (default: cores)."),
    batch_records: int | None = typer.Option(None, "--batch-records", help="Records per batch (default 10000)."),
    keep_runs: int | None = typer.Option(
        None,
        "--keep-runs",
        help="After the ingest succeeded, prune the "
        "run records to the N newest (and the protected ones: bulkload runs prune).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the run report as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
):
    """Load each new file of a directory exactly once, in name order (for cron / timers).

    Documents (layout docs): loads the <id>.json files whose id is not stored yet; a file
    whose id is stored is already ingested if its content is the stored document, else a
    bad file (documents are immutable).
    """
    rep, used = on_engine(
        dataset,
        lambda: api.ingest(
            dataset,
            from_dir,
            pattern=pattern,
            on_bad_file=on_bad_file,
            layout=layout,
            format=format,
            compression=compression,
            shards=shards,
            workers=workers,
            batch_records=batch_records,
            progress=progress_mode(quiet),
            keep_runs=keep_runs,
        ),
    )
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


def run_cmd(
    pipeline: str = typer.Argument(..., help="A pipeline file, e.g. pipelines/scidb.toml."),
    set_: list[str] | None = typer.Option(None, "--set", help="Override a key: section.key=value (repeatable)."),
    json_out: bool = typer.Option(False, "--json", help="Print the report of every step as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
    check: bool = typer.Option(False, "--check", help="Check every value of every step; run nothing."),
):
    """Run a declarative job: load or ingest, then compact / finalize / query."""
    rep = api.run(pipeline, set_ or [], progress=progress_mode(quiet), check=check)
    if check and not json_out:
        print(f"pipeline {pipeline}: ok ({' -> '.join(s['step'] for s in rep.steps)} on {rep.dataset})")
    elif json_out:
        emit_json(rep.to_dict())
    elif not quiet:
        steps = ", ".join(f"{s['step']} {s['seconds']:.2f} s" for s in rep.steps)
        print(f"pipeline {rep.pipeline} done on {rep.dataset} in {rep.seconds:.2f} s ({steps})")


def register(app: typer.Typer) -> None:
    app.command("ingest")(handle_errors(ingest_cmd))
    app.command("run")(handle_errors(run_cmd))
