"""Command-line values converted without pydantic (start-up time).

typer (>= 0.2x) converts every parameter's value through a pydantic ``TypeAdapter`` it
builds on first use: importing pydantic and building the adapters of one command cost
~0.1 s, more than the rest of `bulkload info`. bulkload's parameters are plain: ``str``,
``int``, ``bool`` (flags), ``Optional`` of those and lists of ``str``. `plain_params(group)` gives
each of those a converter of typer's own kind (a ``typer._coercion.RuntimeParam``, the
object typer would otherwise build lazily) that converts with ``str`` / ``int`` / click's flag words; any other
annotation keeps typer's. A bad number is the usual one-line usage error (exit 2):
``Invalid value for '--shards': 'x' is not a valid integer``.

This reaches into typer's internals (``_TyperParameter._runtime_param``); a typer without
them (older: click's own types, no pydantic; or changed) is left as it is - still correct,
only slower to start - and tests/cli/test_startup_imports.py, which asserts that `info`
does not import pydantic, says so.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

_FLAG_WORDS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _flag(value) -> bool:
    """A flag's value: a bool, or one of the words click takes for one."""
    return value if isinstance(value, bool) else _FLAG_WORDS[str(value).strip().lower()]


_PLAIN: dict[Any, Callable[[Any], Any]] = {str: str, int: int, bool: _flag}
_NAMES = {str: "string", int: "integer", bool: "boolean"}


def _plain_type(annotation):
    """``str`` / ``int`` / ``bool`` (also inside Optional[...]), ``list`` for a list of str, else None."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is typing.Union and len(args) == 1:
        return _plain_type(args[0])
    if origin is list and args == [str]:
        return list
    return annotation if annotation in _PLAIN else None


def plain_params(group) -> None:
    """Give every plain parameter of ``group`` and of its commands a converter without pydantic."""
    try:
        from typer._click import Context
        from typer._click.exceptions import BadParameter
        from typer._coercion import RuntimeParam
    except ImportError:  # a typer that converts with click's types: nothing to do
        return

    class Plain(RuntimeParam):
        def _coerce_value(self, value, param, ctx):
            kind = _plain_type(self.annotation)
            if kind is list:
                return [str(v) for v in value]
            try:
                return _PLAIN[kind](value)
            except (TypeError, ValueError, KeyError):
                raise BadParameter(f"{value!r} is not a valid {_NAMES[kind]}", ctx=ctx, param=param) from None

    for command in [group, *getattr(group, "commands", {}).values()]:
        helps = [command.get_help_option(Context(command))]  # made (and kept) by the command on first use
        for param in [*command.params, *filter(None, helps)]:
            descriptor = getattr(param, "type_descriptor", None)
            if descriptor is None or getattr(param, "_runtime_param", False) is not None:
                continue
            if descriptor.file_annotation is None and _plain_type(descriptor.annotation) is not None:
                param._runtime_param = Plain(descriptor.parameter_info, descriptor.annotation)
