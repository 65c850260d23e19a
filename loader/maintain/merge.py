"""Compaction's batch merge, in pool workers: rewrite groups of small batches as single batches.

`plan_merge` streams the batch rows in seq order (= record order) into `MergeGroup`s:
consecutive old batches that become one new batch under a fresh sequence number above every
existing one. Every merge worker streams the plan itself from the catalog generation the
coordinator (compact.py `_merge`) read (the dataset lock is held: no other commit), so no
process holds the plan or the batch table: memory is flat in the number of batches.
`merge_worker` writes the new batches of the shards it owns (shard = new seq mod K, owned
when shard mod W == worker: one writer per shard): a one-batch group is copied verbatim,
a larger one is decoded, concatenated and encoded once. Every old batch is read
zero-copy and checked against its manifest row (size, xxh3) first: a changed batch is a
CorruptBatchError, never a merged batch with a new checksum. Values are written in key
order in groups of up to `GROUP_BYTES`, then each shard is synced once. The new batch rows
go to the worker's rows file (`RowsFile`, seq order, fixed-size records) that the
coordinator's commit streams; the receipt counts them (`MergeReceipt`).

Crash behaviour: the new keys lie at or above the manifest's ``next_seq``, which no
committed batch uses: a worker first deletes such leftovers of a crashed attempt, and a
crash leaves only keys that the next writer removes (and rows files, which the next
writer removes too: garbage.start_writing calls `remove_rows_files`). Fault point: ``merge`` (after each
group written).
"""

from __future__ import annotations

import contextlib
import heapq
import os
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import StoreError
from ..infra import faults
from ..infra.checksums import batch_checksum
from ..infra.proc import peak_rss, start_worker
from ..model import manifest as mf
from ..model.catalog_rows import BatchRows
from ..model.layouts import Layout
from ..model.manifest import BatchEntry
from ..model.placement import batch_key, owned_shards
from ..serializers import get_serializer
from ..stores.spec import StoreSpec
from ..stores.values import ValueReader, read_batch
from ..stores.write_guard import guard_write

GROUP_BYTES = 64 << 20
#: a rows file's record: seq, shard, first, count, checksum, nbytes of one new batch
ROW = struct.Struct("<6Q")
#: a keyed batch's (documents): those, then lo, hi, docs, text_bytes (its table: the compaction's)
KEYED_ROW = struct.Struct("<10Q")
#: rows files of a compaction, in the dataset root: ROWS_PREFIX + "PID-WORKER"
ROWS_PREFIX = ".compact-rows-"


@dataclass(frozen=True)
class MergeGroup:
    """One new batch: ``seq``, its first record and count, and the old batches it replaces."""

    seq: int
    first: int
    count: int
    olds: tuple  # of BatchEntry, in record order


def plan_merge(batches: Iterable[BatchEntry], target: int) -> Iterator[list[BatchEntry]]:
    """Greedy groups of consecutive batches of at most ``target`` records, streamed from
    ``batches`` in seq order (which is record order; StoreError if a row breaks it)."""
    cur: list[BatchEntry] = []
    acc = 0
    end = None
    for b in batches:
        if end is not None and b.first < end:
            raise StoreError(
                f"batch {b.seq} (first record {b.first}) comes before the end of the previous "
                f"one ({end}): the batch rows are not in record order; nothing was compacted - "
                "run `bulkload verify` on the dataset"
            )
        end = b.first + b.count
        if cur and acc + b.count > target:
            yield cur
            cur, acc = [], 0
        cur.append(b)
        acc += b.count
    if cur:
        yield cur


def merge_groups(batches: Iterable[BatchEntry], target: int, first_seq: int) -> Iterator[MergeGroup]:
    """The plan: the new batches, numbered from ``first_seq``, in seq order."""
    for i, g in enumerate(plan_merge(batches, target)):
        yield MergeGroup(first_seq + i, g[0].first, sum(b.count for b in g), tuple(g))


def rows_path(root: str, pid: int, worker: int) -> str:
    return os.path.join(root, f"{ROWS_PREFIX}{pid}-{worker}")


def remove_rows_files(root: str, pid: int | None = None) -> None:
    """Remove the rows files of compaction ``pid`` (None: every one: leftovers of a
    compaction that died, removed by every writer; call with the dataset lock held)."""
    prefix = ROWS_PREFIX if pid is None else f"{ROWS_PREFIX}{pid}-"
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if name.startswith(prefix):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(root, name))


class RowsFile:
    """The new batch rows one worker writes for its compaction's switch, in seq order, as
    fixed-size records (`ROW`; keyed rows `KEYED_ROW`, all in the compaction's one table):
    no process holds them as a list. The file is in the dataset root (`rows_path`)."""

    def __init__(self, path: str, keyed: bool = False):
        self.fmt = KEYED_ROW if keyed else ROW
        self.f: BinaryIO = open(path, "wb")  # noqa: SIM115  # closed by `close`
        self.rows = 0

    def write(self, b: BatchEntry) -> None:
        head = (b.seq, b.shard, b.first, b.count, b.checksum, b.nbytes)
        if self.fmt is KEYED_ROW:
            self.f.write(KEYED_ROW.pack(*head, b.lo or 0, b.hi or 0, b.docs or 0, b.text_bytes or 0))
        else:
            self.f.write(ROW.pack(*head))
        self.rows += 1

    def close(self) -> None:
        self.f.close()


