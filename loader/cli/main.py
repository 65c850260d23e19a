"""The `bulkload` command: a thin typer layer over the Python API.

It parses options, calls the API, prints a table (or ``--json``), and turns
BulkloadError into a one-line message and the error's exit code:
0 done, 1 failed, 2 usage, 3 dataset busy, 128 + N stopped by signal N (130 SIGINT,
143 SIGTERM, 129 SIGHUP: the run is recorded as interrupted; see interrupts.py).
Command-line parsing errors (OneLineErrors) are one line, exit 2; any other exception is
the last resort of `handle_errors`: one line, exit 1 (the traceback only with
BULKLOAD_DEBUG=1). The BULKLOAD_* variables are checked before any command runs (env.py).
"""

from __future__ import annotations

import copy
import functools
import gc
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException
from typer.main import get_command_name
from typer.models import CommandInfo

from .. import api
from ..errors import EXIT_FAILED, EXIT_USAGE, BulkloadError, Interrupted, OutputError
from ..infra import env, heap, logs
from ..infra.env import flag
from ..infra.interrupts import ignore_stop_signals, stop_on_signals
from ..infra.outputs import guard_stdout, open_output, silence_stdout, stdout_failed
from ..model.runs import Run
from .options import api_command, group_option
from .params import plain_params

if TYPE_CHECKING:
    from ..model.vocab import ProgressMode


class OneLineErrors(TyperGroup):
    """Command-line parsing errors (an unknown option, a value that is not an integer) are
    one line ``bulkload: error: ...; see 'bulkload CMD --help'`` and exit 2 like every other
    usage error, instead of click's usage block."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        plain_params(self)  # start-up: values converted without pydantic (params.py)
        given = {"windows_expand_args": windows_expand_args, **extra}
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **given)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **given)
        except TyperException as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `bulkload`: the help text
                cast(Any, e).show()
                sys.exit(e.exit_code)
            ctx = getattr(e, "ctx", None)
            hint = f"; see '{ctx.command_path} --help'" if ctx is not None else ""
            logs.error_line(f"{e.format_message().rstrip('.')}{hint}", exit_code=e.exit_code)
            sys.exit(e.exit_code)
        except typer.Abort:
            logs.error_line("aborted", exit_code=1)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=OneLineErrors,
    help="Parallel bulk loader for binary records (LMDB / RocksDB, Cap'n Proto / Arrow).",
)


def fail(message: str, code: int) -> None:
    line = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    logs.error_line(line, exit_code=code)
    raise typer.Exit(code)


def handle_errors(fn):
    """Run a command: SIGINT, SIGTERM and SIGHUP stop it cleanly (interrupts.py). Its
    errors become one line on stderr and an exit code: BulkloadError its own, a stop
    signal 128 + its number; anything else (an OSError, a library's error) exit 1, as the
    last resort, with the traceback only when BULKLOAD_DEBUG=1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            with stop_on_signals():
                rv = fn(*args, **kwargs)
                sys.stdout.flush()  # a full or closed stdout is this command's error
                return rv
        except BulkloadError as e:
            if stdout_failed(e):  # what is still buffered for it goes nowhere
                silence_stdout()
            fail(str(e), e.exit_code)
        except KeyboardInterrupt as e:
            interrupted = Interrupted.of(e)
            fail(str(interrupted), interrupted.exit_code)
        except BrokenPipeError:  # the reader went away (| head): quiet, as other tools
            silence_stdout()
            raise typer.Exit(0) from None
        except (typer.Exit, typer.Abort, TyperException):
            raise
        except Exception as e:
            stop = wrapped_stop(e)
            if stop is not None:  # a stop signal that Python's machinery wrapped (an import's __set_name__)
                fail(str(Interrupted.of(stop)), Interrupted.of(stop).exit_code)
            unexpected(e)

    return wrapper


def wrapped_stop(e: BaseException) -> KeyboardInterrupt | None:
    """The stop signal (KeyboardInterrupt) that ``e`` wraps - as its cause or context, as
    Python wraps an error raised inside ``__set_name__`` in a RuntimeError - or None."""
    seen = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def unexpected(e: Exception) -> None:
    """Exit 1 with one line for an error no part of bulkload anticipated."""
    if _debug(flag):
        raise e
    if isinstance(e, OSError) and e.strerror:
        names = [os.fsdecode(f) for f in (e.filename, e.filename2) if f is not None]
        text = f"{' -> '.join(map(str, names))}: {e.strerror}" if names else e.strerror
    else:
        text = f"{type(e).__name__}: {str(e).strip() or 'no details'}"
    fail(f"{text} (unexpected error; BULKLOAD_DEBUG=1 shows the traceback)", EXIT_FAILED)


def _debug(flag) -> bool:
    try:
        return flag("BULKLOAD_DEBUG")
    except BulkloadError:
        return False


def emit_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def on_engine(dataset: str, call) -> tuple:
    """(call()'s report, what ``--json`` says of the engine) - run on the engine chosen by
    --engine / --scheduler (or the variables): api/engine.py."""
    from ..api.engine import engine_for, engine_info  # here: only the runs need it (start-up of the others)

    with engine_for(dataset) as ex:
        return call(), engine_info(ex)


def progress_mode(quiet: bool) -> ProgressMode:
    return "none" if quiet else "auto"


def show_version(value: bool) -> None:
    """``--version``: ``bulkload X.Y.Z`` (the installed package's metadata), exit 0."""
    if value:
        from importlib.metadata import version  # start-up: only for --version

        print(f"bulkload {version('bulkload')}")
        raise typer.Exit(0)


@app.callback()
def main_options(
    log_format: str = typer.Option(
        "text",
        "--log-format",
        help="Log lines on stderr: text or json (before or after the command, like --engine and --scheduler).",
    ),
    engine: str | None = group_option(api.load, "engine"),
    scheduler: str | None = group_option(api.load, "scheduler"),
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=show_version, help="Print bulkload's version and exit."
    ),
):
    if log_format not in ("text", "json"):
        fail(f"--log-format must be text or json, not {log_format!r}", EXIT_USAGE)
    if engine is not None and engine not in env.ENGINES:
        fail(f"--engine must be local or dask, not {engine!r}", EXIT_USAGE)
    if scheduler is not None and not env.scheduler_ok(scheduler):
        fail(f"--scheduler must be a Dask scheduler address: {env.SCHEDULER_FORMS}, not {scheduler!r}", EXIT_USAGE)
    for name, value in (("BULKLOAD_ENGINE", engine), ("BULKLOAD_SCHEDULER", scheduler)):
        if value is not None:  # the runs read them (api/engine.py), as if set in the environment
            os.environ[name] = value
    logs.set_format(log_format)
    handle_errors(check_environment)()


