"""Document tables in a shard: run tables ``docs-RUNID``, the ``meta`` table of zstd
dictionaries, and the checksum of a batch's range scan.

A keyed batch's manifest row carries the xxh3_64 of key1 value1 key2 value2 ... of its
id range [lo, hi] in its table, in key order: what a range scan returns (a block's key
is an id of the batch), so verify and resume recompute it with one range scan.

Writes go through the caller's open shard store, one store operation each: a crash
between dropping a run's table and its dictionary leaves an unused ``meta`` entry,
which nothing reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import xxhash

from ..errors import ManifestError
from ..infra.checksums import CHANGED
from .batch import key_of
from .blocks import block_count

if TYPE_CHECKING:
    from ..model.manifest import BatchEntry

DOC_TABLE_PREFIX = "docs-"
META_TABLE = "meta"


class KeyedSpan(NamedTuple):
    """Where a keyed batch's documents are: ids ``lo..hi`` (inclusive) in ``table``."""

    lo: int
    hi: int
    table: str


def keyed_span(b: BatchEntry) -> KeyedSpan:
    """The id range and table of a keyed batch's manifest row (the row's optional fields,
    which a keyed row always has; ManifestError for a row without them)."""
    lo, hi, table = b.lo, b.hi, b.table
    if lo is None or hi is None or table is None:
        raise ManifestError(
            f"batch {b.seq} (shard {b.shard}) is read as documents but its manifest row has no id range "
            "or table; run `bulkload verify` and reload the dataset"
        )
    return KeyedSpan(lo, hi, table)


def range_checksum(store, table: str, lo: int, hi: int, blocks: bool) -> tuple[int, int, int]:
    """(xxh3_64 of key+value pairs, document count, value bytes) of keys lo..hi in a table."""
    h = xxhash.xxh3_64()
    n = nbytes = 0
    for k, v in store.range(key_of(lo), None if hi >= 2**64 - 1 else key_of(hi + 1), table=table):
        h.update(k)
        h.update(v)
        n += block_count(v) if blocks else 1
        nbytes += len(v)
    return h.intdigest(), n, nbytes


def range_problem(store, b, blocks: bool) -> str | None:
    """Why the documents of keyed batch entry b are not intact in its shard, or None."""
    if not b.docs:
        return None
    checksum, n, nbytes = range_checksum(store, b.table, b.lo, b.hi, blocks)
    if n != b.docs:
        return f"{n} documents stored under ids {b.lo}..{b.hi}, the manifest says {b.docs}"
    if nbytes != b.nbytes:
        return f"size {nbytes} != {b.nbytes} in the manifest (ids {b.lo}..{b.hi})"
    if checksum != b.checksum:
        return f"{CHANGED} in ids {b.lo}..{b.hi}"
    return None


def doc_tables(store) -> list[str]:
    return [t for t in store.tables() if t.startswith(DOC_TABLE_PREFIX)]


def drop_doc_table(store, table: str, clear_from: int = -1) -> None:
    """Drop a run's documents and its dictionary from a shard; in a table shared with
    committed runs (clear_from >= 0) only the keys from clear_from on."""
    if clear_from >= 0:
        store.delete_range(key_of(clear_from), None, table=table)
        return
    store.drop_table(table)
    name = table.encode()
    store.delete_range(name, name + b"\x00", table=META_TABLE)


def load_dictionary(store, table: str) -> bytes | None:
    v = store.get(table.encode(), table=META_TABLE)
    return None if v is None else bytes(v)
