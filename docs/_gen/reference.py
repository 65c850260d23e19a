"""The generated reference pages of the documentation site, from the code itself.

Each function returns one page's Markdown text; docs/_gen/gen_pages.py writes them into the
site at build time (mkdocs-gen-files), so they are never committed and cannot go stale:

* `cli_page`: every command of the typer app (walked as the click tree typer builds), with
  its help, usage, arguments and options (help and default);
* `api_page`: mkdocstrings directives for the public functions of ``loader``, the Dataset
  reader and the reports they return;
* `errors_page`: the exit codes, every error class of loader/errors.py (exit code, cause,
  fix) and every message of its ``MESSAGES`` table (message, cause, fix);
* `pipeline_page`: the sections and keys of api/pipeline.py's ``SCHEMA`` (type, default).

tests/site/test_reference.py checks that every command, option, public name and error
class is on its page, so a new one cannot go undocumented.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

#: the reports the public functions return, and the reader's classes (mkdocstrings paths)
REPORTS = (
    "loader.loading.report.LoadReport",
    "loader.loading.ingest.IngestReport",
    "loader.arrays.report.FinalizeReport",
    "loader.maintain.report.CompactReport",
    "loader.read.verifying.VerifyReport",
    "loader.read.export.ExportReport",
    "loader.maintain.run_prune.PruneReport",
    "loader.api.pipeline.PipelineReport",
)
READER = "loader.read.dataset.Dataset"


def plain(text: str) -> str:
    """Plain text (a command's or an option's help) as Markdown that shows it as written:
    ``<id>`` is not an HTML tag, ``*`` and ``_`` no emphasis, ``[x]`` no link."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_\[\]])", r"\\\1", text)


def cell(text: object) -> str:
    """``text`` as one cell of a Markdown table: one line, pipes escaped - but not inside a
    code span, where Python-Markdown's tables keep them (and would show the backslash)."""
    parts = re.split(r"(?<!\\)`", " ".join(str(text).split()))
    return "`".join(part if i % 2 else part.replace("|", "\\|") for i, part in enumerate(parts))


# --- the command line -------------------------------------------------------------------


def cli_commands() -> list[tuple[str, Any]]:
    """(path, command) of `bulkload` and of each of its commands and sub-commands, depth first."""
    import typer.main

    from loader.cli.main import app

    out: list[tuple[str, Any]] = []

    def walk(command: Any, path: str) -> None:
        out.append((path, command))
        for name, sub in getattr(command, "commands", {}).items():
            if not getattr(sub, "hidden", False):
                walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "bulkload")
    return out


def _default(param: Any) -> str:
    if getattr(param, "is_flag", False) or param.required:
        return ""
    default = param.default
    if default is None or callable(default) or default == ():
        return ""
    return f"`{default}`"


def _usage(path: str, command: Any) -> str:
    pieces = [path]
    if any(p.param_type_name == "option" for p in command.params):
        pieces.append("[OPTIONS]")
    for p in command.params:
        if p.param_type_name == "argument":
            name = p.name.upper() + ("..." if p.nargs == -1 else "")
            pieces.append(name if p.required else f"[{name}]")
    if getattr(command, "commands", None):
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def cli_page() -> str:
    lines = [
        "# Command line",
        "",
        "Generated from the `bulkload` command itself (its typer app) when the site is built:",
        "every command with its arguments and options. `bulkload COMMAND --help` prints the same.",
        "Exit codes and error messages: [Errors and exit codes](errors.md).",
        "",
    ]
    for path, command in cli_commands():
        lines += [f"## `{path}`", ""]
        help_text = inspect.cleandoc(command.help or "").replace("\b\n", "")
        if help_text:
            lines += [plain(help_text), ""]
        lines += ["```text", _usage(path, command), "```", ""]
        params = [p for p in command.params if not getattr(p, "hidden", False)]
        if params:
            lines += ["| argument / option | default | meaning |", "|---|---|---|"]
            for p in params:
                if p.param_type_name == "argument":
                    name = f"`{p.name.upper()}`" + (" (required)" if p.required else "")
                else:
                    name = " / ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
                    if p.required:
                        name += " (required)"
                    if getattr(p, "multiple", False):
                        name += " (repeatable)"
                lines.append(f"| {name} | {cell(_default(p))} | {cell(plain(p.help or ''))} |")
            lines.append("")
        subs = [name for name in getattr(command, "commands", {})]
        if subs:
            links = (f"[`{path} {name}`](#{path.replace(' ', '-')}-{name})" for name in subs)
            lines += ["Commands: " + ", ".join(links) + ".", ""]
    return "\n".join(lines)


# --- the Python API ---------------------------------------------------------------------


def public_functions() -> dict[str, str]:
    """loader's public name -> the dotted path mkdocstrings documents it at."""
    import loader
    from loader.api import public  # the real functions behind loader's lazy names

    return {
        name: f"loader.api.public.{name}" if name in public.__all__ else f"loader.{name}"
        for name in loader.__all__
        if not name.startswith("_")
    }


def keyword_table(path: str) -> list[str]:
    """The keywords of a public function as the one declaration gives them (model/optspec.py):
    each one's command-line option, pipeline key, default and help."""
    import importlib
    import inspect as ins

    from loader.model.optspec import options_of

    module, _, attr = path.rpartition(".")
    try:
        options = options_of(getattr(importlib.import_module(module), attr))
    except (TypeError, ValueError):  # not declared with Opt (e.g. loader.generator)
        return []
    rows = ["| keyword | command line | pipeline key | default | help |", "|---|---|---|---|---|"]
    for o in options.values():
        cli = "argument" if o.opt.argument else (f"`{o.flag}`" if o.flag else "-")
        key = f"`[{o.opt.section or attr}] {o.key}`" if o.key else "-"
        default = "required" if o.default is ins.Parameter.empty else f"`{o.default!r}`"
        rows.append(f"| `{o.name}` | {cli} | {key} | {default} | {cell(plain(o.opt.help))} |")
    return [*rows, ""]


