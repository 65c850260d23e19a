"""typer commands made from the public API's signatures (model/optspec.py's ``Opt``).

``@api_command(api.load)`` over a function ``present(options, json_out=..., quiet=...)``
makes the typer command: its parameters are the API function's keywords that are on the
command line - as typer Arguments and Options with the flag, short flag, default and help
their ``Opt`` declares - followed by ``present``'s own (presentation: ``--json``,
``--quiet``). typer calls it with every value; ``present`` gets the API's keywords as one
dict (``options``: negated flags turned back, ``--no-compact`` -> ``compact=False``) and
its own as keywords. So a CLI option cannot differ from its API keyword in name, default
or help (tests/api/test_options_agree.py).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import typer

from ..model.optspec import SAME, Option, options_of


def cli_type(o: Option) -> Any:
    """The value type typer converts the option's text to (cli/params.py: str, int, bool, list)."""
    if o.opt.cli_type is not None:
        return o.opt.cli_type
    plain = o.value_type()
    if plain is bool:
        return bool
    return plain | None if o.cli_default is None else plain


def typer_param(o: Option, **override: Any) -> Any:
    """The typer Argument or Option of ``o`` (``override``: of typer's keywords, e.g. help)."""
    kw: dict[str, Any] = {"help": o.opt.help or None, "show_default": o.opt.show_default} | override
    default = (
        kw.pop("default") if "default" in kw else ... if o.required and o.opt.cli_default is SAME else o.cli_default
    )
    if o.opt.argument:
        return typer.Argument(default, **kw)
    flag = o.flag
    assert flag is not None, o.name
    decls = [flag] if o.opt.short is None else [flag, o.opt.short]
    return typer.Option(default, *decls, **kw)


def group_option(api_fn: Callable[..., Any], name: str) -> Any:
    """An option of ``bulkload`` itself that the API declares (``--engine``, ``--scheduler``)."""
    return typer_param(options_of(api_fn)[name])


def api_command(
    api_fn: Callable[..., Any], *, skip: Iterable[str] = (), override: dict[str, dict[str, Any]] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The decorator that makes ``present`` a typer command over ``api_fn``'s options (module
    docstring); ``skip``: API keywords not on this command; ``override``: name -> typer
    keywords of an option that this command shows otherwise (``bulkload scan``'s --format)."""
    skipped = set(skip)
    options = [o for o in options_of(api_fn).values() if o.on_cli and o.name not in skipped]
    changes = override or {}

    def decorate(present: Callable[..., Any]) -> Callable[..., Any]:
        own = list(inspect.signature(present).parameters.values())[1:]  # after `options`
        params = [
            inspect.Parameter(
                o.cli_name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=typer_param(o, **changes.get(o.name, {})),
                annotation=cli_type(o),
            )
            for o in options
        ]
        hints = inspect.get_annotations(present, eval_str=True)
        params += [p.replace(annotation=hints.get(p.name, p.annotation)) for p in own]

        @functools.wraps(present)
        def command(**values: Any) -> Any:
            given = {}
            for o in options:
                value = values.pop(o.cli_name)
                given[o.name] = (not value) if o.opt.negated else value
            return present(given, **values)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate
