"""The coordinator's side of a stream load: read the streams once, hand batches to workers.

A thread of the coordinator per stream (stdin, a FIFO, /dev/fd/N; several FIFOs: one
thread each, reading in parallel, sources/many.py) reads it batch by batch into the free
slots of one `stream.SharedSlots` area; each full batch then takes the next seq and
record number (under the `Feeder`'s lock: batches are numbered in the order they are
read, a stream's own records stay in its order) and its `messages.StreamBatch` goes to
the worker that owns it (seq mod K = shard, shard mod W = worker), in seq order. Workers
hand slots back with `messages.FreeSlot`, which the pool's message relay returns to the
feeder. When every stream has ended, every worker gets ``None``.

Progress is the input as it is read - whole records, every worker.progress_every() s (a slow stream fills
a batch slowly) and at each batch - counted by the feeder threads, not by the workers
(whose reports come per batch written); the workers' Progress messages are dropped.

Crash behaviour: a partial trailing record, or a read error, of any stream fails the
pool before the workers can finish (so nothing of the run is committed; the error names
the stream and the byte offset); when the pool stops first (a worker failed, a signal), the feeder stops too,
and a feeder blocked in ``read()`` is left to the process's exit.
"""

from __future__ import annotations

import queue
import threading
import time

from ..errors import PartialRecordError, UnreadableInputError
from ..infra.pool import Pool, context
from ..infra.threads import TaskThread
from .messages import FreeSlot, LoadReceipt, StreamBatch
from .stream import SharedSlots
from .worker import load_worker, progress_every


def run_stream(tasks: list, progress, source, layout, on_message=None, stdin=None) -> tuple[list[LoadReceipt], int]:
    """Run the load workers over the records of ``source`` (a sources.StreamSource);
    returns (receipts, records read)."""
    ctx = context()
    plan, streams = tasks[0].plan, source.streams()
    slots = SharedSlots(2 * len(tasks) + 2 + len(streams), plan.batch_records * layout.record_size)
    pipes = [ctx.Pipe(duplex=False) for _ in tasks]
    feeder = Feeder(slots, [send for _, send in pipes], plan, layout.record_size, len(streams), progress.advance)

    def relay(msg) -> None:
        if isinstance(msg, FreeSlot):
            feeder.free.put(msg.slot)
        elif on_message is not None:
            on_message(msg)

    pool = Pool(load_worker, tasks, extras=[(recv, slots) for recv, _ in pipes], on_progress=None, on_message=relay)
    threads = [TaskThread(feeder.run, pool, stream, stdin) for stream in streams]
    try:
        for thread in threads:
            thread.start()
        receipts = pool.run()
    finally:
        feeder.stopped = True
        for recv, send in pipes:
            send.close()
            recv.close()
        deadline = time.monotonic() + 0.5
        if all(t.ended(max(0.0, deadline - time.monotonic())) for t in threads):
            slots.close()  # else one is blocked in read(): its view goes at exit
    return receipts, feeder.records


class Feeder:
    """Reads streams into free slots and sends each batch to its worker's inbox."""

    def __init__(
        self, slots: SharedSlots, inboxes: list, plan, record_size: int, nstreams: int = 1, on_read=lambda records: None
    ):
        self.slots, self.inboxes, self.nshards, self.rs = slots, inboxes, plan.nshards, record_size
        # C-level: the main thread returns slots (relay), and a stop signal raised inside a
        # queue.Queue's put could leave its lock held (see worker._Producer)
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(slots.nslots):
            self.free.put(i)
        self.stopped = False  # the pool has stopped: stop feeding (a flag: no Python-level lock)
        self.lock = threading.Lock()  # numbers and sends batches in seq order
        self.seq, self.first = plan.first_seq, plan.first_record  # of the next batch
        self.records = 0  # read so far
        self.streams = nstreams  # not ended yet
        self.on_read, self.progress_lock = on_read, threading.Lock()  # progress: records read

    def run(self, pool: Pool, source, stdin) -> None:
        """A feeder thread: any error is handed to the pool (the run must fail); the last
        one to end tells every worker that the records have ended."""
        stream, owned = None, False
        try:
            stream, owned = source.open(stdin)  # a FIFO: waits here for its writer
            self.feed(stream, source.name)
        except BaseException as e:
            pool.fail(e)  # before the workers can finish: the run must fail
        finally:
            if owned and stream is not None:
                stream.close()
            with self.lock:
                self.streams -= 1
                last = not self.streams
            for inbox in self.inboxes if last else ():
                try:
                    inbox.send(None)
                except OSError:
                    pass  # the pool already stopped

    def feed(self, stream, name: str) -> None:
        """Read ``stream`` batch by batch into free slots and send each to its worker."""
        offset, slots, rs = 0, self.slots, self.rs
        read = _ReadProgress(self, rs)
        while not self.stopped:
            try:
                slot = self.free.get(timeout=0.2)
            except queue.Empty:
                continue
            mv = slots.view(slot)
            try:
                got = _read_full(stream, mv, name, offset, read)
            finally:
                mv.release()
            read.report(offset + got)
            if got % rs:
                raise PartialRecordError(name, offset + got - got % rs, rs, got % rs)
            if got == 0:
                self.free.put(slot)
                break
            self.send(slot, got // rs)
            offset += got
            if got < slots.slot_bytes:
                break

    def send(self, slot: int, count: int) -> None:
        """Number the batch in ``slot`` and send it to its worker (seq order per worker)."""
        with self.lock:
            seq, first = self.seq, self.first
            self.seq, self.first, self.records = seq + 1, first + count, self.records + count
            self.inboxes[(seq % self.nshards) % len(self.inboxes)].send(StreamBatch(seq, first, count, slot))


class _ReadProgress:
    """One stream's progress: the whole records read since the last report, told to the
    run's Progress (under the feeder's progress lock: several streams, one count)."""

    def __init__(self, feeder: Feeder, record_size: int):
        self.feeder, self.rs, self.told, self.t = feeder, record_size, 0, time.monotonic()
        self.every = progress_every()

    def due(self, offset: int) -> None:
        if time.monotonic() - self.t >= self.every:
            self.report(offset)

    def report(self, offset: int) -> None:
        """Tell the records of the first ``offset`` bytes not told yet."""
        records = offset // self.rs - self.told
        self.t = time.monotonic()
        if records > 0:
            self.told += records
            with self.feeder.progress_lock:
                self.feeder.on_read(records)


def _read_full(stream, mv: memoryview, name: str, offset: int, read: _ReadProgress) -> int:
    got = 0
    while got < len(mv):
        try:
            n = stream.readinto(mv[got:])
        except OSError as e:
            raise UnreadableInputError(
                f"{name}: read failed at byte offset {offset + got}: "
                f"{e.strerror or e}; nothing from this run was committed"
            ) from None
        if not n:
            break
        got += n
        read.due(offset + got)
    return got
