"""The load worker: a plain module-level function over (task, outbox) that returns a receipt.

A load worker owns some shards (shard = seq mod K, worker = shard mod W) and runs the
three stages for the batches of those shards:

  produce   a thread (`_Producer`) fills each batch's records straight into the
            serializer's buffer (C generator in-process, pread from a file, or a copy out
            of the coordinator's shared-memory slot for a stream, stream.py); a bounded
            queue between it and the writer is the backpressure
  serialize frame (capnp: write a 40-byte header in front of the records) or Arrow IPC
  write     group batches per shard into one atomic put_sorted (LMDB append / RocksDB SST)

What a batch is (records in a numpy buffer -> one value; or documents -> one value per
id) is the layout's *record kind* (kinds/); this loop is the same for both.

The worker then syncs its shards and returns a `messages.LoadReceipt`: the written
batches and stage timings. Every ``checkpoints.seconds`` / ``checkpoints.nbytes`` it also
syncs what it wrote so far and sends the coordinator a `messages.Checkpoint` (the synced
batches), which records them in the manifest as the run's *pending* batches: not visible
to readers, but kept by a resumed run. The coordinator lists batches in the manifest's
committed list once the whole unit (the run for `load`, the file for `ingest`) is
synced; until then they do not exist.

Crash behaviour: a worker killed at any point leaves its shards as a crash does (batches
above the last checkpoint are leftovers the next writer deletes); a store write that
fails becomes a one-line StoreError saying the committed state is intact; a worker whose
coordinator died stops without writing more.
"""

from __future__ import annotations

import functools
import os
import queue
import time
from operator import attrgetter

from ..infra import env, faults
from ..infra.pool import Progress
from ..infra.proc import parent_alive, peak_rss, start_worker
from ..infra.threads import TaskThread
from ..kinds import kind_for
from ..model.layouts import Layout
from ..model.manifest import BatchEntry
from ..stores.health import check_shard
from ..stores.registry import open_writer
from ..stores.write_guard import guard_write
from .messages import Checkpoint, LoadReceipt, StageTimes
from .stream import received_batches
from .task import LoadTask

GROUP_BYTES = 16 << 20
QUEUE_DEPTH = 4
#: planned batches smaller than this are produced in the writing thread: for small batches
#: the hand-off between two threads (queue operations and a GIL switch each) costs more
#: than the overlap gains (20M scidb96 records in 100-record batches: see CHANGELOG)
INLINE_BATCH_BYTES = 256 << 10
#: seconds between a worker's progress messages (at most one per batch: its overhead is nil);
#: less when BULKLOAD_PROGRESS_SECONDS asks for log lines more often (`progress_every`)
PROGRESS_S = 0.5


def load_worker(task: LoadTask, outbox, inbox=None, slots=None) -> LoadReceipt:
    """Produce, serialize and write this worker's batches; return the receipt.

    ``outbox``: the worker's end of its pipe (pool.Outbox); ``inbox``, ``slots``: for a
    stream, the pipe its batches arrive on and the shared memory they are in (stream.py)."""
    start_worker(task)
    w = task.write
    layout = Layout.from_dict(w.layout)
    writer = kind_for(layout, w.format, w.compression).writer(task)
    times = StageTimes()
    stores: dict = {}
    try:
        _open_stores(task, writer, stores)
        if inbox is not None:  # a stream: batches arrive from the coordinator (stream.py)
            batches = received_batches(inbox, slots, layout.record_size, writer.ser, outbox, times)
        else:
            batches = _planned(task, writer, times)
        stage = _WriteStage(task, writer, stores, outbox, times)
        if inbox is None and _inline_batches(task, writer, layout, outbox):
            _inline(task, writer, stage, times)
        else:
            with _Producer(batches) as produced:
                for seq, first, count, payload in produced:
                    stage.add(seq, first, count, payload)
        stage.finish()
    finally:
        for st in stores.values():
            st.close()
    return stage.receipt()


def _open_stores(task: LoadTask, writer, stores: dict) -> None:
    """Open this worker's shards for writing into ``stores`` (the caller closes them) and
    remove the leftovers of failed runs (what is below the resume point is kept)."""
    w = task.write
    extra = dict(w.store_options)
    if w.shard_bytes_hint and "map_size" not in dict(w.store.options):
        extra["map_size"] = str(int(w.shard_bytes_hint * 1.25) + (64 << 20))
    for s in task.owned_shards():
        opts = dict(w.store.options) | extra
        if s in w.must_exist:  # gone since the coordinator looked: do not re-create it empty
            damage = check_shard(w.store, s)
            if damage is not None:
                raise damage.error(writing=True)
        stores[s] = st = open_writer(w.store, s, opts)
        guard_write(w.store, s, functools.partial(writer.prepare, s, st))


