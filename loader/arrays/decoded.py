"""The flat records of a small finalize, decoded once.

A small finalize runs its phases as threads of one process (finalize.py). When decoding a
flat batch builds its records in new memory anyway (a compressed or Arrow value: the
serializer's ``decode_copies``), its scan keeps them, in one `Decoded` array in the
plan's batch order, and its build copies a window's batches from there instead of
reading and decompressing every batch a second time.

Invariants: batch ``i`` of the plan (finalize's flat list, record order) is
``records[offsets[i]:offsets[i + 1]]`` once ``filled[i]``; a batch the scan did not fill
(it stopped early, or the value did not hold the manifest's count) is read from its shard
as before. In-process only: never pickled to a pool worker; at most
finalize.SMALL_FINALIZE_BYTES of records. Crash behaviour: memory only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Decoded:
    records: np.ndarray  # layout.dtype, every batch of the plan
    ridx: np.ndarray  # int64: the record index of each
    offsets: np.ndarray  # int64, len(batches) + 1
    filled: np.ndarray  # bool per batch

    @classmethod
    def for_batches(cls, batches: list, dtype: np.dtype) -> "Decoded":
        offsets = np.zeros(len(batches) + 1, np.int64)
        np.cumsum([b.count for b in batches], out=offsets[1:])
        n = int(offsets[-1])
        return cls(np.empty(n, dtype), np.empty(n, np.int64), offsets, np.zeros(len(batches), bool))

    def slot(self, i: int) -> np.ndarray:
        return self.records[self.offsets[i]:self.offsets[i + 1]]

    def fill(self, i: int, reader, b) -> bool:
        """Decode batch ``b`` (plan position ``i``, read with BatchReader ``reader``) into its
        slot; False (nothing kept) when it does not hold the plan's count."""
        if not reader.decode_into(b, self.slot(i)):
            return False
        self.ridx[self.offsets[i]:self.offsets[i + 1]] = np.arange(b.first, b.first + b.count)
        self.filled[i] = True
        return True

    def holds(self, batches: np.ndarray) -> bool:
        """Whether the scan kept every one of these batches (positions in the plan)."""
        return bool(self.filled[batches].all())
