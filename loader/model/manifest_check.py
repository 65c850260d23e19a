"""Checking a decoded ``manifest.json`` before anything trusts it.

The manifest says what a dataset holds; a manifest that was edited by hand, cut short,
or damaged on disk must not be read as "0 records" (and then written over by the next
load). `problem(obj)` returns what is wrong with a decoded manifest and where, as a
(problem, JSON path) pair such as ``("Expected `int`, got `str`", "$.batches[3][1]")``,
or None when it is a valid bulkload manifest:

- the shape (msgspec): the required keys with their types; ``runs`` a list of runs
  (model/runs.py: ``id``, ``kind`` and ``status``, every other field of the type it must
  have when present) and ``garbage`` a list of entries (model/garbage_entry.py) - a
  problem in one names the run (its id) or entry and the field; ``arrays`` and ``files``
  objects of objects;
- the layout describes records (`Layout.from_dict` accepts it);
- every batch row is 6 integers (fixed-size records) or 11 fields (documents: ``lo``,
  ``hi`` integers or null, ``docs``, ``table``, ``text_bytes``), with a shard number
  below ``shards``, non-negative counts and sizes, a 64-bit checksum, sequence numbers
  strictly ascending and - fixed-size records - record numbers following each other.

Keys it does not know are accepted (written by newer code: kept as they are), in the
manifest, its runs and its garbage entries. The format
on disk is unchanged: this module only reads. Pure functions, no I/O.
"""

from __future__ import annotations

import functools
import re
import types
from typing import Annotated, Any

import msgspec

from ..errors import BulkloadError
from .garbage_entry import ENTRY_CLASSES, GarbageEntry, entry_shapes
from .layouts import Layout
from .runs import RUN_CLASSES, Run, run_shapes


class _Layout(msgspec.Struct):
    name: str
    fields: list[list[str | dict[str, bool | str]]]  # [name, type] or [name, type, {nullable, tz}]: Layout checks
    variable_length: bool = False


class _Shape(msgspec.Struct):
    layout: _Layout
    format: str
    compression: str
    scheme: str
    shards: Annotated[int, msgspec.Meta(ge=1, le=1024)]
    batch_records: Annotated[int, msgspec.Meta(ge=1)]
    batches: list[list[int | str | None]]
    arrays: dict[str, dict[str, Any]]
    dataset_id: str
    created: float
    version: int
    files: dict[str, dict[str, Any]] = {}


@functools.cache
def _shape(known_runs: bool, known_garbage: bool) -> type[msgspec.Struct]:
    """The manifest's shape: its runs (entries) a tagged union of one Struct per kind when
    all are of kinds this version knows, else checked for the fields of every kind only
    (a newer version's run or entry is kept as it is)."""
    run = run_shapes() if known_runs else Run.shape()
    entry = entry_shapes() if known_garbage else GarbageEntry.shape()
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        ("runs", types.GenericAlias(list, run)),
        ("garbage", types.GenericAlias(list, entry), []),
    ]
    return msgspec.defstruct("_ManifestShape", fields, bases=(_Shape,), kw_only=True)


def _kinds_known(items: object, classes: dict[str, Any]) -> bool:
    return isinstance(items, list) and all(
        isinstance(x, dict) and isinstance(x.get("kind"), str) and x["kind"] in classes for x in items
    )


FIXED_ROW = ("seq", "shard", "first", "count", "checksum", "nbytes")
KEYED_ROW = (*FIXED_ROW, "lo", "hi", "docs", "table", "text_bytes")
_N = Annotated[int, msgspec.Meta(ge=0)]
_FixedRow = tuple[_N, _N, _N, _N, int, _N]
_KeyedRow = tuple[_N, _N, _N, _N, int, _N, _N | None, _N | None, _N, str, _N]