def _inline_batches(task: LoadTask, writer, layout: Layout, outbox) -> bool:
    """Whether the planned batches (fixed-size records) are produced in the writing thread:
    small ones (`INLINE_BATCH_BYTES`), and any when this worker is one of the run's threads
    in one process (executors.ThreadExecutor): its siblings keep the cores busy already, so
    a produce thread of its own adds no parallelism, only a hand-off and a GIL switch a
    batch (20M gen://ticks in-process: 0.627 -> 0.558 s, ad hoc, medians of 8)."""
    if writer.kind.keyed:
        return False
    small = task.plan.batch_records * layout.record_size < INLINE_BATCH_BYTES
    return small or getattr(outbox, "shared_process", False)


def _inline(task: LoadTask, writer, stage: _WriteStage, times: StageTimes) -> None:
    """`_planned` and `_WriteStage.add` in one loop for small batches of fixed-size records
    (`_inline_batches`): the same calls, without the generator, the hand-off tuple and the
    row list per batch - a 100-record batch's own work is a few microseconds."""
    pc = time.perf_counter
    (produce, encode), add = writer.inline(), stage.add_value
    for seq, first, count, source, off in task.planned_batches():
        t0 = pc()
        payload = produce(seq, first, count, source, off)
        t1 = pc()
        key, value, checksum = encode(seq, first, payload)
        times.serialize_s += pc() - t1
        times.produce_s += t1 - t0
        add(seq, first, count, key, value, checksum)


def _planned(task: LoadTask, writer, times: StageTimes):
    """(seq, first, count, payload) of this worker's planned batches, produced in turn."""
    for seq, first, count, source, off in task.planned_batches():
        t = time.perf_counter()
        payload = writer.produce(seq, first, count, source, off)
        times.produce_s += time.perf_counter() - t
        yield seq, first, count, payload


class _Producer:
    """The produce stage: a thread runs ``batches`` into a bounded hand-off; iterating
    yields them in order and raises the thread's error. Leaving the ``with`` stops the
    thread (waiting for it up to 2 s).

    Nothing the main thread does here waits on Python-level locking: a stop signal is
    raised in the main thread (which iterates this in an in-process load) at any of its
    check points, also inside the standard library's ``Condition`` code. Raised in
    ``queue.Queue.get`` right after it took the queue's lock, it left that lock held and
    the load hung on SIGTERM. So the hand-off is two C-level ``queue.SimpleQueue``s (the
    batches, and tokens for room in the bound) and the thread is a `TaskThread`
    (infra/threads.py; tests/loading/test_stop_anywhere.py)."""

    def __init__(self, batches):
        self.batches = batches
        self.items: queue.SimpleQueue = queue.SimpleQueue()
        self.room: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(QUEUE_DEPTH):
            self.room.put(None)
        self.stopped = False
        self.thread = TaskThread(self._produce)

    def __enter__(self) -> _Producer:
        try:
            self.thread.start()
        except BaseException:  # a stop right after the start: the thread must end too
            self.__exit__()  # (when none was started, there is nothing to wait for)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stopped = True
        self.room.put(None)  # wakes the thread if it waits for room
        self.ended(2)

    def ended(self, timeout: float) -> bool:
        """Whether the thread has ended, waiting up to ``timeout`` s."""
        return self.thread.ended(timeout)

    def __iter__(self):
        while True:
            item = self.items.get()
            self.room.put(None)
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def _produce(self) -> None:
        try:
            for item in self.batches:
                if not self._put(item):
                    return
            self._put(None)
        except BaseException as e:  # hand the error to the writer thread
            self._put(e)

    def _put(self, item) -> bool:
        """Hand ``item`` over once there is room; False once the consumer has stopped."""
        self.room.get()
        if self.stopped:
            return False
        self.items.put(item)
        return True


