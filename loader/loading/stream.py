"""Stream sources (stdin, a FIFO, /dev/stdin, /dev/fd/N): the shared memory and the worker side.

A stream cannot be split or replayed, so a thread of the coordinator (the *feeder*,
feeder.py) reads it into the slots of one shared-memory area (`SharedSlots`), one batch
per slot, and tells the worker that owns the batch (seq mod K = shard, shard mod W =
worker) over that worker's inbox pipe: a `messages.StreamBatch`. The worker
(`received_batches`) copies the records out of the slot into its serializer's buffer and
hands the slot back at once through its outbox (`messages.FreeSlot`; the pool loop passes
it to the feeder). Record bytes never travel through a pipe; a bounded number of slots
(2 per worker + 2) keeps memory flat.

The shared memory is an anonymous file (``memfd_create``) that the workers receive as a
file descriptor when they start: it has no name in /dev/shm, so no run - finished,
failed, or SIGKILLed at any moment, coordinator or worker - leaves anything there, and
there is nothing to clean up; the kernel frees it when the last process holding it
exits. (Not ``multiprocessing.shared_memory``: under forkserver its resource tracker
prints ``KeyError: '/psm_...'`` tracebacks and a killed coordinator leaks
``/dev/shm/psm_*``.)

Crash behaviour: a worker that loses its inbox (the coordinator died or gave up) stops
without finishing (SystemExit), so nothing of the run is committed.
"""

from __future__ import annotations

import mmap
import os
import time

from .messages import FreeSlot, StageTimes


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
        return memoryview(self.map)[start : start + (self.slot_bytes if nbytes is None else nbytes)]

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
        from multiprocessing import reduction  # start-up: only a stream's pool pickles slots (a small load has none)

        return _attach, (reduction.DupFd(self.fd), self.nslots, self.slot_bytes)


def _attach(dup, nslots: int, slot_bytes: int) -> SharedSlots:
    return SharedSlots(nslots, slot_bytes, fd=dup.detach())


# --- the worker -----------------------------------------------------------------------------


def received_batches(inbox, slots: SharedSlots, record_size: int, ser, outbox, times: StageTimes):
    """(seq, first, count, (buf, records)) of each batch the feeder hands this worker (a
    `StreamBatch`), copied out of its slot (the slot goes back at once); ends at the
    feeder's end mark (None)."""
    try:
        while True:
            try:
                msg = inbox.recv()
            except (EOFError, OSError):
                raise SystemExit("the coordinator stopped feeding records") from None
            if msg is None:
                return
            t = time.perf_counter()
            buf, recs = ser.new_buffer(msg.count)
            with memoryview(recs.view("u1")) as dst, slots.view(msg.slot, msg.count * record_size) as src:
                dst[:] = src
            outbox.put(FreeSlot(msg.slot))
            times.produce_s += time.perf_counter() - t
            yield msg.seq, msg.first, msg.count, (buf, recs)
    finally:
        slots.close()
