"""Where a batch goes: its key, its shard, and the worker that writes that shard.

- A flat batch is stored under its sequence number as 8 bytes big-endian (`batch_key`):
  byte order is numeric order, so batches are written in key order (LMDB append, RocksDB
  SST files).
- Batch -> shard: seq mod K. Shard -> worker: shard mod W (`owned_shards`), for every
  pool (load, compact's merge, finalize's build): one writer per shard at any moment.
"""

from __future__ import annotations


def batch_key(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


def owned_shards(nshards: int, workers: int, worker: int) -> list[int]:
    """The shards a worker writes (shard mod W == worker): one writer per shard, for every pool."""
    return [s for s in range(nshards) if s % workers == worker]