def read_rows(
    paths: Iterable[str], count: int, first_seq: int | None = None, table: str | None = None
) -> Iterator[BatchEntry]:
    """The new batch rows of the workers' rows files, in seq order (a merge of the files,
    each in seq order): ``count`` rows of ascending seqs - exactly ``first_seq`` ..
    ``first_seq + count - 1`` when it is given - else StoreError (nothing is committed).
    ``table``: keyed rows (`KEYED_ROW`) of that table."""
    fmt = ROW if table is None else KEYED_ROW
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(p, "rb")) for p in paths]
        n, prev = 0, -1 if first_seq is None else first_seq - 1
        for r in heapq.merge(*(_rows_of(f, fmt) for f in files), key=lambda r: r[0]):
            if r[0] <= prev or (first_seq is not None and r[0] != prev + 1):
                break
            seq, shard, first, records, checksum, nbytes = r[:6]
            if table is None:
                yield BatchEntry(seq, shard, first, records, checksum, nbytes)
            else:
                yield BatchEntry(seq, shard, first, records, checksum, nbytes, r[6], r[7], r[8], table, r[9])
            n, prev = n + 1, r[0]
        if n != count:
            raise StoreError(f"compaction wrote {n} of {count} batches in order; nothing was committed")


def _rows_of(f: BinaryIO, fmt: struct.Struct) -> Iterator[tuple[int, ...]]:
    while chunk := f.read(fmt.size * 4096):
        yield from fmt.iter_unpack(chunk[: len(chunk) - len(chunk) % fmt.size])


def manifest_at(store: StoreSpec, generation: int) -> mf.Manifest:
    """A compaction worker's manifest: the catalog at the generation its coordinator
    planned from (the dataset lock is held: no other commit), else StoreError."""
    m = mf.load_manifest(store.root)
    if m.generation != generation:
        raise StoreError(
            f"the catalog of {store.root} is at generation {m.generation}, compaction planned "
            f"at {generation} (another writer?); nothing was committed - run the compaction again"
        )
    return m


def switch_rows(
    root: str, m: mf.Manifest, source: Callable[[], Iterator[BatchEntry]], retire: Callable[[], None]
) -> None:
    """The switch of a compaction: one commit whose batch table is the rows ``source()``
    streams (`BatchRows.streamed`) and whose garbage list ``retire()`` extends. On failure
    ``m`` holds its rows and garbage as read (for the run's stop)."""
    garbage = list(m.garbage)
    try:
        m.batches = BatchRows.streamed(source)
        retire()
        m.save(root)
    except BaseException:
        snap = getattr(m, "_snap", None)
        if m.batches.snap is None and snap is not None:  # not switched: the rows as read
            m.batches = BatchRows(snap=snap, agg=snap.aggregates())
            m.garbage = garbage
        raise


@dataclass(frozen=True)
class MergeTask:
    store: StoreSpec
    worker: int
    workers: int
    nshards: int
    layout: dict
    format: str
    compression: str
    target: int  # records per new batch (at most)
    first_seq: int  # of the first new batch
    generation: int  # of the catalog the plan is streamed from
    rows: str  # the path of this worker's rows file
    main_pid: int = 0
    fault: str = ""

    def owned_shards(self) -> list[int]:
        return owned_shards(self.nshards, self.workers, self.worker)


@dataclass(frozen=True)
class MergeReceipt:
    worker: int
    batches: int  # the new batches this worker wrote (their rows: the task's rows file)
    seconds: float
    max_rss: int


def merge_worker(task: MergeTask, progress_q) -> MergeReceipt:
    t0 = time.perf_counter()
    start_worker(task)
    m = manifest_at(task.store, task.generation)
    merger = _Merger(task)
    try:
        merger.open()
        for g in merge_groups(m.batches, task.target, task.first_seq):
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
        self.batches = 0
        self.rows: RowsFile | None = None
        self.groups: dict[int, list] = {s: [] for s in self.owned}
        self.group_bytes = {s: 0 for s in self.owned}

    def open(self) -> None:
        """Open the owned shards (writers first: a later reader of the same shard shares
        the env) and delete leftovers of a crashed attempt (keys from the first new seq)."""
        self.rows = RowsFile(self.task.rows)
        for s in self.owned:
            self.writers[s] = self.task.store.open_shard(s, write=True)
        for st in self.writers.values():
            st.delete_range(batch_key(self.task.first_seq), None)

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
        assert self.rows is not None
        checksum = batch_checksum(value, self.ser.hashes_blocks)
        self.rows.write(BatchEntry(g.seq, s, g.first, g.count, checksum, len(value)))
        self.batches += 1
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
        if self.rows is not None:
            self.rows.close()
        for st in list(self.readers.values()) + list(self.writers.values()):
            st.close()
