"""Compaction's batch merge, in pool workers: rewrite groups of small batches as single batches.

The coordinator (compact.py `_merge`) plans `MergeGroup`s: consecutive old batches (record
order) that become one new batch under a fresh sequence number above every existing one.
`merge_worker` writes the new batches of the shards it owns (shard = new seq mod K, owned
when shard mod W == worker: one writer per shard): a one-batch group is copied verbatim,
a larger one is decoded, concatenated and encoded once. Every old batch is read
zero-copy and checked against its manifest row (size, xxh3) first: a changed batch is a
CorruptBatchError, never a merged batch with a new checksum. Values are written in key
order in groups of up to `GROUP_BYTES`, then each shard is synced once; the receipt
lists the new batches (`MergeReceipt`).

Crash behaviour: the new keys lie at or above the manifest's ``next_seq``, which no
committed batch uses: a worker first deletes such leftovers of a crashed attempt, and a
crash leaves only keys that the next writer removes. Fault point: ``merge`` (after each
group written).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import xxhash

from ..infra import faults
from ..infra.proc import peak_rss, start_worker
from ..model.layouts import Layout
from ..model.manifest import BatchEntry
from ..model.placement import batch_key, owned_shards
from ..serializers import get_serializer
from ..stores.spec import StoreSpec
from ..stores.values import ValueReader, read_batch
from ..stores.write_guard import guard_write

GROUP_BYTES = 64 << 20


@dataclass(frozen=True)
class MergeGroup:
    """One new batch: ``seq``, its first record and count, and the old batches it replaces."""

    seq: int
    first: int
    count: int
    olds: tuple  # of BatchEntry, in record order


@dataclass(frozen=True)
class MergeTask:
    store: StoreSpec
    worker: int
    workers: int
    nshards: int
    layout: dict
    format: str
    compression: str
    plan: tuple  # of MergeGroup, in seq order
    main_pid: int = 0
    fault: str = ""

    def owned_shards(self) -> list[int]:
        return owned_shards(self.nshards, self.workers, self.worker)


@dataclass(frozen=True)
class MergeReceipt:
    worker: int
    batches: list  # of BatchEntry: the new batches this worker wrote
    seconds: float
    max_rss: int


def merge_worker(task: MergeTask, progress_q) -> MergeReceipt:
    t0 = time.perf_counter()
    start_worker(task)
    merger = _Merger(task)
    try:
        merger.open()
        for g in task.plan:
            s = g.seq % task.nshards
            if s in merger.writers:
                merger.add(s, g, merger.value_of(g))
                progress_q.put(g.count)
        merger.finish()
    finally:
        merger.close()
    return MergeReceipt(task.worker, merger.batches, round(time.perf_counter() - t0, 4), peak_rss())


class _Merger:
    """A merge worker's open shards (writers of its own, readers of the others) and the
    groups of new values not yet written."""

    def __init__(self, task: MergeTask):
        self.task = task
        self.ser = get_serializer(task.format, Layout.from_dict(task.layout), task.compression)
        self.owned = task.owned_shards()
        self.writers: dict = {}
        self.readers: dict = {}
        self.batches: list[BatchEntry] = []
        self.groups: dict[int, list] = {s: [] for s in self.owned}
        self.group_bytes = {s: 0 for s in self.owned}

    def open(self) -> None:
        """Open the owned shards (writers first: a later reader of the same shard shares
        the env) and delete leftovers of a crashed attempt (keys from the first new seq)."""
        for s in self.owned:
            self.writers[s] = self.task.store.open_shard(s, write=True)
        first_new = min((g.seq for g in self.task.plan), default=None)
        for st in self.writers.values():
            if first_new is not None:
                st.delete_range(batch_key(first_new), None)

    def _shard(self, i: int):
        if i in self.writers:
            return self.writers[i]
        if i not in self.readers:
            self.readers[i] = self.task.store.open_shard(i, write=False)
        return self.readers[i]

    def value_of(self, g: MergeGroup) -> bytes:
        """The stored value of the new batch: the old value itself, or the old records
        decoded, concatenated and encoded once."""
        if len(g.olds) == 1:
            with ValueReader(self._shard(g.olds[0].shard), "batches") as rd:
                return bytes(read_batch(rd, self.task.store, g.olds[0]))
        buf, recs = self.ser.new_buffer(g.count)
        pos = 0
        for old in g.olds:
            with ValueReader(self._shard(old.shard), "batches") as rd:
                _, part = self.ser.decode(read_batch(rd, self.task.store, old))
                recs[pos : pos + old.count] = part
            pos += old.count
        value = self.ser.encode_buffer(buf, recs, g.first)
        return value if isinstance(value, bytes) else bytes(memoryview(value).cast("B"))

    def add(self, s: int, g: MergeGroup, value: bytes) -> None:
        self.batches.append(BatchEntry(g.seq, s, g.first, g.count, xxhash.xxh3_64_intdigest(value), len(value)))
        self.groups[s].append((batch_key(g.seq), value))
        self.group_bytes[s] += len(value)
        if self.group_bytes[s] >= GROUP_BYTES:
            self.flush(s)

    def flush(self, s: int) -> None:
        if self.groups[s]:
            group = self.groups[s]
            guard_write(self.task.store, s, lambda: self.writers[s].put_sorted(group, table="batches"))
            self.groups[s], self.group_bytes[s] = [], 0
            faults.hit("merge")

    def finish(self) -> None:
        for s in self.owned:
            self.flush(s)
            guard_write(self.task.store, s, self.writers[s].sync)

    def close(self) -> None:
        for st in list(self.readers.values()) + list(self.writers.values()):
            st.close()
