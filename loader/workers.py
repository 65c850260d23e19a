"""Worker functions: plain module-level functions over (task, queues) that return receipts.

A load worker owns some shards (shard = seq mod K, worker = shard mod W) and runs the
three stages for the batches of those shards:

  produce   a thread fills each batch's records straight into the serializer's
            buffer (C generator in-process, pread from a file, or a copy out of the
            coordinator's shared-memory slot for stdin); bounded queue -> backpressure
  serialize frame (capnp: write a 40-byte header in front of the records) or Arrow IPC
  write     group batches per shard into one atomic put_sorted (LMDB append / RocksDB SST)

then syncs its shards and returns a receipt: the committed batch rows and stage timings.
The coordinator lists those batches in the manifest; until then they do not exist.
"""

from __future__ import annotations

import os
import queue
import resource
import signal
import threading
import time
from dataclasses import dataclass, field

import xxhash

from .layouts import Layout
from .serializers import get_serializer
from .stores.base import StoreSpec

GROUP_BYTES = 16 << 20
QUEUE_DEPTH = 4


def batch_key(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


@dataclass(frozen=True)
class LoadTask:
    store: StoreSpec
    worker: int
    workers: int
    nshards: int
    layout: dict
    format: str
    compression: str
    source: object | None  # GenSource | FileSource; None: batches arrive on `inbox` (stdin)
    first_seq: int
    first_record: int
    total: int | None
    batch_records: int
    source_offset: int = 0
    shard_bytes_hint: int = 0
    main_pid: int = 0
    store_options: tuple = field(default=())

    def owned_shards(self) -> list[int]:
        return [s for s in range(self.nshards) if s % self.workers == self.worker]

    def planned_batches(self):
        """(seq, first_record, count, source_offset) of this worker's batches, in seq order."""
        b, owned = self.batch_records, set(self.owned_shards())
        nb = -(-self.total // b)
        for i in range(nb):
            seq = self.first_seq + i
            if seq % self.nshards in owned:
                yield seq, self.first_record + i * b, min(b, self.total - i * b), self.source_offset + i * b


def _die_with_parent(main_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator handles Ctrl-C
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _parent_alive(pid: int) -> bool:
    if not pid:
        return True
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def load_worker(task: LoadTask, progress_q, inbox=None, free_slots=None, shm_name: str | None = None) -> dict:
    """Produce, serialize and write this worker's batches; return the receipt."""
    _die_with_parent(task.main_pid)
    layout = Layout.from_dict(task.layout)
    ser = get_serializer(task.format, layout, task.compression)
    rs = layout.record_size
    timings = {"produce_s": 0.0, "serialize_s": 0.0, "write_s": 0.0, "sync_s": 0.0}

    stores = {}
    extra = dict(task.store_options)
    if task.shard_bytes_hint:
        extra["map_size"] = str(int(task.shard_bytes_hint * 1.25) + (64 << 20))
    try:
        for s in task.owned_shards():
            opts = dict(task.store.options) | extra
            st = task.store.backend.open(task.store.shard_path(s), write=True, options=opts)
            stores[s] = st
            # Anything at or above first_seq is an uncommitted leftover of a failed run.
            st.delete_range(batch_key(task.first_seq), None)

        q: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
        stop = threading.Event()

        def produce():
            try:
                shm = None
                if inbox is not None:
                    from multiprocessing import shared_memory
                    shm = shared_memory.SharedMemory(name=shm_name)
                    _untrack(shm)
                    slot_bytes = task.batch_records * rs
                    while not stop.is_set():
                        msg = inbox.get()
                        if msg is None:
                            break
                        seq, first, count, slot = msg
                        t = time.perf_counter()
                        buf, recs = ser.new_buffer(count)
                        mv = memoryview(recs).cast("B")
                        mv[:] = shm.buf[slot * slot_bytes: slot * slot_bytes + count * rs]
                        del mv
                        free_slots.put(slot)
                        timings["produce_s"] += time.perf_counter() - t
                        _put(q, stop, (seq, first, count, buf, recs))
                    shm.close()
                else:
                    for seq, first, count, off in task.planned_batches():
                        if stop.is_set():
                            return
                        t = time.perf_counter()
                        buf, recs = ser.new_buffer(count)
                        task.source.fill(recs, off)
                        timings["produce_s"] += time.perf_counter() - t
                        _put(q, stop, (seq, first, count, buf, recs))
                _put(q, stop, None)
            except BaseException as e:  # hand the error to the writer thread
                _put(q, stop, e)

        producer = threading.Thread(target=produce, name="produce", daemon=True)
        producer.start()

        rows: list[list] = []
        groups: dict[int, list] = {s: [] for s in stores}
        group_bytes = {s: 0 for s in stores}
        group_rows: dict[int, list] = {s: [] for s in stores}

        def flush(s: int) -> None:
            if not groups[s]:
                return
            t = time.perf_counter()
            stores[s].put_sorted(groups[s], table="batches")
            timings["write_s"] += time.perf_counter() - t
            n = sum(r[3] for r in group_rows[s])
            rows.extend(group_rows[s])
            groups[s], group_rows[s], group_bytes[s] = [], [], 0
            progress_q.put(n)

        try:
            while True:
                item = q.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                seq, first, count, buf, recs = item
                t = time.perf_counter()
                value = ser.encode_buffer(buf, recs, first)
                checksum = xxhash.xxh3_64_intdigest(value)
                timings["serialize_s"] += time.perf_counter() - t
                s = seq % task.nshards
                groups[s].append((batch_key(seq), value))
                group_rows[s].append([seq, s, first, count, checksum, len(value)])
                group_bytes[s] += len(value)
                if group_bytes[s] >= GROUP_BYTES:
                    flush(s)
                    if not _parent_alive(task.main_pid):
                        raise SystemExit("coordinator died")
            for s in stores:
                flush(s)
            t = time.perf_counter()
            for st in stores.values():
                st.sync()
            timings["sync_s"] += time.perf_counter() - t
        finally:
            stop.set()
            deadline = time.monotonic() + 2
            while producer.is_alive() and time.monotonic() < deadline:  # unblock it
                try:
                    q.get_nowait()
                except queue.Empty:
                    producer.join(0.05)
    finally:
        for st in stores.values():
            st.close()
    rows.sort()
    return {
        "worker": task.worker,
        "pid": os.getpid(),
        "batches": rows,
        **{k: round(v, 4) for k, v in timings.items()},
        "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def _put(q: queue.Queue, stop: threading.Event, item) -> None:
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _untrack(shm) -> None:
    """Attached (not created) segments must not be unlinked by this process's tracker."""
    try:
        from multiprocessing import resource_tracker

        resource_tracker.unregister(shm._name, "shared_memory")
    except Exception:
        pass