def problem(obj: object) -> tuple[str, str] | None:
    """(what is wrong, JSON path) of a decoded manifest, or None if it is valid."""
    d: dict[str, Any] = obj if isinstance(obj, dict) else {}
    try:
        known = _kinds_known(d.get("runs", []), RUN_CLASSES), _kinds_known(d.get("garbage", []), ENTRY_CLASSES)
        shape = msgspec.convert(obj, _shape(*known))
        assert isinstance(shape, _Shape)  # its subclass, made by _shape
    except msgspec.ValidationError as e:
        return _named(d, *_split(e))
    found = _layout_problem(d["layout"])
    if found is not None:
        return found
    return _rows_problem(shape.batches, shape.shards, shape.layout.variable_length)


def _split(e: msgspec.ValidationError, root: str = "$") -> tuple[str, str]:
    """(problem, path) of a msgspec error; its path (``$...``) made relative to ``root``."""
    text, _, where = str(e).partition(" - at ")
    return text, root + where.strip("`")[1:]


_IN_LIST = re.compile(r"^\$\.(runs|garbage)\[(\d+)\]\.?(.*)$")


def _named(obj: dict[str, Any], what: str, where: str) -> tuple[str, str]:
    """A problem inside a run or a garbage entry says which one (a run by its id) and
    which of its fields."""
    found = _IN_LIST.match(where)
    if found is None:
        return what, where
    key, i, field = found.group(1), int(found.group(2)), found.group(3)
    item = obj[key][i]
    item = item if isinstance(item, dict) else {}
    ident, kind = item.get("id"), item.get("kind")
    if key == "runs":
        label = f"run {ident}" if isinstance(ident, str) and ident else f"run #{i}"
    else:
        label = f"garbage entry #{i}"
    if isinstance(kind, str) and kind:
        label += f" ({kind})"
    return (f"{label}, field `{field}`: {what}" if field else f"{label}: {what}"), where


def _layout_problem(layout: dict[str, Any]) -> tuple[str, str] | None:
    try:
        Layout.from_dict(layout)
    except (BulkloadError, KeyError, TypeError, ValueError) as e:
        return f"the layout is not valid: {e}", "$.layout"
    return None


def _rows_problem(rows: list[list[Any]], shards: int, keyed: bool) -> tuple[str, str] | None:
    """Types and ranges of every batch row (msgspec, in C), then the relations between
    rows (plain Python, without numpy's import: 10,000 rows take a few milliseconds)."""
    names = KEYED_ROW if keyed else FIXED_ROW
    wrong = next((i for i, r in enumerate(rows) if len(r) != len(names)), None)
    if wrong is not None:
        what = "documents" if keyed else "fixed-size records"
        return (
            f"a batch row of {what} has {len(names)} fields ({', '.join(names)}), this one has {len(rows[wrong])}"
        ), f"$.batches[{wrong}]"
    try:
        typed: list[tuple[int, int, int, int, int, *tuple[object, ...]]] = (
            msgspec.convert(rows, list[_KeyedRow]) if keyed else msgspec.convert(rows, list[_FixedRow])
        )
    except msgspec.ValidationError as e:
        return _split(e, root="$.batches")
    i = next((i for i, t in enumerate(typed) if not 0 <= t[4] < 2**64), None)
    if i is not None:
        return f"checksum {typed[i][4]} is not a 64-bit value", f"$.batches[{i}][4]"
    i = next((i for i, t in enumerate(typed) if t[1] >= shards), None)
    if i is not None:
        return (
            f"shard {typed[i][1]} does not exist (the dataset has {shards} shards: 0..{shards - 1})",
            f"$.batches[{i}][1]",
        )
    i = next((i for i in range(1, len(typed)) if typed[i][0] <= typed[i - 1][0]), None)
    if i is not None:
        return (
            f"batch seq {typed[i][0]} does not follow seq {typed[i - 1][0]} (seqs must ascend)",
            f"$.batches[{i}][0]",
        )
    i = (
        None
        if keyed
        else next((i for i in range(1, len(typed)) if typed[i][2] != typed[i - 1][2] + typed[i - 1][3]), None)
    )
    if i is not None:
        return (
            f"batch seq {typed[i][0]} starts at record {typed[i][2]}, but the batch before it ends at "
            f"record {typed[i - 1][2] + typed[i - 1][3]}"
        ), f"$.batches[{i}][2]"
    return None