def check_environment() -> None:
    env.check()


@app.command(context_settings={"ignore_unknown_options": True})
@handle_errors
def generate(
    n: str = typer.Argument(..., help="Number of records."),
    start: str = typer.Option("0", "--start", help="Index of the first record."),
    impl: str = typer.Option("c", "--impl", help="c (in-process C library) or python (numpy)."),
    layout: str = typer.Option("scidb96", "--layout", help="Layout name or .toml path."),
    out: str | None = typer.Option(None, "--out", help="Output file (default, or -: stdout)."),
):
    """Write generated raw records START..START+N-1 to stdout or a file."""
    # start-up: the generator's modules (numpy, the C library) load only for `generate`
    from ..model.layouts import get_layout
    from ..sources import parse_count
    from ..sources.generators import write_records

    count = parse_count(n, "N")
    first = parse_count(start, "--start", maximum=2**64 - 1)
    if first + count > 2**64:
        fail("--start + N exceeds 2**64 records", EXIT_USAGE)
    if impl not in ("c", "python"):
        fail(f"--impl must be c or python, not {impl!r}", EXIT_USAGE)
    lay = get_layout(layout)
    with open_output(out or "-") as o:
        binary: Any = o.file  # binary: open_output opens files in "wb" mode
        write_records(lay, first, count, binary, impl=impl)


