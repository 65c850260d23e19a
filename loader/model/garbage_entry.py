"""Entries of ``manifest.garbage``: committed data a manifest write made unreachable.

maintain/garbage.py lists them (in the write that makes the data unreachable) and deletes
their data once no reader pins an older generation. Three kinds:

- ``{"kind": "batches", "below": SEQ}``: every batch key below SEQ, in every shard;
- ``{"kind": "array", "table": T, "index": PATH}``: table T in every shard, and the chunk
  index file ROOT/PATH;
- ``{"kind": "doc-tables", "shard": S, "tables": [T, ...]}``: document tables (with their
  zstd dictionaries) of shard S;

each stamped with ``generation`` by the manifest write that lists it (model/manifest.py).
An entry is a typed JSON object (model/json_object.py): keys in the order written, absent
ones read as None. An entry of a kind this version does not know (written by a newer
one) is kept listed as it is and never collected. Pure data.
"""

from __future__ import annotations

from .json_object import JsonObject

BATCHES, ARRAY, DOC_TABLES = "batches", "array", "doc-tables"
KINDS = (BATCHES, ARRAY, DOC_TABLES)


class GarbageEntry(JsonObject):
    kind: str  # batches | array | doc-tables
    below: int = None  # batches
    table: str = None  # array
    index: str = None  # array
    shard: int = None  # doc-tables
    tables: list[str] = None  # doc-tables
    generation: int = None  # of the manifest write that listed it

    @classmethod
    def batches(cls, below: int) -> GarbageEntry:
        return cls(kind=BATCHES, below=int(below))

    @classmethod
    def array(cls, table: str, index: str) -> GarbageEntry:
        return cls(kind=ARRAY, table=table, index=index)

    @classmethod
    def doc_tables(cls, shard: int, tables) -> GarbageEntry:
        return cls(kind=DOC_TABLES, shard=int(shard), tables=sorted(tables))
