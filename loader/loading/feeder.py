"""The coordinator's side of a stream load: read the stream once, hand batches to workers.

A thread of the coordinator (`Feeder`) reads the stream (stdin, a FIFO, /dev/fd/N) batch
by batch into the free slots of a `stream.SharedSlots` area and sends each batch's
`messages.StreamBatch` to the worker that owns it (seq mod K = shard, shard mod W =
worker); workers hand slots back with `messages.FreeSlot`, which the pool's message
relay returns to the feeder. At the end of the stream every worker gets ``None``.

Crash behaviour: a partial trailing record, or a read error, fails the pool before the
workers can finish (so nothing of the run is committed; the error names the byte
offset); when the pool stops first (a worker failed, a signal), the feeder stops too,
and a feeder blocked in ``read()`` is left to the process's exit.
"""

from __future__ import annotations

import queue
import threading

from ..errors import PartialRecordError, UnreadableInputError
from ..infra.pool import Pool, context
from .messages import FreeSlot, LoadReceipt, StreamBatch
from .stream import SharedSlots
from .worker import load_worker


def run_stream(tasks: list, progress, source, layout, on_message=None, stdin=None) -> tuple[list[LoadReceipt], int]:
    """Run the load workers over the records of ``source`` (a sources.StreamSource);
    returns (receipts, records read)."""
    ctx = context()
    first = tasks[0]
    slots = SharedSlots(2 * len(tasks) + 2, first.plan.batch_records * layout.record_size)
    pipes = [ctx.Pipe(duplex=False) for _ in tasks]
    feeder = Feeder(slots, [send for _, send in pipes], first.plan.nshards, layout.record_size)

    def relay(msg) -> None:
        if isinstance(msg, FreeSlot):
            feeder.free.put(msg.slot)
        elif on_message is not None:
            on_message(msg)

    pool = Pool(load_worker, tasks, extras=[(recv, slots) for recv, _ in pipes], on_progress=progress.advance,
                on_message=relay)
    thread = threading.Thread(target=feeder.run, args=(pool, source, stdin, first.plan), name="stream-feeder",
                              daemon=True)
    try:
        thread.start()
        receipts = pool.run()
    finally:
        feeder.done.set()
        for recv, send in pipes:
            send.close()
            recv.close()
        thread.join(0.5)
        if not thread.is_alive():  # else it is blocked in read(): its view goes when the process exits
            slots.close()
    return receipts, feeder.records


class Feeder:
    """Reads a stream into free slots and sends each batch to its worker's inbox."""

    def __init__(self, slots: SharedSlots, inboxes: list, nshards: int, record_size: int):
        self.slots, self.inboxes, self.nshards, self.rs = slots, inboxes, nshards, record_size
        self.free: queue.Queue = queue.Queue()
        for i in range(slots.nslots):
            self.free.put(i)
        self.done = threading.Event()  # the pool has stopped: stop feeding
        self.records = 0  # read so far

    def run(self, pool: Pool, source, stdin, plan) -> None:
        """The feeder thread: any error is handed to the pool (the run must fail)."""
        stream, owned = None, False
        try:
            stream, owned = source.open(stdin)  # a FIFO: waits here for its writer
            self.feed(stream, source.name, plan.first_seq, plan.first_record)
        except BaseException as e:
            pool.fail(e)  # before the workers can finish: the run must fail
        finally:
            if owned:
                stream.close()
            for inbox in self.inboxes:
                try:
                    inbox.send(None)
                except OSError:
                    pass  # the pool already stopped

    def feed(self, stream, name: str, seq: int, first: int) -> None:
        """Read ``stream`` batch by batch into free slots and send each to its worker."""
        offset, slots, rs = 0, self.slots, self.rs
        while not self.done.is_set():
            try:
                slot = self.free.get(timeout=0.2)
            except queue.Empty:
                continue
            mv = slots.view(slot)
            try:
                got = _read_full(stream, mv, name, offset)
            finally:
                mv.release()
            if got % rs:
                raise PartialRecordError(name, offset + got - got % rs, rs, got % rs)
            if got == 0:
                break
            count = got // rs
            self.inboxes[(seq % self.nshards) % len(self.inboxes)].send(StreamBatch(seq, first, count, slot))
            seq, first, offset, self.records = seq + 1, first + count, offset + got, self.records + count
            if got < slots.slot_bytes:
                break


def _read_full(stream, mv: memoryview, name: str, offset: int) -> int:
    got = 0
    while got < len(mv):
        try:
            n = stream.readinto(mv[got:])
        except OSError as e:
            raise UnreadableInputError(f"{name}: read failed at byte offset {offset + got}: "
                                       f"{e.strerror or e}; nothing from this run was committed") from None
        if not n:
            break
        got += n
    return got
