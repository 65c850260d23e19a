"""Stream sources (stdin, a FIFO, /dev/stdin, /dev/fd/N): read once, by the coordinator.

A stream cannot be split or replayed, so a thread of the coordinator (the *feeder*)
reads it into the slots of one shared-memory area, one batch per slot, and tells the
worker that owns the batch (seq mod K = shard, shard mod W = worker) over that worker's
inbox pipe: ``(seq, first record, count, slot)``. The worker copies the records out of
the slot into its serializer's buffer and hands the slot back at once through its outbox
(``("free", slot)``; the pool loop passes it to the feeder). Record bytes never travel
through a pipe; a bounded number of slots (2 per worker + 2) keeps memory flat.

The shared memory is an anonymous file (``memfd_create``) that the workers receive as a
file descriptor when they start: it has no name in /dev/shm, so no run - finished,
failed, or SIGKILLed at any moment, coordinator or worker - leaves anything there, and
there is nothing to clean up; the kernel frees it when the last process holding it
exits. (Not ``multiprocessing.shared_memory``: under forkserver its resource tracker
prints ``KeyError: '/psm_...'`` tracebacks and a killed coordinator leaks
``/dev/shm/psm_*``.)

Crash behaviour: a partial trailing record, or a read error, fails the pool before the
workers can finish (so nothing of the run is committed, the error names the byte
offset); a worker that loses its inbox (the coordinator died or gave up) stops without
finishing.
"""

from __future__ import annotations

import mmap
import os
import queue
import threading
import time

from ..errors import PartialRecordError, UnreadableInputError


class SharedSlots:
    """``nslots`` slots of ``slot_bytes`` each, in one memfd mapped by every holder.

    Pickled into a worker's arguments at its start, it travels as a file descriptor
    (``multiprocessing.reduction.DupFd``), never as a name."""

    def __init__(self, nslots: int, slot_bytes: int, fd: int | None = None):
        self.nslots, self.slot_bytes = nslots, slot_bytes
        size = max(1, nslots * slot_bytes)
        if fd is None:
            fd = os.memfd_create("bulkload-stream", os.MFD_CLOEXEC)
            os.ftruncate(fd, size)
        self.fd = fd
        self.map = mmap.mmap(fd, size)

    def view(self, slot: int, nbytes: int | None = None) -> memoryview:
        start = slot * self.slot_bytes
        return memoryview(self.map)[start:start + (self.slot_bytes if nbytes is None else nbytes)]

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:
            pass  # a feeder blocked in read() still holds a view: unmapped when the process exits
        try:
            os.close(self.fd)
        except OSError:
            pass

    def __reduce__(self):
        from multiprocessing import reduction

        return _attach, (reduction.DupFd(self.fd), self.nslots, self.slot_bytes)


def _attach(dup, nslots: int, slot_bytes: int) -> SharedSlots:
    return SharedSlots(nslots, slot_bytes, fd=dup.detach())


# --- the coordinator ------------------------------------------------------------------------


def run_stream(tasks: list, progress, source, layout, on_message=None, stdin=None) -> tuple[list, int]:
    """Run the load workers over the records of ``source`` (a sources.StreamSource);
    returns (receipts, records read)."""
    from ..infra.pool import Pool, context
    from .worker import load_worker

    ctx = context()
    first = tasks[0]
    rs, k = layout.record_size, first.nshards
    slots = SharedSlots(2 * len(tasks) + 2, first.batch_records * rs)
    free: queue.Queue = queue.Queue()
    for i in range(slots.nslots):
        free.put(i)
    pipes = [ctx.Pipe(duplex=False) for _ in tasks]
    inboxes = [send for _, send in pipes]

    def relay(msg: tuple) -> None:
        if msg[0] == "free":
            free.put(msg[1])
        elif on_message is not None:
            on_message(msg)

    pool = Pool(load_worker, tasks, extras=[(recv, slots) for recv, _ in pipes], on_progress=progress.advance,
                on_message=relay)
    total = {"records": 0}
    done = threading.Event()

    def feed() -> None:
        stream, owned = None, False
        try:
            stream, owned = source.open(stdin)  # a FIFO: waits here for its writer
            total["records"] = _feed(stream, source.name, slots, free, inboxes, k, first.first_seq,
                                     first.first_record, rs, done)
        except BaseException as e:
            pool.fail(e)  # before the workers can finish: the run must fail
            raise
        finally:
            if owned:
                stream.close()
            for inbox in inboxes:
                try:
                    inbox.send(None)
                except OSError:
                    pass  # the pool already stopped

    try:
        feeder = threading.Thread(target=_guarded, args=(feed,), name="stream-feeder", daemon=True)
        feeder.start()
        receipts = pool.run()
    finally:
        done.set()
        for _, send in pipes:
            send.close()
        for recv, _ in pipes:
            recv.close()
        feeder.join(0.5)
        if not feeder.is_alive():  # else it is blocked in read(): its view goes when the process exits
            slots.close()
    return receipts, total["records"]


def _guarded(fn) -> None:
    try:
        fn()
    except BaseException:
        pass  # already handed to the pool


def _feed(stream, name: str, slots: SharedSlots, free: queue.Queue, inboxes: list, k: int, seq: int,
          first: int, rs: int, done: threading.Event) -> int:
    """Read ``stream`` batch by batch into free slots and send each to its worker; returns the
    number of records read."""
    offset, total = 0, 0
    while not done.is_set():
        try:
            slot = free.get(timeout=0.2)
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
        inboxes[(seq % k) % len(inboxes)].send((seq, first, count, slot))
        seq, first, offset, total = seq + 1, first + count, offset + got, total + count
        if got < slots.slot_bytes:
            break
    return total


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


# --- the worker -----------------------------------------------------------------------------


def received_batches(inbox, slots: SharedSlots, record_size: int, ser, outbox, timings: dict):
    """(seq, first, count, (buf, records)) of each batch the feeder hands this worker, copied
    out of its slot (the slot goes back at once); ends at the feeder's end mark."""
    try:
        while True:
            try:
                msg = inbox.recv()
            except (EOFError, OSError):
                raise SystemExit("the coordinator stopped feeding records") from None
            if msg is None:
                return
            seq, first, count, slot = msg
            t = time.perf_counter()
            buf, recs = ser.new_buffer(count)
            with memoryview(recs).cast("B") as dst, slots.view(slot, count * record_size) as src:
                dst[:] = src
            outbox.put(("free", slot))
            timings["produce_s"] += time.perf_counter() - t
            yield seq, first, count, (buf, recs)
    finally:
        slots.close()
