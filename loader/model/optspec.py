"""One declaration of a command's options: `Opt` records in the public API's signatures.

Each keyword of a public function (loader/api/public.py) is annotated
``Annotated[T, Opt(help=...)]``; from those signatures come the command line's options
(loader/cli/options.py makes typer options of them), the pipeline file's keys
(loader/api/pipeline.py's SCHEMA) and the API reference - with one default and one help
text each, so that the three cannot drift. `options_of(fn)` reads them back.

- ``flag``: the command-line option (``""``: ``--name-with-dashes``; ``None``: not on the
  command line, e.g. ``client``; a positional argument: ``Opt(argument=True)``;
  ``group``: an option of ``bulkload`` itself, e.g. ``--engine``).
- ``key``: the pipeline key (``""``: the keyword's name; ``None``: not in a pipeline);
  ``section="job"``: a key of ``[job]``, shared by every step, rather than of the step's
  own table; ``inherit``: an unset step key takes the ``[job]`` key of the same name.
- ``cli_default`` / ``key_default``: where a surface's default differs on purpose (the
  CLI's ``query --format`` prints a ``table`` by default; the API returns the cells).

Pure data: no typer, nothing imported beyond the standard library.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import Any

#: the name of the array finalize builds and query reads when none is given
DEFAULT_ARRAY = "grid"
#: the dims finalize uses when none are given, per built-in layout (by name and fields)
DEFAULT_DIMS = {"scidb96": "i0:10,i1:100000"}


class _Same:
    """The default of every surface is the API's."""

    def __repr__(self) -> str:
        return "SAME"


SAME: Any = _Same()


@dataclass(frozen=True)
class Opt:
    """How one keyword of a public function appears on each surface (module docstring)."""

    help: str = ""
    flag: str | None = ""
    short: str | None = None
    argument: bool = False
    key: str | None = ""
    section: str | None = None
    inherit: bool = False
    cli_default: Any = SAME
    key_default: Any = SAME
    cli_name: str | None = None  # the command line's parameter name, when not the keyword's
    cli_type: Any = None  # the command line's value type, when not the keyword's
    show_default: bool = True
    negated: bool = False  # a flag that sets the keyword to False (--no-compact: compact=False)
    group: bool = False  # an option of `bulkload` itself (--engine), not of each command


@dataclass(frozen=True)
class Option:
    """One keyword of a public function: its name, annotated type, default and Opt."""

    name: str
    type: Any
    default: Any  # inspect.Parameter.empty: required
    opt: Opt

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty

    @property
    def flag(self) -> str | None:
        """The command-line option (``--batch-records``), None when not on the command line."""
        if self.opt.flag is None or self.opt.argument:
            return None
        return self.opt.flag or "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str | None:
        """The pipeline key, None when not in a pipeline."""
        return None if self.opt.key is None else self.opt.key or self.name

    @property
    def on_cli(self) -> bool:
        """An argument or option of its command (not --engine: an option of ``bulkload`` itself)."""
        return self.opt.argument or (self.flag is not None and not self.opt.group)

    @property
    def cli_name(self) -> str:
        """The command line's parameter name (``no_compact`` for ``--no-compact``)."""
        return self.opt.cli_name or ("no_" + self.name if self.opt.negated else self.name)

    @property
    def cli_default(self) -> Any:
        if self.opt.cli_default is not SAME:
            return self.opt.cli_default
        if self.opt.negated:
            return False
        return self.default

    @property
    def key_default(self) -> Any:
        return self.default if self.opt.key_default is SAME else self.opt.key_default

    def value_type(self) -> type:
        """The plain type of a value (str, int, float, bool): ``str`` when it may be a string."""
        args = [a for a in (typing.get_args(self.type) or (self.type,)) if a is not type(None)]
        for plain in (bool, str, float, int):
            if plain in args:
                return float if plain is int and float in args else plain
        return str


def options_of(fn: Any) -> dict[str, Option]:
    """The keywords of ``fn`` (its signature's ``Annotated[T, Opt(...)]``), in order."""
    out: dict[str, Option] = {}
    for p in inspect.signature(fn).parameters.values():
        ann = p.annotation
        if typing.get_origin(ann) is not typing.Annotated:
            raise TypeError(f"{fn.__qualname__}: keyword {p.name!r} has no Opt (Annotated[T, Opt(...)])")
        typ, *extras = typing.get_args(ann)
        opt = next((e for e in extras if isinstance(e, Opt)), None)
        if opt is None:
            raise TypeError(f"{fn.__qualname__}: keyword {p.name!r} has no Opt")
        out[p.name] = Option(p.name, typ, p.default, opt)
    return out
