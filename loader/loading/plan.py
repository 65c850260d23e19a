"""A run's plan of batches, computed arithmetically from its segments.

A *segment* is a contiguous part of a plan: ``count`` records of one source from source
record ``offset``, stored as batches ``first_seq``.. holding dataset records
``first_record``..; a load is one segment, a directory ingest one per file. Batch ``seq``
holds at most ``batch_records`` records and lives on shard ``seq mod K``.

`Plan` never lists the batches: a batch's row, a shard's seqs and the records still to
write come from the segments, so a plan of 10**15 records costs what a plan of ten does
(memory stays flat in N, as the workers' bounded queues keep it while loading).

Pure arithmetic: nothing here reads or writes a dataset.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Segment:
    """``count`` records of ``source`` from source record ``offset``, stored as batches
    ``first_seq``.. holding dataset records ``first_record``.."""

    source: object  # a sources.Source (GenSource, FileSource, ...)
    count: int
    first_seq: int
    first_record: int
    offset: int = 0

    def nbatches(self, b: int) -> int:
        return -(-self.count // b)


def shard_seqs(lo: int, hi: int, shard: int, nshards: int) -> range:
    """The seqs in [lo, hi) of batches stored on ``shard`` (seq mod K), ascending."""
    return range(lo + (shard - lo) % nshards, max(lo, hi), nshards)


@dataclass(frozen=True)
class Plan:
    """The batches of a run: its segments (empty ones dropped, in seq order), cut into
    batches of ``batch_records`` over ``nshards`` shards. ``first_seq`` / ``first_record``:
    where the run starts in the dataset (a stream's plan has no segments)."""

    segments: tuple[Segment, ...]
    batch_records: int
    nshards: int
    first_seq: int = 0
    first_record: int = 0
    starts: tuple[int, ...] = field(init=False, repr=False, compare=False)  # first seq of each segment

    def __post_init__(self):
        segments = tuple(sorted((s for s in self.segments if s.count), key=lambda s: s.first_seq))
        object.__setattr__(self, "segments", segments)
        object.__setattr__(self, "starts", tuple(s.first_seq for s in segments))

    @property
    def end(self) -> int | None:
        """One past the last seq (None: no batches)."""
        return max((s.first_seq + s.nbatches(self.batch_records) for s in self.segments), default=None)

    def row(self, seq: int) -> tuple[int, int, int] | None:
        """(shard, first record, count) of batch ``seq``, or None if the plan has no such batch."""
        i = bisect.bisect_right(self.starts, seq) - 1
        if i < 0:
            return None
        seg, b = self.segments[i], self.batch_records
        j = seq - seg.first_seq
        if j >= seg.nbatches(b):
            return None
        return seq % self.nshards, seg.first_record + j * b, min(b, seg.count - j * b)

    def shard_seqs(self, shard: int):
        """The seqs of the batches on ``shard``, ascending."""
        for seg in self.segments:
            yield from shard_seqs(seg.first_seq, seg.first_seq + seg.nbatches(self.batch_records), shard, self.nshards)

    def records_from(self, resume: tuple) -> int:
        """Records of the batches at or above each shard's resume seq (``()``: all)."""
        total = sum(s.count for s in self.segments)
        if not resume:
            return total
        b, k = self.batch_records, self.nshards
        for seg in self.segments:
            nb = seg.nbatches(b)
            last = seg.first_seq + nb - 1
            for shard in range(k):
                done = shard_seqs(seg.first_seq, min(seg.first_seq + nb, resume[shard]), shard, k)
                if done:
                    total -= len(done) * b - (b * nb - seg.count if done[-1] == last else 0)
        return total

    def resume_seq(self, resume: tuple, shard: int) -> int:
        """The first seq a worker writes on ``shard`` (``resume``: per shard, ``()``: none)."""
        return resume[shard] if resume else self.first_seq

    def batches_of(self, shards: list[int], resume: tuple):
        """(seq, first_record, count, source, source_offset) of the batches of ``shards``
        from their resume seqs on, in seq order: computed per shard (no walk over the
        batches of other shards)."""
        b, k = self.batch_records, self.nshards
        for seg in self.segments:
            lo, hi = seg.first_seq, seg.first_seq + seg.nbatches(b)
            runs = [shard_seqs(max(lo, self.resume_seq(resume, s)), hi, s, k) for s in shards]
            for seq in runs[0] if len(runs) == 1 else heapq.merge(*runs):
                i = seq - lo
                yield seq, seg.first_record + i * b, min(b, seg.count - i * b), seg.source, seg.offset + i * b
