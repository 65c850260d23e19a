"""What a 2-D array is: its name, two dimension fields with chunk lengths, a duplicates
policy, and the layout of its cells.

``make_spec(layout, "i0:10,i1:100000", "grid", "error")`` checks everything a user gives
finalize (array name, dims, policy) before any data is touched and returns a frozen,
picklable `ArraySpec`; every mistake is a UsageError that names the option and says what
to write instead.

- Dimensions: two different integer fields of the layout (coordinates are int64: a uint64
  value from 2**63 up is refused by the finalize that meets it) or time fields (``datetime64[U]``, ``timedelta64[U]``: their int64 counts of U are
  the coordinates), first dim slowest (row-major), each with a chunk length in
  1 .. 2**63-1 - of a time field, a duration (``ts:1h``, ``ts:15min``; a bare integer is a
  count of U), kept as that count of U. Not
  given (None): the layout's default dims - only the built-in scidb96 has them
  (``i0:10,i1:100000``); any other layout must be given dims (a UsageError says so).
- Cells keep every field of the record (the dims and the *attributes*) in declaration
  order; ``--duplicates keep`` adds a last field ``syn: uint32`` (`cell_layout`), so a
  capnp chunk is a standard ``Batch`` of the dataset's own schema (plus syn).
- Policies: ``error`` (default), ``first``, ``last``, ``keep`` (see finalize.py).

Pure functions: nothing here touches a dataset.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError
from ..model.layouts import TYPES, Field, Layout, builtin_schema_dir, parse_layout_toml
from ..model.optspec import DEFAULT_DIMS
from ..model.times import duration_in_unit, time_type

POLICIES = ("error", "first", "last", "keep")
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_DIMS_EXAMPLE = f"e.g. --dims {DEFAULT_DIMS['scidb96']}"


@dataclass(frozen=True)
class ArraySpec:
    name: str
    dims: tuple[str, str]
    chunks: tuple[int, int]
    policy: str
    layout: dict  # the dataset's layout (to_dict)

    @property
    def layout_obj(self) -> Layout:
        return Layout.from_dict(self.layout)

    @property
    def attrs(self) -> list[str]:
        return [f[0] for f in self.layout["fields"] if f[0] not in self.dims]  # [name, type(, options)]

    def cell_layout(self) -> Layout:
        return cell_layout(self.layout_obj, self.policy)

    @property
    def dims_text(self) -> str:
        return ",".join(f"{d}:{c}" for d, c in zip(self.dims, self.chunks))


def cell_layout(layout: Layout, policy: str) -> Layout:
    """The layout of a stored cell: the record's fields (+ ``syn: uint32`` for keep)."""
    if policy != "keep":
        return layout
    return Layout(
        f"{layout.name}_syn",
        layout.fields + (Field("syn", "uint32"),),
        f"cells of {layout.name} with a synthetic dimension syn",
    )


def parse_dims(dims, layout: Layout) -> tuple[tuple[str, str], tuple[int, int]]:
    """``"i0:10,i1:100000"`` (or ``[("i0", 10), ("i1", 100000)]``) -> (names, chunks)."""
    pairs = _dim_pairs(dims)
    if len(pairs) != 2:
        raise UsageError(
            f"--dims {_show(dims)}: a 2-D array needs exactly two dimensions (got {len(pairs)}), {_DIMS_EXAMPLE}"
        )
    names, chunks = [], []
    for name, chunk in pairs:
        _check_dim_field(dims, layout, name)
        if name in names:
            raise UsageError(
                f"--dims {_show(dims)}: field {name!r} is given twice; the two dimensions must be different fields"
            )
        names.append(name)
        timed = time_type(layout.field(name).type)
        if timed is not None:  # a duration, as a count of the field's unit
            chunk = duration_in_unit(chunk, timed[1], f"--dims {_show(dims)}: chunk of {name!r}")
        chunks.append(_chunk_length(dims, name, chunk))
    return (names[0], names[1]), (chunks[0], chunks[1])


