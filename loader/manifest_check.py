"""Checking a decoded ``manifest.json`` before anything trusts it.

The manifest says what a dataset holds; a manifest that was edited by hand, cut short,
or damaged on disk must not be read as "0 records" (and then written over by the next
load). `problem(obj)` returns what is wrong with a decoded manifest and where, as a
(problem, JSON path) pair such as ``("Expected `int`, got `str`", "$.batches[3][1]")``,
or None when it is a valid bulkload manifest:

- the shape (msgspec): the required keys with their types; ``runs`` a list of objects
  with ``id``, ``kind`` and ``status``; ``arrays`` and ``files`` objects of objects;
- the layout describes records (`Layout.from_dict` accepts it);
- every batch row is 6 integers (fixed-size records) or 11 fields (documents: ``lo``,
  ``hi`` integers or null, ``docs``, ``table``, ``text_bytes``), with a shard number
  below ``shards``, non-negative counts and sizes, a 64-bit checksum, sequence numbers
  strictly ascending and - fixed-size records - record numbers following each other.

Keys it does not know are accepted (written by newer code: kept as they are). The format
on disk is unchanged: this module only reads. Pure functions, no I/O.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

class _Run(msgspec.Struct):
    id: str
    kind: str
    status: str


class _Layout(msgspec.Struct):
    name: str
    fields: list[tuple[str, str]]
    variable_length: bool = False


class _Shape(msgspec.Struct):
    layout: _Layout
    format: str
    compression: str
    scheme: str
    shards: Annotated[int, msgspec.Meta(ge=1, le=1024)]
    batch_records: Annotated[int, msgspec.Meta(ge=1)]
    batches: list[list[int | str | None]]
    runs: list[_Run]
    arrays: dict[str, dict]
    dataset_id: str
    created: float
    version: int
    files: dict[str, dict] = {}


FIXED_ROW = ("seq", "shard", "first", "count", "checksum", "nbytes")
KEYED_ROW = FIXED_ROW + ("lo", "hi", "docs", "table", "text_bytes")


def problem(obj) -> tuple[str, str] | None:
    """(what is wrong, JSON path) of a decoded manifest, or None if it is valid."""
    try:
        shape = msgspec.convert(obj, _Shape)
    except msgspec.ValidationError as e:
        text, _, where = str(e).partition(" - at ")
        return text, where.strip("`") or "$"
    found = _layout_problem(obj["layout"])
    if found is not None:
        return found
    return _rows_problem(shape.batches, shape.shards, shape.layout.variable_length)


def _layout_problem(layout: dict) -> tuple[str, str] | None:
    from .errors import BulkloadError
    from .layouts import Layout

    try:
        Layout.from_dict(layout)
    except (BulkloadError, KeyError, TypeError, ValueError) as e:
        return f"the layout is not valid: {e}", "$.layout"
    return None


def _rows_problem(rows: list[list], shards: int, keyed: bool) -> tuple[str, str] | None:
    names = KEYED_ROW if keyed else FIXED_ROW
    prev = None
    for i, row in enumerate(rows):
        where = f"$.batches[{i}]"
        if len(row) != len(names):
            what = "documents" if keyed else "fixed-size records"
            return (f"a batch row of {what} has {len(names)} fields ({', '.join(names)}), "
                    f"this one has {len(row)}"), where
        for j, (name, value) in enumerate(zip(names, row)):
            found = _field_problem(name, value, shards)
            if found is not None:
                return found, f"{where}[{j}]"
        if prev is not None and row[0] <= prev[0]:
            return f"batch seq {row[0]} does not follow seq {prev[0]} (seqs must ascend)", f"{where}[0]"
        if not keyed and row[2] != (prev[2] + prev[3] if prev is not None else row[2]):
            return (f"batch seq {row[0]} starts at record {row[2]}, but the batch before it ends at record "
                    f"{prev[2] + prev[3]}"), f"{where}[2]"
        prev = row
    return None


def _field_problem(name: str, value, shards: int) -> str | None:
    if name == "table":
        return None if isinstance(value, str) else f"`table` must be a string, not {value!r}"
    if name in ("lo", "hi") and value is None:
        return None
    if not isinstance(value, int):
        return f"`{name}` must be an integer, not {value!r}"
    if value < 0:
        return f"`{name}` must not be negative ({value})"
    if name == "shard" and value >= shards:
        return f"shard {value} does not exist (the dataset has {shards} shards: 0..{shards - 1})"
    if name == "checksum" and value >= 2**64:
        return f"checksum {value} is not a 64-bit value"
    return None