@app.command("load")
@handle_errors
@api_command(api.load)
def load(
    options: dict,
    json_out: bool = typer.Option(False, "--json", help="Print the run report as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
) -> None:
    """Load records into a dataset (appending to it if it exists).

    Re-running the same command resumes an interrupted run, or loads nothing if it
    finished; --new-run loads the source again; --replace starts the dataset over.
    A stream (stdin, a FIFO) cannot be replayed: each load of it is a new run."""
    source = options["source"]
    if not source:  # `load X`: X is taken for the dataset (click fills the last argument first)
        fail("Missing argument 'dataset'; see 'bulkload load --help'", EXIT_USAGE)
    options["source"] = source if len(source) > 1 else source[0]
    report, used = on_engine(options["dataset"], lambda: api.load(**options, progress=progress_mode(quiet)))
    if json_out:
        emit_json(report.to_dict() | used)
    elif not quiet:
        r = report
        if r.status == "already-loaded":
            print(
                f"0 new records: {r.source} was already loaded into {r.dataset} by run {r.run_id} "
                f"(use --new-run to load it again)"
            )
            return
        how = (
            f"resumed run {r.run_id}: kept {r.resumed_records:,} records, wrote {r.written_records:,}; "
            if r.status == "resumed"
            else f"appended: {r.records:,} new records of {r.source}; "
            if r.status == "appended"
            else ""
        )
        what = "documents" if r.layout == "docs" else "records"
        print(
            f"{how}loaded {r.records:,} {what} ({r.bytes / 1e6:,.1f} MB) into {r.dataset} in {r.seconds:.2f} s: "
            f"{r.mb_per_s:,.0f} MB/s, {r.records_per_s / 1e6:.2f} M {what}/s "
            f"({r.batches} batches, {r.shards} shards, {r.workers} workers, {r.format}, layout {r.layout})"
        )
        for f in r.skipped:
            print(f"  skipped {f['path']}: {f['reason']}")


@app.command("info")
@handle_errors
@api_command(api.info)
def info(options: dict, json_out: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Describe a dataset: layout, format, shards, records, bytes, runs."""
    with api.open(options["dataset"], as_of=options["as_of"]) as ds:
        d = ds.info()
        arrays = ds.arrays() if d.get("arrays") and not d["problems"] else []
    if json_out:
        emit_json(d)
        _exit_if_damaged(d)
        return
    from ..model.layouts import Field  # start-up: only info shows a layout's fields

    fields = ", ".join(Field.from_list(f).describe() for f in d["layout"]["fields"])
    print(f"{d['dataset']}  ({d['path']})")
    print(f"layout   {d['layout']['name']} ({d['record_size']} bytes: {fields})")
    print(f"format   {d['format']} (compression {d['compression']}), store {d['store']}, {d['shards']} shards")
    print(
        f"records  {d['records']:,} in {d['batches']:,} batches; "
        f"{d['record_bytes'] / 1e6:,.1f} MB of records, {d['stored_bytes'] / 1e6:,.1f} MB stored, "
        f"{d['disk_bytes'] / 1e6:,.1f} MB on disk"
    )
    if arrays:
        from .arrays import print_arrays  # cycle: cli.arrays imports this module's helpers

        print_arrays(arrays)
    if d["runs"]:
        total = d.get("runs_total", len(d["runs"]))
        print(
            f"runs (the last {len(d['runs'][-20:])} of {total:,}: bulkload runs lists them all)"
            if total > len(d["runs"][-20:])
            else "runs"
        )
        rows = [
            (
                r.id,
                r.kind,
                r.status,
                f"{r.records or 0:,}",
                "" if r.seconds is None else str(r.seconds),
                r.error or r.source_uri() or "",
            )
            for r in map(Run.from_dict, d["runs"][-20:])
        ]
        print_table(("id", "kind", "status", "records", "seconds", "source / error"), rows)
    _exit_if_damaged(d)


def print_table(header: tuple, rows: list[tuple]) -> None:
    """Columns aligned with two spaces, the last one as long as it is (plain text: rich's
    tables cost ~25 ms of start-up, and cut long sources at the terminal's width)."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join([str(v).ljust(w) for v, w in zip(row, widths)] + [str(row[-1])]).rstrip())


def _exit_if_damaged(d: dict) -> None:
    """`info` of a dataset with missing or damaged shards: one line each, exit 1."""
    from ..stores.health import ShardProblem  # start-up: only a damaged dataset needs it

    for p in d["problems"]:
        logs.error_line(ShardProblem(**p).line(), shard=p.get("shard"))
    if d["problems"]:
        raise typer.Exit(EXIT_FAILED)


@app.command("verify")
@handle_errors
@api_command(api.verify)
def verify(options: dict, json_out: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    """Recompute every stored batch's checksum and count; exit 1 on any mismatch."""
    rep, used = on_engine(options["dataset"], lambda: api.verify(**options))
    if json_out:
        emit_json(rep.to_dict() | used)
    else:
        for p in rep.problems:
            line = (
                p["problem"]
                if p["batch"] is None
                # None: a whole shard (missing, damaged), the arrays
                else (f"shard {p['shard']} batch {p['batch']} (first record {p['first_record']}): {p['problem']}")
            )
            logs.plain(line, line, "error", shard=p.get("shard"), batch=p["batch"])
        status = "ok" if rep.ok else f"FAILED ({len(rep.problems)} bad batches)"
        print(f"verify {rep.dataset}: {rep.batches:,} batches, {rep.records:,} records: {status}")
    if not rep.ok:
        raise typer.Exit(EXIT_FAILED)


def main() -> None:
    # start-up: bulkload calls no BLAS routine; OpenBLAS starts a thread per core when numpy is
    # imported, which costs 10-50 ms of a small load on a busy machine (a value the user set wins)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    heap.own_process()  # this process is bulkload's: it may keep freed heap (infra/heap.py)
    guard_stdout()  # a full stdout is one line naming it, a closed one a quiet end (outputs.py)
    args = options_first(sys.argv[1:])
    try:
        app_for(args)(args=args)
    except Exception as e:
        try:
            if stdout_failed(e):  # --help to a full stdout
                silence_stdout()
                fail(str(e), EXIT_FAILED)
            unexpected(e)
        except typer.Exit as done:
            sys.exit(done.exit_code)
    finally:
        flush_stdout()
        exiting()


def flush_stdout() -> None:
    """What the command printed is written before the exit: a closed stdout (| head) ends
    quietly, a full one (/dev/full, a full disk behind >) is one line and exit 1."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    except OutputError as e:
        silence_stdout()
        print(f"bulkload: error: {e}", file=sys.stderr, flush=True)
        sys.exit(EXIT_FAILED)  # in a finally: replaces the exit under way
    except (OSError, ValueError):
        silence_stdout()


#: the options of `bulkload` itself that take a value; accepted after the command too
GROUP_OPTIONS = ("--log-format", "--engine", "--scheduler")


def options_first(args: list[str]) -> list[str]:
    """``args`` with the group options (`GROUP_OPTIONS`) given after the command moved before
    it (``bulkload run P --log-format json`` = ``bulkload --log-format json run P``); the
    format is set at once, so that even a parsing error is a JSON line when asked for."""
    names = {command_name(c) for c in app.registered_commands}
    names |= {g.name for g in app.registered_groups if g.name}
    i = 0
    while i < len(args) and args[i] not in names:  # the group's own options before the command
        i += 2 if args[i] in GROUP_OPTIONS else 1
    moved, rest, j = [], args[i + 1 :], 0
    while j < len(rest) and rest[j] != "--":
        name = rest[j].split("=", 1)[0]
        if name in GROUP_OPTIONS:
            width = 1 if "=" in rest[j] or j + 1 >= len(rest) else 2
            moved += rest[j : j + width]
            del rest[j : j + width]
        else:
            j += 1
    out = args[:i] + moved + args[i : i + 1] + rest if i < len(args) else args
    for k, a in enumerate(out[: len(out) - len(rest)]):
        if a.split("=", 1)[0] == "--log-format":
            fmt = a.split("=", 1)[1] if "=" in a else (out[k + 1] if k + 1 < len(out) else "")
            if fmt in ("text", "json"):
                logs.set_format(fmt)
    return out


def command_name(c: CommandInfo) -> str:
    """The name a registered command is called by."""
    return c.name or get_command_name(getattr(c.callback, "__name__", ""))


def app_for(args: list[str]) -> typer.Typer:
    """``app`` with only the command that ``args`` begins with (start-up: typer builds every
    command's parameters from its signature before it parses, ~0.5 ms a command), or ``app``
    itself when the first word is no command (--help, a group option, a typo to suggest for)."""
    chosen = [c for c in app.registered_commands if args and command_name(c) == args[0]]
    groups = [g for g in app.registered_groups if args and g.name == args[0]]  # e.g. `runs`
    if not chosen and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = chosen, groups
    return one


def exiting() -> None:
    """Start-up (its other end): the process is about to exit, and the interpreter's last
    garbage collections would walk every object its imports made (numpy, typer, the stages:
    20-40 ms of a small load). Frozen objects are still freed as the modules are torn down,
    but no longer walked for cycles: a cycle that is garbage by now is left to the exit
    (Python promises no finalizer at exit anyway). Everything the command opened is closed
    by then (`with` blocks; the dataset lock is released); atexit handlers run as before.
    The command's outcome is decided: stop signals are ignored from here on (interrupts.py)."""
    ignore_stop_signals()
    gc.freeze()


from . import jobs as cli_jobs

cli_jobs.register(app)


from .bench import register as _rb

_rb(app)


from .scan import register as _register_scan

_register_scan(app)

from .arrays import register as _register_arrays

_register_arrays(app)

from .docs import register as _register_docs

_register_docs(app)

from .runs import register as _register_runs

_register_runs(app)