def _dim_pairs(dims) -> list[tuple[str, object]]:
    """(field name, chunk as given) of each dimension of a dims text or sequence."""
    if not isinstance(dims, str):
        try:
            return [(str(n), c) for n, c in dims]
        except (TypeError, ValueError):
            raise UsageError(f"dims {dims!r}: give 'FIELD:CHUNK,FIELD:CHUNK' or [(field, chunk), ...]") from None
    pairs = []
    for p in (p.strip() for p in dims.split(",")):
        name, sep, chunk = p.partition(":")
        if not sep or not name.strip() or not chunk.strip():
            raise UsageError(
                f"--dims {dims!r}: {p!r} is not FIELD:CHUNK; "
                f"write two integer fields with chunk lengths, {_DIMS_EXAMPLE}"
            )
        pairs.append((name.strip(), chunk.strip()))
    return pairs


def dim_fields(layout: Layout) -> list[str]:
    """The fields of ``layout`` that may be dimensions: integers and times, not nullable."""
    return [
        f.name
        for f in layout.fields
        if not f.nullable and (time_type(f.type) is not None or (f.type in TYPES and f.is_integer))
    ]


def _check_dim_field(dims, layout: Layout, name: str) -> None:
    """A dimension must be a field of the layout of an integer type, or a datetime64 /
    timedelta64 field, and not nullable."""
    try:
        f = layout.field(name)
    except KeyError:
        raise UsageError(
            f"--dims {_show(dims)}: unknown field {name!r}; layout {layout.name!r} has {', '.join(layout.names)}"
        ) from None
    if f.nullable:
        raise UsageError(
            f"--dims {_show(dims)}: field {name!r} is nullable; a cell needs a coordinate in "
            f"every record: use a field that is not nullable ({', '.join(dim_fields(layout))})"
        )
    if time_type(f.type) is not None:
        return
    if f.type not in TYPES or not f.is_integer:
        raise UsageError(
            f"--dims {_show(dims)}: field {name!r} is {f.type}, not an integer or a time; "
            f"dimensions must be integer or datetime64/timedelta64 fields "
            f"({', '.join(dim_fields(layout)) or 'none in this layout'})"
        )


def _chunk_length(dims, name: str, chunk) -> int:
    """The chunk length of dimension ``name``: a whole number in 1 .. 2**63-1."""
    try:
        n = int(chunk)
        if isinstance(chunk, float) and chunk != n:
            raise ValueError
    except (TypeError, ValueError):
        raise UsageError(
            f"--dims {_show(dims)}: chunk length {chunk!r} of {name!r} "
            "is not an integer; use a positive integer, e.g. i0:10"
        ) from None
    if n <= 0 or n >= 2**63:
        raise UsageError(
            f"--dims {_show(dims)}: chunk length of {name!r} must be a positive integer below 2**63, got {n}"
        )
    return n


def _show(dims) -> str:
    return repr(dims) if isinstance(dims, str) else repr(list(dims))


def check_array_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise UsageError(
            f"array name {name!r} is not allowed; use a letter then letters, digits "
            "or _ (at most 64 characters), e.g. grid"
        )
    return name


def default_dims(layout: Layout) -> str:
    """The dims of ``layout`` when none are given: the built-in layout's own (DEFAULT_DIMS),
    else a UsageError asking for them (naming the integer fields it could use)."""
    dims = DEFAULT_DIMS.get(layout.name)
    if dims is not None:
        path = builtin_schema_dir() / f"{layout.name}.toml"
        if parse_layout_toml(path.read_text(), str(path)).fields == layout.fields:  # not a user's namesake
            return dims
    ints = dim_fields(layout)
    raise UsageError(
        f"layout {layout.name!r} has no default dims; give --dims FIELD:CHUNK,FIELD:CHUNK "
        f"with two of its integer or time fields ({', '.join(ints) or 'none in this layout'}), "
        "e.g. --dims " + ",".join(f"{n}:1000" for n in (ints + ["FIELD", "FIELD"])[:2])
    )


def make_spec(layout: Layout, dims, array: str, duplicates: str) -> ArraySpec:
    """The checked ArraySpec of ``dims`` (None: `default_dims`), ``array``, ``duplicates``."""
    check_array_name(array)
    if duplicates not in POLICIES:
        raise UsageError(f"--duplicates {duplicates!r} is unknown; use one of {', '.join(POLICIES)}")
    names, chunks = parse_dims(default_dims(layout) if dims is None else dims, layout)
    if duplicates == "keep" and "syn" in layout.names:
        raise UsageError(
            f"--duplicates keep adds a dimension 'syn', but layout {layout.name!r} "
            "already has a field named syn; use first or last"
        )
    return ArraySpec(array, names, chunks, duplicates, layout.to_dict())