class _WriteStage:
    """Serialize and write: batches are grouped per shard and a group is written in one
    put_sorted once it holds GROUP_BYTES; every checkpoint interval everything written is
    synced and reported (`messages.Checkpoint`). Progress counts the input as it is
    consumed - records encoded - every PROGRESS_S at most once a batch, not the groups
    written: well-compressed records fill a group only at the end of a run, and a slow
    stream's batches trickle in."""

    def __init__(self, task: LoadTask, writer, stores: dict, outbox, times: StageTimes):
        self.task, self.writer, self.stores, self.outbox, self.times = task, writer, stores, outbox, times
        self.keyed, self.nshards, self.spec = writer.kind.keyed, task.plan.nshards, task.write.store
        self.every = task.write.checkpoints
        self.groups: dict[int, list] = {s: [] for s in stores}  # store items per shard
        self.group_bytes = {s: 0 for s in stores}
        self.grouped = 0  # sum(group_bytes.values())
        self.group_entries: dict[int, list[BatchEntry]] = {s: [] for s in stores}
        self.written: list[BatchEntry] = []
        self.unsynced: list[BatchEntry] = []  # written since the last checkpoint
        self.skipped: list[dict] = []
        self.ckpt_bytes, self.ckpt_t = 0, time.monotonic()
        self.progress = [0, 0]  # records, bytes of text (keyed) consumed and not reported yet
        self.progress_t, self.progress_every = time.monotonic(), progress_every()

    def add(self, seq: int, first: int, count: int, payload) -> None:
        """Serialize one batch into its shard's group; write and checkpoint when due."""
        stores, times = self.stores, self.times
        t = time.perf_counter()
        s = seq % self.nshards
        # keyed: may write the shard's zstd dictionary (first batch) - a store write
        items, row, _nbytes, bad = (
            guard_write(self.spec, s, lambda: self.writer.encode(seq, first, count, payload, s, stores[s]))
            if self.keyed
            else self.writer.encode(seq, first, count, payload, s)
        )
        entry = BatchEntry(*row)
        self.skipped.extend(bad)
        times.serialize_s += time.perf_counter() - t
        self._added(s, items, entry)

    def add_value(self, seq: int, first: int, count: int, key: bytes, value, checksum: int) -> None:
        """`add` of a batch of fixed-size records already encoded (`_inline`)."""
        s = seq % self.nshards
        self._added(s, ((key, value),), BatchEntry(seq, s, first, count, checksum, len(value)))

    def _added(self, s: int, items, entry: BatchEntry) -> None:
        """Group batch ``entry`` (its store ``items``) on shard ``s``; write and checkpoint when due."""
        faults.hit("batch")
        self.groups[s].extend(items)
        self.group_entries[s].append(entry)
        self.group_bytes[s] += entry.nbytes
        self.grouped += entry.nbytes
        self.progress[0] += entry.records
        self.progress[1] += (entry.text_bytes or 0) if self.keyed else 0
        now = time.monotonic()
        if now - self.progress_t >= self.progress_every:
            self.report_progress()
        if self.group_bytes[s] >= GROUP_BYTES:
            self.flush(s)
            _stop_if_orphaned(self.task)
        if self.ckpt_bytes + self.grouped >= self.every.nbytes or now - self.ckpt_t >= self.every.seconds:
            self.checkpoint()
            _stop_if_orphaned(self.task)

    def report_progress(self) -> None:
        """Tell the coordinator the records consumed since the last report (if any)."""
        records, text = self.progress
        if records:
            self.outbox.put(Progress(records, text if self.keyed else None))
        self.progress, self.progress_t = [0, 0], time.monotonic()

    def flush(self, s: int) -> None:
        """Write shard ``s``'s group (one put_sorted)."""
        entries = self.group_entries[s]
        if not entries:  # (a batch whose files were all skipped has a row, no items)
            return
        t = time.perf_counter()
        if self.groups[s]:
            guard_write(self.spec, s, lambda: self.stores[s].put_sorted(self.groups[s], table=self.writer.table))
        self.times.write_s += time.perf_counter() - t
        faults.hit("flush")
        self.written.extend(entries)
        self.unsynced.extend(entries)
        self.ckpt_bytes += self.group_bytes[s]
        self.grouped -= self.group_bytes[s]
        self.groups[s], self.group_entries[s], self.group_bytes[s] = [], [], 0

    def sync_all(self) -> None:
        t = time.perf_counter()
        for s, st in self.stores.items():
            guard_write(self.spec, s, st.sync)
        self.times.sync_s += time.perf_counter() - t
        faults.hit("sync")

    def checkpoint(self) -> None:
        """Make what was written durable and tell the coordinator which batches it is."""
        for s in self.stores:
            self.flush(s)
        if self.unsynced:
            self.sync_all()
            self.outbox.put(Checkpoint(self.task.worker, tuple(self.unsynced)))
            self.unsynced.clear()
        self.ckpt_bytes, self.ckpt_t = 0, time.monotonic()

    def finish(self) -> None:
        """Write every group and sync (the receipt's batches are then durable)."""
        for s in self.stores:
            self.flush(s)
        self.report_progress()
        self.sync_all()

    def receipt(self) -> LoadReceipt:
        """The worker's result, once its stores are closed."""
        return LoadReceipt(
            worker=self.task.worker,
            pid=os.getpid(),
            # (one shard's batches are written in seq order: 100,000 of them at 100-record batches)
            batches=tuple(self.written if len(self.stores) == 1 else sorted(self.written, key=attrgetter("seq"))),
            skipped=tuple(self.skipped),
            map_grows=sum(getattr(st, "grows", 0) for st in self.stores.values()),
            times=self.times.rounded(4),
            max_rss=peak_rss(),
        )


def progress_every() -> float:
    """Seconds between progress reports of the input consumed (a worker's, a stream feeder's)."""
    return min(PROGRESS_S, env.progress_seconds())


def _stop_if_orphaned(task: LoadTask) -> None:
    if not parent_alive(task.main_pid):
        raise SystemExit("coordinator died")