def api_page() -> str:
    lines = [
        "# Python API",
        "",
        "Generated from the docstrings when the site is built. Every command of `bulkload` is a",
        "function of `loader` taking the command's options as keywords (`--batch-records` ->",
        "`batch_records`) and returning a typed report whose `to_dict()` is what the command's",
        "`--json` prints; errors are the exceptions of [`loader.errors`](errors.md).",
        "",
        "```text",
        "import loader",
        "```",
        "",
        "## Functions",
        "",
    ]
    for name, path in sorted(public_functions().items()):
        lines += [
            f"::: {path}",
            "    options:",
            f'      heading: "loader.{name}"',
            "      show_root_toc_entry: true",
            "",
            *keyword_table(path),
        ]
    lines += ["## Reading a dataset", "", f"::: {READER}", "", "## Reports", ""]
    for path in REPORTS:
        lines += [f"::: {path}", ""]
    return "\n".join(lines)


# --- errors -----------------------------------------------------------------------------


def error_classes() -> list[type]:
    """Every exception class of loader/errors.py, in the order of the file."""
    from loader import errors

    return [
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    ]


def undocumented(classes: list[type]) -> list[str]:
    """The classes without their own cause (docstring) or their own ``fix``."""
    return [
        c.__name__
        for c in classes
        if not (c.__dict__.get("__doc__") or "").strip() or not str(c.__dict__.get("fix", "")).strip()
    ]


def exit_code_of(cls: type) -> str:
    code = cls.__dict__.get("exit_code", None)
    if isinstance(code, property) or isinstance(getattr(cls, "exit_code", None), property):
        return "128 + N"
    return str(getattr(cls, "exit_code", ""))


def errors_page() -> str:
    from loader import errors

    lines = [
        "# Errors and exit codes",
        "",
        "Generated from `loader/errors.py` when the site is built.",
        "",
        inspect.cleandoc(errors.CLI_CONTRACT),
        "",
        "## Exit codes",
        "",
        "| code | meaning |",
        "|---|---|",
    ]
    lines += [f"| {cell(code)} | {cell(meaning)} |" for code, meaning in errors.EXIT_CODES]
    lines += [""]
    groups: dict[str, list[Any]] = {}
    for m in errors.MESSAGES:
        groups.setdefault(m.group, []).append(m)
    lines += [
        "## Messages",
        "",
        "What each message says, why it happens and what to do (`UPPER` words stand for the values it names).",
        "",
    ]
    for group, rows in groups.items():
        lines += [f"### {group}", "", "| message | error (exit) | cause | fix |", "|---|---|---|---|"]
        for m in rows:
            if m.error is None:
                who = f"(exit {m.exit_code})"
            else:
                who = f"[`{m.error.__name__}`](#{m.error.__name__.lower()}) ({exit_code_of(m.error)})"
            lines.append(f"| {cell(m.message)} | {who} | {cell(m.cause)} | {cell(m.fix)} |")
        lines.append("")
    lines += [
        "## Error classes",
        "",
        "Each subclasses the matching builtin, so Python callers can catch it naturally.",
        "",
    ]
    for cls in error_classes():
        bases = ", ".join(f"`{b.__name__}`" for b in cls.__bases__)
        lines += [f"### {cls.__name__}", "", f"Exit code **{exit_code_of(cls)}**; subclass of {bases}.", ""]
        doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
        lines += [f"**Cause:** {doc}", ""]
        lines += [f"**Fix:** {inspect.cleandoc(str(getattr(cls, 'fix', '')))}", ""]
        count = sum(1 for m in errors.MESSAGES if m.error is cls)
        if count:
            lines += [f"Messages: {count} in the tables above.", ""]
    return "\n".join(lines)


# --- pipeline files ---------------------------------------------------------------------


def pipeline_page() -> str:
    from loader.api import pipeline

    lines = [
        "# Pipeline files",
        "",
        "Generated from `loader/api/pipeline.py` (its `SCHEMA`) when the site is built.",
        "`bulkload run FILE.toml` runs one; `bulkload run --check FILE.toml` checks it without running.",
        "",
        "```text",
        inspect.cleandoc(pipeline.__doc__ or ""),
        "```",
        "",
    ]
    for section, keys in pipeline.SCHEMA.items():
        lines += [f"## `[{section}]`", "", "| key | type | default | help |", "|---|---|---|---|"]
        for key, k in keys.items():
            typ, default = k.type, k.default
            if default is pipeline.REQUIRED:
                shown = "**required**"
            elif default is None:
                shown = "(the command's default)"
            else:
                shown = f"`{str(default).lower() if isinstance(default, bool) else default}`"
            kind = pipeline.TYPE_NAMES.get(typ, typ.__name__)
            lines.append(f"| `{key}` | {kind} | {shown} | {cell(plain(k.help or ''))} |")
        lines.append("")
    return "\n".join(lines)


PAGES = {
    "reference/cli.md": cli_page,
    "reference/api.md": api_page,
    "reference/errors.md": errors_page,
    "reference/pipeline.md": pipeline_page,
}
