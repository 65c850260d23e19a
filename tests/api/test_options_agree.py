"""One options schema per command (issue 32): the CLI's options, the API's keywords and the
pipeline's keys agree in names, defaults and help, because the first and the last are made
from the second (the ``Opt`` records of api/public.py's signatures).

Each check is a function that lists the disagreements; each is also run on a deliberately
altered copy (a help text, a default, a flag changed on one side), where it must find one.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import subprocess
import sys
import typing

import pytest
from typer.main import get_command

import loader
from loader import api
from loader.api import public
from loader.api.pipeline import AROUND_STEPS, ENABLED, JOB_OWN, REQUIRED, SCHEMA, STEP_FUNCTIONS, Key
from loader.cli.main import app
from loader.model.optspec import SAME, Opt, options_of

#: CLI command path -> (API function, API keywords the command leaves out)
COMMANDS = {
    ("load",): (public.load, ()),
    ("ingest",): (public.ingest, ()),
    ("finalize",): (public.finalize, ()),
    ("compact",): (public.compact, ()),
    ("verify",): (public.verify, ()),
    ("export",): (public.export, ("box", "array")),
    ("query",): (public.query, ()),
    ("info",): (public.info, ()),
    ("runs", "list"): (public.runs, ()),
    ("runs", "prune"): (public.prune_runs, ()),
    ("run",): (public.run, ()),
}
#: the CLI's own parameters: how a command shows its result
PRESENTATION = {"json_out", "quiet"}


def cli_command(path: tuple[str, ...]):
    cmd = get_command(app)
    for word in path:
        cmd = cmd.commands[word]  # type: ignore[attr-defined]
    return cmd


def cli_disagreements(cmd, fn, skip=()) -> list[str]:
    """How the command's parameters differ from what ``fn``'s keywords declare."""
    found = []
    params = {p.name: p for p in cmd.params}
    declared = {o.cli_name: o for o in options_of(fn).values() if o.on_cli and o.name not in skip}
    for name in params:
        if name not in declared and name not in PRESENTATION:
            found.append(f"{cmd.name}: {name} is no keyword of {fn.__name__}")
    for name, o in declared.items():
        p = params.get(name)
        if p is None:
            found.append(f"{cmd.name}: keyword {o.name} is not on the command line")
            continue
        got_help, want_help = getattr(p, "help", None), o.opt.help or None
        if got_help != want_help:
            found.append(f"{cmd.name} {name}: help {got_help!r} != {want_help!r}")
        if o.required and o.opt.cli_default is SAME:
            if not p.required:
                found.append(f"{cmd.name} {name}: optional, but {fn.__name__} requires it")
        elif p.required or p.default != o.cli_default:
            found.append(f"{cmd.name} {name}: default {p.default!r} != {o.cli_default!r}")
        if p.param_type_name == "option":
            want = [o.flag] + ([o.opt.short] if o.opt.short else [])
            if sorted(p.opts + p.secondary_opts) != sorted(want):
                found.append(f"{cmd.name} {name}: flags {p.opts} != {want}")
        elif not o.opt.argument:
            found.append(f"{cmd.name} {name}: an argument, but declared an option")
    return found


def pipeline_disagreements(schema: dict[str, dict[str, Key]], functions=STEP_FUNCTIONS) -> list[str]:
    """How the pipeline's keys differ from what the steps' keywords declare."""
    found = []
    made: dict[str, set[str]] = {section: set() for section in schema}
    for step, fn in functions.items():
        for o in options_of(fn).values():
            if o.key is None:
                continue
            section = "job" if o.opt.section == "job" else step
            key = schema[section].get(o.key)
            made[section].add(o.key)
            if key is None:
                found.append(f"{fn.__name__}({o.name}): no key {o.key!r} in [{section}]")
                continue
            default = REQUIRED if o.required else o.key_default
            if key.default is not default and key.default != default:
                found.append(f"[{section}] {o.key}: default {key.default!r} != {default!r} of {fn.__name__}")
            if key.type is not o.value_type():
                found.append(f"[{section}] {o.key}: type {key.type} != {o.value_type()} of {fn.__name__}")
            if section != "job" and key.help != o.opt.help:
                found.append(f"[{section}] {o.key}: help {key.help!r} != {o.opt.help!r}")
            if key.keyword != o.name:
                found.append(f"[{section}] {o.key}: sets {key.keyword!r}, not {o.name!r}")
    for section, keys in schema.items():
        own = set(JOB_OWN) if section == "job" else {"enabled"}
        for k in set(keys) - made[section] - own:
            found.append(f"[{section}] {k}: no step's keyword")
    return found


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_each_command_line_option_is_its_api_keyword(path):
    fn, skip = COMMANDS[path]
    assert cli_disagreements(cli_command(path), fn, skip) == []


def test_scan_differs_from_export_only_where_it_says_so():
    """`bulkload scan` is export's view of a stream: a required --format of fewer formats,
    and its own --out help (cli/scan.py's override) - nothing else."""
    assert cli_disagreements(cli_command(("scan",)), public.export) == [
        "scan out: help 'Output file; - for stdout (nothing but the data goes there).' != "
        "'Output file; - for stdout (the report then goes to stderr).'",
        "scan format: help 'arrow, parquet, csv, jsonl or npy.' != 'arrow, parquet, csv, jsonl, npy or capnp.'",
        "scan format: default None != 'arrow'",
    ]


def test_each_pipeline_key_is_a_step_keyword():
    assert pipeline_disagreements(SCHEMA) == []
    assert set(SCHEMA) == {"job", *STEP_FUNCTIONS}
    assert all(SCHEMA[s]["enabled"] is ENABLED for s in STEP_FUNCTIONS)


def test_the_steps_agree_on_the_job_keys_they_share():
    """[job] layout, workers, ...: each function that takes one has its type and default."""
    for step, fn in STEP_FUNCTIONS.items():
        for o in options_of(fn).values():
            if o.opt.section == "job" and o.key is not None:
                key = SCHEMA["job"][o.key]
                assert (key.type, key.default) == (o.value_type(), REQUIRED if o.required else o.key_default), (
                    step,
                    o.name,
                )
    assert set(AROUND_STEPS) <= set(SCHEMA["job"])


def test_the_engine_options_of_bulkload_are_the_api_keywords():
    group = get_command(app)
    for name in ("engine", "scheduler"):
        p = next(p for p in group.params if p.name == name)
        o = options_of(public.load)[name]
        assert (p.opts, p.help, p.default) == ([o.flag], o.opt.help, o.default)


def test_a_changed_side_is_found():
    """Each check finds a difference put in on purpose: a help, a default, a flag, a key."""
    cmd = copy.deepcopy(cli_command(("load",)))
    next(p for p in cmd.params if p.name == "batch_records").help = "Records per batch."
    help_text = next(o for o in options_of(public.load).values() if o.name == "batch_records").opt.help
    assert cli_disagreements(cmd, public.load) == [f"load batch_records: help 'Records per batch.' != {help_text!r}"]
    cmd = copy.deepcopy(cli_command(("finalize",)))
    next(p for p in cmd.params if p.name == "array").default = "cube"
    assert cli_disagreements(cmd, public.finalize) == ["finalize array: default 'cube' != 'grid'"]
    cmd = copy.deepcopy(cli_command(("ingest",)))
    next(p for p in cmd.params if p.name == "from_dir").opts = ["--from-dir"]
    assert cli_disagreements(cmd, public.ingest) == ["ingest from_dir: flags ['--from-dir'] != ['--from']"]

    schema = {section: dict(keys) for section, keys in SCHEMA.items()}
    schema["finalize"]["duplicates"] = schema["finalize"]["duplicates"]._replace(default="first")
    schema["query"]["attrs"] = schema["query"]["attrs"]._replace(help="Columns.")
    del schema["ingest"]["pattern"]
    schema["compact"]["speed"] = Key(int, 1, "", "speed")
    assert sorted(pipeline_disagreements(schema)) == sorted(
        [
            "[finalize] duplicates: default 'first' != 'error' of finalize",
            "[query] attrs: help 'Columns.' != 'Attributes to return, e.g. d0,d3 (default: all).'",
            "ingest(pattern): no key 'pattern' in [ingest]",
            "[compact] speed: no step's keyword",
        ]
    )

    # an API function whose declaration changed: the CLI and the pipeline made before differ from it
    @functools.wraps(public.compact)
    def compact(*a, **kw):  # pragma: no cover - never called
        raise AssertionError

    sig = inspect.signature(public.compact)
    force = sig.parameters["force"]
    typ, opt = typing.get_args(force.annotation)
    changed = force.replace(annotation=typing.Annotated[typ, dataclasses.replace(opt, help="Always.")], default=True)
    compact.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[changed if p.name == "force" else p for p in sig.parameters.values()]
    )
    assert cli_disagreements(cli_command(("compact",)), compact) == [
        "compact force: help 'Compact every shard even if it looks compact.' != 'Always.'",
        "compact force: default False != True",
    ]
    assert pipeline_disagreements(SCHEMA, STEP_FUNCTIONS | {"compact": compact}) == [
        "[compact] force: default False != True of compact",
        "[compact] force: help 'Compact every shard even if it looks compact.' != 'Always.'",
    ]


