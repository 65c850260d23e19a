"""`bulkload bench`: the benchmark suite as a command (the work is in the loader/bench package)."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer


def register(app: typer.Typer) -> None:
    from .main import handle_errors  # cycle: main imports this module to register the command

    @app.command()
    @handle_errors
    def bench(
        suite: str = typer.Option(
            "quick",
            "--suite",
            help="quick (<= 2 min), full (<= 15 min on 2 cores) or "
            "catalog (issue 29: metadata cost over 1k..1M batches).",
        ),
        n: int | None = typer.Option(
            None,
            "--n",
            "--records",
            help="Records of the main figures (default: the suite's; quick 1,000,000, full and catalog 20,000,000).",
        ),
        repeats: int | None = typer.Option(None, "--repeats", help="Runs per figure (default 3)."),
        out: str = typer.Option("bench-results", "--out", help="Directory for bench.json, bench.md and the plots."),
        work: str | None = typer.Option(
            None,
            "--work",
            help="Directory for the datasets and files written "
            "(default: inside --out; its filesystem is the one measured).",
        ),
        only: str | None = typer.Option(
            None,
            "--only",
            help="Comma-separated sections (limits, load, scaling, catalog, finalize, peers, rss) or figure ids.",
        ),
        max_batches: int | None = typer.Option(
            None,
            "--max-batches",
            help="catalog: the largest dataset, in batch rows (default 1,000,000; the suite's sizes up to it).",
        ),
        runs_per_commit: int | None = typer.Option(
            None,
            "--runs-per-commit",
            help="catalog: runs the bench helper commits at once (default: at most 100 commits).",
        ),
        baseline: str | None = typer.Option(
            None,
            "--baseline",
            help="catalog: the catalog.json of a run of the code before, the 'before' of the load targets.",
        ),
        before: str | None = typer.Option(
            None,
            "--before",
            help="catalog: the command of the code before's "
            "bulkload (e.g. OTHER/.venv/bin/bulkload): its two big loads run "
            "interleaved with these, the 'before' of the load targets.",
        ),
        label: str | None = typer.Option(None, "--label", help="A label for the run's line in history.jsonl."),
        workloads: str | None = typer.Option(
            None,
            "--workloads",
            help="Records of the load section, comma-separated: scidb96 (always), ticks (default: both).",
        ),
        json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines on stderr."),
    ):
        """Measure throughput against the hardware's limits; write JSON, Markdown and PNG plots."""
        # lazy: only `bulkload bench` needs the suite; every other command starts without it
        from ..bench.plan import SECTIONS, SUITES
        from ..bench.suite import run

        if suite not in SUITES:
            print(f"bulkload: error: unknown suite {suite!r}; use {', '.join(SUITES)}", file=sys.stderr)
            raise typer.Exit(2)
        if (n is not None and n < 1000) or (repeats is not None and repeats < 1):
            print("bulkload: error: --n must be >= 1000 and --repeats >= 1", file=sys.stderr)
            raise typer.Exit(2)
        if (max_batches is not None and max_batches < 2) or (runs_per_commit is not None and runs_per_commit < 1):
            print("bulkload: error: --max-batches must be >= 2 and --runs-per-commit >= 1", file=sys.stderr)
            raise typer.Exit(2)
        sections = None
        ids = None
        if only:
            wanted = {x.strip() for x in only.split(",") if x.strip()}
            sections = tuple(s for s in SECTIONS if s in wanted) or None
            ids = wanted - set(SECTIONS)
            if ids:
                sections = None  # figure ids: run every section, measure only those figures
                ids = wanted
            else:
                ids = None
        if repeats is not None and repeats < 3 and not quiet:
            print("bulkload bench: note: fewer than 3 repeats; min-max ranges mean little", file=sys.stderr)

        def log(msg: str) -> None:
            if not quiet:
                print(msg, file=sys.stderr, flush=True)

        try:
            extra: dict[str, Any] = (
                {"workloads": tuple(w.strip() for w in workloads.split(",") if w.strip())} if workloads else {}
            )
            result = run(
                suite,
                n=n,
                repeats=repeats,
                out=out,
                work=work,
                sections=sections,
                only=ids,
                log=log,
                label=label,
                max_batches=max_batches,
                runs_per_commit=runs_per_commit,
                baseline=baseline,
                before=before,
                **extra,
            )
        except (ValueError, RuntimeError) as e:
            print(f"bulkload: error: {e}", file=sys.stderr)
            raise typer.Exit(2)
        if json_out:
            print(json.dumps(result, indent=1, default=str))
        else:
            for t in result["targets"]:
                if t.get("ratio") is None:
                    print(f"  {t['status']:<13} {t['what']}")
                else:
                    print(
                        f"  {t['status']:<13} {t['ratio']:6.2f} (needs {'<=' if t.get('at_most') else '>='} "
                        f"{t['target']})  {t['what']}"
                    )
            o = result["outputs"]
            print(f"wrote {o['json']}, {o['markdown']}" + (f", {len(o['plots'])} plots" if o["plots"] else ""))
