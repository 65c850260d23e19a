"""What a reader read from its stores: `ReadStats`, the counter a `Dataset` keeps
(``Dataset.read_stats``) of the stored values it fetched.

Every read of a stored batch value goes through `Dataset._value` (a whole value: scans,
`read_records`, `iter_batches`, exports, DuckDB and Polars queries) or `Dataset._part_into`
(some records' pages of a value, in the random-read mode), and every read of an array's
chunk piece through arrays/query.py's `_get` (whole) or arrays/box_parts.py's `read_parts`
(in parts): each adds the bytes it read and the value to the counter. ``bytes`` is then
the stored (compressed) bytes fetched: for a whole value its stored size, for a part the
byte ranges read. The counter only grows; `ReadStats.since` gives what one query read.
Cheap: two integer additions per value. Not shared between processes (a Dask task counts
in its own reader).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReadStats:
    """Stored bytes and batch values a reader fetched (see the module docstring)."""

    #: stored (compressed) bytes of batch values read
    bytes: int = 0
    #: batch values (or chunk pieces of an array) read, whole or in part
    batches: int = 0

    def add(self, nbytes: int) -> None:
        self.bytes += nbytes
        self.batches += 1

    def copy(self) -> ReadStats:
        return ReadStats(self.bytes, self.batches)

    def since(self, before: ReadStats) -> ReadStats:
        """What was read after ``before`` (a `copy` taken then)."""
        return ReadStats(self.bytes - before.bytes, self.batches - before.batches)
