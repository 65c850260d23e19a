"""What a load worker and its coordinator tell each other, as small typed objects.

Worker -> coordinator, over the worker's outbox (infra/pool.py):

- ``infra.pool.Progress(records, nbytes)``: records written (the pool's progress);
- `Checkpoint`: the batches this worker has just synced (commit.py records them as the
  run's pending batches and commits what is complete);
- `FreeSlot`: a stream's shared-memory slot the worker has copied out (stream.py);
- `LoadReceipt`: the last word, the worker's result: every batch it wrote and its figures.

Coordinator -> worker, over a stream worker's inbox: `StreamBatch` (a batch to copy out
of a slot), then ``None`` at the end of the stream.

Batches travel as ``model.manifest.BatchEntry`` objects (the manifest's rows); a worker
builds them from the record kind's rows (kinds/). Plain picklable data: nothing here
does I/O. A `Checkpoint`'s and a `LoadReceipt`'s batches cross the pipe as one msgpack
value (`_Entries`): 100,000 rows pickle in ~0.01 s and unpickle in ~0.04 s that way, against
0.3 s each as pickled objects (ad hoc), and a coordinator takes them in serially.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from ..model.manifest import BatchEntry

_ENCODE = msgspec.msgpack.Encoder()
_DECODE = msgspec.msgpack.Decoder(tuple[BatchEntry, ...])


def _packed(entries: Sequence[BatchEntry]) -> bytes:
    return _ENCODE.encode(entries)


def _checkpoint(worker: int, packed: bytes) -> Checkpoint:
    return Checkpoint(worker, _DECODE.decode(packed))


def _receipt(packed: bytes, *fields: object) -> LoadReceipt:
    worker, pid, skipped, grows, times, rss = fields
    return LoadReceipt(worker, pid, _DECODE.decode(packed), skipped, grows, times, rss)  # type: ignore[arg-type]


STAGES = ("produce_s", "serialize_s", "write_s", "sync_s")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Batches ``entries`` of ``worker`` are durable (synced) in their shards."""

    worker: int
    entries: tuple[BatchEntry, ...]

    def __reduce__(self) -> tuple[object, ...]:
        return _checkpoint, (self.worker, _packed(self.entries))


@dataclass(frozen=True, slots=True)
class FreeSlot:
    """A stream worker copied its batch out of shared-memory slot ``slot``: it is free."""

    slot: int


@dataclass(frozen=True, slots=True)
class StreamBatch:
    """Batch ``seq`` (dataset records ``first``.., ``count`` of them) waits in ``slot``."""

    seq: int
    first: int
    count: int
    slot: int


@dataclass
class StageTimes:
    """Seconds a worker spent in each stage (the produce thread adds to ``produce_s``)."""

    produce_s: float = 0.0
    serialize_s: float = 0.0
    write_s: float = 0.0
    sync_s: float = 0.0

    def rounded(self, digits: int) -> StageTimes:
        return StageTimes(*(round(getattr(self, s), digits) for s in STAGES))


@dataclass(frozen=True)
class LoadReceipt:
    """A load worker's result: the batches it wrote (in seq order) and its figures."""

    worker: int
    pid: int
    batches: tuple[BatchEntry, ...]
    skipped: tuple[dict, ...]  # documents: bad files left out by --on-bad-file skip, {"path", "reason"}
    map_grows: int  # LMDB map growths
    times: StageTimes
    max_rss: int  # the worker's peak resident set, bytes

    def __reduce__(self) -> tuple[object, ...]:
        fields = (self.worker, self.pid, self.skipped, self.map_grows, self.times, self.max_rss)
        return _receipt, (_packed(self.batches), *fields)


def stage_figures(receipts) -> dict:
    """The slowest worker's seconds per stage ({} without receipts): what a report shows."""
    if not receipts:
        return {}
    return {s: round(max(getattr(rc.times, s) for rc in receipts), 3) for s in STAGES}