def test_every_keyword_of_every_public_command_declares_an_opt():
    for name, fn in public.COMMANDS.items():
        assert getattr(api, name) is fn is getattr(loader, name)
        options = options_of(fn)  # raises for a keyword without Opt
        assert list(options) == list(inspect.signature(fn).parameters)
        for o in options.values():
            assert isinstance(o.opt, Opt)
            assert o.opt.help or o.name == "dataset", f"{name}({o.name}): no help"


def test_the_public_names_are_real_functions_with_their_keywords():
    """`loader.load` is a function whose signature shows every keyword (engine, keep_runs):
    nothing added by a wrapper; `import loader` imports nothing else."""
    for name in loader.__all__:
        if name != "__version__":
            fn = getattr(loader, name)
            assert inspect.isfunction(fn) and fn.__module__ == "loader.api.public" and not hasattr(fn, "__wrapped__")
    for name in ("load", "ingest"):
        assert {"keep_runs", "client", "engine", "scheduler"} <= set(
            inspect.signature(getattr(loader, name)).parameters
        )
    for name in ("finalize", "compact", "verify", "run"):
        assert {"client", "engine", "scheduler"} <= set(inspect.signature(getattr(loader, name)).parameters)
    code = "import sys, loader; print(sorted(m for m in sys.modules if m.startswith('loader') or m == 'typing'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['loader']"
