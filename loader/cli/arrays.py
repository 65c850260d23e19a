"""CLI commands for 2-D arrays: ``finalize``, ``compact``, ``query``.

``register(app)`` adds them to the typer app of cli.py. Thin: parse, call the API,
print a line or ``--json``; errors become one-line messages and exit codes.
"""

from __future__ import annotations

import typer

from .. import api
from ..maintain.report import NOTHING_TO_DO
from ..model.options import size_option
from .main import emit_json, handle_errors, on_engine, progress_mode
from .options import api_command


@api_command(api.finalize)
def finalize_cmd(
    options: dict,
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
) -> None:
    """Compact, then redimension the records into a 2-D chunked array."""
    options["memory_budget"] = size_option(options["memory_budget"], "--memory-budget")
    rep, used = on_engine(options["dataset"], lambda: api.finalize(**options, progress=progress_mode(quiet)))
    if json_out:
        emit_json(rep.to_dict() | used)
    elif not quiet and rep.status == NOTHING_TO_DO:
        print(
            f"nothing to do: array {rep.array!r} of {rep.dataset} is up to date ({rep.records:,} records, "
            f"{rep.cells:,} cells in {rep.chunks:,} chunks; --force rebuilds it anyway)"
        )
    elif not quiet:
        chunks, bounds = _shown(rep.dims, rep.bounds)
        dims_s = ", ".join(f"{name} chunk {chunk}" for name, chunk in chunks)
        extra = f", {rep.dropped:,} duplicates dropped" if rep.dropped else ""
        print(
            f"finalized {rep.records:,} records into array {rep.array!r} of {rep.dataset} "
            f"in {rep.seconds:.2f} s ({rep.mb_per_s:,.0f} MB/s): {rep.cells:,} cells in "
            f"{rep.chunks:,} chunks [{dims_s}; {bounds}], policy {rep.policy}{extra}"
        )


@api_command(api.compact)
def compact_cmd(
    options: dict,
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
) -> None:
    """Merge small batches into large ones and compact every shard store.

    Documents (layout docs): fold each shard's document tables into one (id-sorted)."""
    rep, used = on_engine(options["dataset"], lambda: api.compact(**options, progress=progress_mode(quiet)))
    if json_out:
        emit_json(rep.to_dict() | used)
    elif not quiet and rep.layout == "docs":
        _print_docs_compact(rep.to_dict())
    elif not quiet and rep.status == NOTHING_TO_DO:
        print(
            f"nothing to do: {rep.dataset} has no small batches to merge and its shards are compact "
            f"({rep.batches_before:,} batches, {rep.bytes_before / 1e6:,.1f} MB on disk; --force compacts anyway)"
        )
    elif not quiet:
        print(
            f"compacted {rep.dataset}: {rep.batches_before:,} -> {rep.batches_after:,} batches, "
            f"{rep.bytes_before / 1e6:,.1f} MB -> {rep.bytes_after / 1e6:,.1f} MB on disk "
            f"({rep.shards_compacted} of {len(rep.shards)} shards rewritten) in {rep.seconds:.2f} s"
        )


def _print_docs_compact(rep: dict) -> None:
    if rep["status"] == "nothing-to-do":
        print(
            f"nothing to do: {rep['dataset']} holds one document table per shard "
            f"({rep['records']:,} documents in {rep['batches_before']:,} batches; --force rewrites anyway)"
        )
        return
    folded = sum(1 for s in rep["shards"] if s["status"] == "folded")
    print(
        f"compacted {rep['dataset']}: folded {rep['documents_rewritten']:,} documents "
        f"({rep['text_bytes_rewritten'] / 1e6:,.1f} MB of text, {rep['mb_per_s']:,.0f} MB/s) of {folded} of "
        f"{len(rep['shards'])} shards into one table each: tables per shard {rep['tables_before']} -> "
        f"{rep['tables_after']}, {rep['batches_before']:,} -> {rep['batches_after']:,} batches, "
        f"{rep['bytes_before'] / 1e6:,.1f} MB -> {rep['bytes_after'] / 1e6:,.1f} MB on disk "
        f"in {rep['seconds']:.2f} s"
    )


@api_command(api.query)
def query_cmd(options: dict, json_out: bool = typer.Option(False, "--json", help="Same as --format json.")) -> None:
    """Read the cells of a box of a 2-D array."""
    from ..read.tables import check_format  # start-up: pyarrow loads only for `query`

    fmt = "json" if json_out else options["format"]
    check_format(fmt, options["format"])
    api.query(**(options | {"format": fmt}))


def print_arrays(arrays: list[dict]) -> None:
    """Lines for `bulkload info`: one per array."""
    for a in arrays:
        chunks, bounds = _shown(a["dims"], a["bounds"])
        dims = " x ".join(f"{name}/{chunk}" for name, chunk in chunks)
        stale = "  STALE (records appended since; re-run finalize)" if a["stale"] else ""
        print(
            f"array    {a['name']}: [{dims}] {a['cells']:,} cells in {a['chunks']:,} chunks, "
            f"{bounds}, duplicates {a['policy']}{stale}"
        )


def _shown(dims: list[dict], bounds: dict | None) -> tuple[list[tuple[str, str]], str]:
    """(dim, chunk) pairs and the bounds of an array as a user writes them: a time dimension's
    chunk as a duration (1h), its bounds as instants; integers as they are."""
    from ..model.times import describe_coordinate  # start-up: only these lines need it

    types = {d["name"]: d.get("type", "") for d in dims}
    chunks = [(d["name"], describe_coordinate(types[d["name"]], d["chunk"], duration=True)) for d in dims]
    text = ", ".join(
        f"{k} {describe_coordinate(types.get(k, ''), lo)}..{describe_coordinate(types.get(k, ''), hi)}"
        for k, (lo, hi) in (bounds or {}).items()
    )
    return chunks, text or "empty"


def register(app: typer.Typer) -> None:
    app.command("finalize")(handle_errors(finalize_cmd))
    app.command("compact")(handle_errors(compact_cmd))
    app.command("query")(handle_errors(query_cmd))
