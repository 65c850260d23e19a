"""Entries of ``manifest.garbage``: committed data a manifest write made unreachable.

maintain/garbage.py lists them (in the write that makes the data unreachable) and deletes
their data once no reader pins an older generation. Three kinds:

- ``{"kind": "batches", "below": SEQ}``: every batch key below SEQ, in every shard;
- ``{"kind": "array", "table": T, "index": PATH}``: table T in every shard, and the chunk
  index file ROOT/PATH;
- ``{"kind": "doc-tables", "shard": S, "tables": [T, ...]}``: document tables (with their
  zstd dictionaries) of shard S;

each stamped with ``generation`` by the manifest write that lists it (model/manifest.py).
An entry is a typed JSON object (model/json_object.py) of its kind's class (`BatchesGarbage`,
`ArrayGarbage`, `DocTablesGarbage`; validated as a tagged union of msgspec Structs on
``kind``, `entry_shapes`): keys in the order written, absent ones read as None. An entry of
a kind this version does not know (written by a newer one) is a plain `GarbageEntry`, kept
listed as it is and never collected. Pure data.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from .json_object import Absent, JsonObject
from .vocab import GARBAGE_KINDS, GarbageKind

BATCHES: GarbageKind = "batches"
ARRAY: GarbageKind = "array"
DOC_TABLES: GarbageKind = "doc-tables"
KINDS: tuple[GarbageKind, ...] = GARBAGE_KINDS


class GarbageEntry(JsonObject):
    """An entry of ``manifest.garbage``; of a kind this version does not know if of this
    very class."""

    kind: str
    generation: Absent[int] = None  # of the manifest write that listed it

    @staticmethod
    def batches(below: int) -> BatchesGarbage:
        return BatchesGarbage(kind=BATCHES, below=int(below))

    @staticmethod
    def array(table: str, index: str) -> ArrayGarbage:
        return ArrayGarbage(kind=ARRAY, table=table, index=index)

    @staticmethod
    def doc_tables(shard: int, tables: Iterable[str]) -> DocTablesGarbage:
        return DocTablesGarbage(kind=DOC_TABLES, shard=int(shard), tables=sorted(tables))


class BatchesGarbage(GarbageEntry):
    """Every batch key below ``below``, in every shard."""

    _tag = BATCHES
    kind: Literal["batches"]
    below: int


class ArrayGarbage(GarbageEntry):
    """Table ``table`` in every shard, and the chunk index file ROOT/``index``."""

    _tag = ARRAY
    kind: Literal["array"]
    table: str
    index: str


class DocTablesGarbage(GarbageEntry):
    """Document tables ``tables`` (with their zstd dictionaries) of shard ``shard``."""

    _tag = DOC_TABLES
    kind: Literal["doc-tables"]
    shard: int
    tables: list[str]


#: the class of each kind of entry
ENTRY_CLASSES: dict[str, type[GarbageEntry]] = {
    BATCHES: BatchesGarbage,
    ARRAY: ArrayGarbage,
    DOC_TABLES: DocTablesGarbage,
}
GarbageEntry._by_tag = ENTRY_CLASSES  # GarbageEntry.from_dict builds the entry of its kind's class


def entry_shapes() -> Any:
    """The tagged union (on ``kind``) of the msgspec Structs of the known kinds of entries."""
    shapes: tuple[type[msgspec.Struct], ...] = tuple(cls.shape() for cls in ENTRY_CLASSES.values())
    return typing.Union[shapes]  # noqa: UP007  # a union built at runtime
