"""The flat records of a small finalize, decoded once.

A small finalize runs its phases as threads of one process (finalize.py). When decoding a
flat batch builds its records in new memory anyway (a compressed or Arrow value: the
serializer's ``decode_copies``), its scan decodes every batch into one `Decoded` array,
in the plan's batch order, and its build gathers each window's cells from there
(build_sources.DirectSource, build_emit.ChunkEmitter.emit ``rows``) instead of reading
and decompressing every batch a second time and copying each window into a buffer.

Invariants: batch ``i`` of the plan (finalize's flat list, record order) is
``records[offsets[i]:offsets[i + 1]]`` once ``filled[i]``; the build uses the kept
records only when every batch of its windows is filled (else it reads them all from the
shards, as before). In-process only: never pickled to a pool worker; at most
finalize.SMALL_FINALIZE_BYTES of records, which the small finalize's budget check (a
third of the buffers) already counts. Crash behaviour: memory only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class RecordIndices:
    """The record index of positions in the kept records (``ridx[positions]``), computed when
    asked: only a window with a repeated cell needs them."""

    def __init__(self, offsets: np.ndarray, firsts: np.ndarray):
        self.offsets, self.firsts = offsets, firsts

    def __getitem__(self, positions) -> np.ndarray:
        pos = np.asarray(positions, np.int64)
        batch = np.searchsorted(self.offsets, pos, side="right") - 1  # an empty batch never holds one
        return self.firsts[batch] + (pos - self.offsets[batch])


@dataclass(frozen=True)
class Decoded:
    records: np.ndarray  # layout.dtype, every batch of the plan
    offsets: np.ndarray  # int64, len(batches) + 1
    filled: np.ndarray  # bool per batch
    ridx: RecordIndices  # the record index of each record

    @classmethod
    def for_batches(cls, batches: list, dtype: np.dtype) -> Decoded:
        offsets = np.zeros(len(batches) + 1, np.int64)
        np.cumsum([b.count for b in batches], out=offsets[1:])
        firsts = np.array([b.first for b in batches] + [0], np.int64)
        return cls(
            np.empty(int(offsets[-1]), dtype), offsets, np.zeros(len(batches), bool), RecordIndices(offsets, firsts)
        )

    def slot(self, i: int) -> np.ndarray:
        return self.records[self.offsets[i] : self.offsets[i + 1]]

    def fill(self, i: int, reader, b) -> bool:
        """Decode batch ``b`` (plan position ``i``, read with BatchReader ``reader``) into its
        slot; False (nothing kept) when it does not hold the plan's count."""
        if not reader.decode_into(b, self.slot(i)):
            return False
        self.filled[i] = True
        return True

    def holds(self, batches: np.ndarray) -> bool:
        """Whether the scan kept every one of these batches (positions in the plan)."""
        return bool(self.filled[batches].all())
