"""Worker functions: plain module-level functions over (task, queues) that return receipts.

A load worker owns some shards (shard = seq mod K, worker = shard mod W) and runs the
three stages for the batches of those shards:

  produce   a thread fills each batch's records straight into the serializer's
            buffer (C generator in-process, pread from a file, or a copy out of the
            coordinator's shared-memory slot for a stream); bounded queue -> backpressure
  serialize frame (capnp: write a 40-byte header in front of the records) or Arrow IPC
  write     group batches per shard into one atomic put_sorted (LMDB append / RocksDB SST)

What a batch is (records in a numpy buffer -> one value; or documents -> one value per
id) is the layout's *record kind* (record_kinds.py); this loop is the same for both.

then syncs its shards and returns a receipt: the written batch rows and stage timings.
Every ``checkpoint_seconds`` / ``checkpoint_bytes`` it also syncs what it wrote so far and
sends the coordinator a checkpoint (the synced rows), which records them in the manifest
as the run's *pending* batches: not visible to readers, but kept by a resumed run.
The coordinator lists batches in the manifest's committed list once the whole unit (the
run for `load`, the file for `ingest`) is synced; until then they do not exist.
"""

from __future__ import annotations

import heapq
import os
import queue
import threading
import time
from dataclasses import dataclass, field

from ..infra import faults
from ..infra.proc import parent_alive, peak_rss, start_worker
from ..kinds import kind_for
from ..model.layouts import Layout
from ..model.placement import owned_shards
from ..stores.registry import open_writer
from ..stores.spec import StoreSpec
from .stream import received_batches

GROUP_BYTES = 16 << 20
QUEUE_DEPTH = 4


@dataclass(frozen=True)
class Segment:
    """A contiguous part of a plan: ``count`` records of ``source`` from source record
    ``offset``, stored as batches ``first_seq``.. holding dataset records ``first_record``..
    A load is one segment; a directory ingest is one segment per file."""

    source: object  # GenSource | FileSource
    count: int
    first_seq: int
    first_record: int
    offset: int = 0

    def nbatches(self, b: int) -> int:
        return -(-self.count // b)


@dataclass(frozen=True)
class LoadTask:
    store: StoreSpec
    worker: int
    workers: int
    nshards: int
    layout: dict
    format: str
    compression: str
    segments: tuple  # of Segment; empty: batches arrive on `inbox` (a stream)
    first_seq: int
    first_record: int
    batch_records: int
    resume: tuple = ()  # per shard: first seq to write (its batches below are kept); () = first_seq
    shard_bytes_hint: int = 0
    main_pid: int = 0
    store_options: tuple = field(default=())
    checkpoint_bytes: int = 1 << 30  # sync + report synced batches after this many bytes ...
    checkpoint_seconds: float = 10.0  # ... or this many seconds, whichever comes first
    fault: str = ""  # BULKLOAD_FAULT of the job (see faults.py)
    table: str = "batches"  # keyed records: the run's table (docs-RUNID)
    keep_tables: tuple = ()  # keyed records: tables of committed batches (others are leftovers)
    clear_from: int = -1  # keyed records, shared table: a fresh run first deletes keys >= this id
    must_exist: tuple = ()  # shards holding committed batches: never created afresh (integrity.py)

    def owned_shards(self) -> list[int]:
        return owned_shards(self.nshards, self.workers, self.worker)

    def resume_seq(self, shard: int) -> int:
        return self.resume[shard] if self.resume else self.first_seq

    def planned_batches(self):
        """(seq, first_record, count, source, source_offset) of this worker's batches still
        to write, in seq order: computed per owned shard (no walk over other workers' batches)."""
        b = self.batch_records
        for seg in self.segments:
            lo, hi = seg.first_seq, seg.first_seq + seg.nbatches(b)
            runs = [shard_seqs(max(lo, self.resume_seq(s)), hi, s, self.nshards) for s in self.owned_shards()]
            for seq in heapq.merge(*runs):
                i = seq - lo
                yield (seq, seg.first_record + i * b, min(b, seg.count - i * b), seg.source, seg.offset + i * b)


def shard_seqs(lo: int, hi: int, shard: int, nshards: int) -> range:
    """The seqs in [lo, hi) of batches stored on ``shard`` (seq mod K), ascending."""
    return range(lo + (shard - lo) % nshards, max(lo, hi), nshards)


def load_worker(task: LoadTask, progress_q, inbox=None, slots=None) -> dict:
    """Produce, serialize and write this worker's batches; return the receipt.

    ``progress_q``: the worker's outbox (pool.Outbox); ``inbox``, ``slots``: for a stream,
    the pipe its batches arrive on and the shared memory they are in (streams.py)."""
    start_worker(task)
    layout = Layout.from_dict(task.layout)
    writer = kind_for(layout, task.format, task.compression).writer(task)
    keyed = writer.kind.keyed
    skipped: list[dict] = []
    timings = {"produce_s": 0.0, "serialize_s": 0.0, "write_s": 0.0, "sync_s": 0.0}

    stores = {}
    extra = dict(task.store_options)
    if task.shard_bytes_hint and "map_size" not in dict(task.store.options):
        extra["map_size"] = str(int(task.shard_bytes_hint * 1.25) + (64 << 20))
    try:
        for s in task.owned_shards():
            opts = dict(task.store.options) | extra
            if s in task.must_exist:  # gone since the coordinator looked: do not re-create it empty
                from ..stores.health import check_shard

                damage = check_shard(task.store, s)
                if damage is not None:
                    raise damage.error(writing=True)
            stores[s] = st = open_writer(task.store, s, opts)
            # leftovers of failed runs go first (what is below the resume point is kept)
            _guard(task.store, s, lambda: writer.prepare(s, st))

        q: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
        stop = threading.Event()

        def produce():
            try:
                if inbox is not None:  # a stream: batches arrive from the coordinator (streams.py)
                    batches = received_batches(inbox, slots, layout.record_size, writer.ser, progress_q, timings)
                else:
                    batches = _planned(task, writer, timings)
                for item in batches:
                    if stop.is_set():
                        return
                    _put(q, stop, item)
                _put(q, stop, None)
            except BaseException as e:  # hand the error to the writer thread
                _put(q, stop, e)

        producer = threading.Thread(target=produce, name="produce", daemon=True)
        producer.start()

        rows: list[list] = []
        groups: dict[int, list] = {s: [] for s in stores}
        group_bytes = {s: 0 for s in stores}
        group_rows: dict[int, list] = {s: [] for s in stores}

        unsynced: list[list] = []  # rows written since the last checkpoint
        ckpt = {"bytes": 0, "t": time.monotonic()}

        def flush(s: int) -> None:
            if not group_rows[s]:  # (a batch whose files were all skipped has a row, no items)
                return
            t = time.perf_counter()
            if groups[s]:
                _guard(task.store, s, lambda: stores[s].put_sorted(groups[s], table=writer.table))
            timings["write_s"] += time.perf_counter() - t
            faults.hit("flush")
            # rows: manifest.BatchEntry fields; keyed: r[8] documents stored, r[10] bytes of text
            n = sum(r[8] if keyed else r[3] for r in group_rows[s])
            rows.extend(group_rows[s])
            unsynced.extend(group_rows[s])
            ckpt["bytes"] += group_bytes[s]
            text = sum(r[10] for r in group_rows[s]) if keyed else None
            groups[s], group_rows[s], group_bytes[s] = [], [], 0
            progress_q.put(("progress", n, text) if keyed else n)

        def sync_all() -> None:
            t = time.perf_counter()
            for s, st in stores.items():
                _guard(task.store, s, st.sync)
            timings["sync_s"] += time.perf_counter() - t
            faults.hit("sync")

        def checkpoint() -> None:
            """Make what was written durable and tell the coordinator which batches it is."""
            for s in stores:
                flush(s)
            if unsynced:
                sync_all()
                progress_q.put(("checkpoint", task.worker, list(unsynced)))
                unsynced.clear()
            ckpt["bytes"], ckpt["t"] = 0, time.monotonic()

        try:
            while True:
                item = q.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                seq, first, count, payload = item
                t = time.perf_counter()
                s = seq % task.nshards
                # keyed: may write the shard's zstd dictionary (first batch) - a store write
                items, row, _nbytes, bad = _guard(
                    task.store, s, lambda: writer.encode(seq, first, count, payload, s, stores[s])
                ) if keyed else writer.encode(seq, first, count, payload, s)
                skipped.extend(bad)
                timings["serialize_s"] += time.perf_counter() - t
                faults.hit("batch")
                groups[s].extend(items)
                group_rows[s].append(row)
                group_bytes[s] += row[5]
                if group_bytes[s] >= GROUP_BYTES:
                    flush(s)
                    if not parent_alive(task.main_pid):
                        raise SystemExit("coordinator died")
                if (ckpt["bytes"] + sum(group_bytes.values()) >= task.checkpoint_bytes
                        or time.monotonic() - ckpt["t"] >= task.checkpoint_seconds):
                    checkpoint()
                    if not parent_alive(task.main_pid):
                        raise SystemExit("coordinator died")
            for s in stores:
                flush(s)
            sync_all()
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
        "skipped": skipped,
        "map_grows": sum(getattr(st, "grows", 0) for st in stores.values()),
        **{k: round(v, 4) for k, v in timings.items()},
        "max_rss": peak_rss(),
    }


def _planned(task: LoadTask, writer, timings: dict):
    """(seq, first, count, payload) of this worker's planned batches, produced in turn."""
    for seq, first, count, source, off in task.planned_batches():
        t = time.perf_counter()
        payload = writer.produce(seq, first, count, source, off)
        timings["produce_s"] += time.perf_counter() - t
        yield seq, first, count, payload


def _guard(spec: StoreSpec, s: int, fn):
    """Run a store write; an OS-level failure (disk full, file size limit, I/O error)
    becomes a one-line StoreError that says the committed state is intact."""
    from ..errors import BulkloadError, StoreError

    try:
        return fn()
    except BulkloadError as e:
        if isinstance(e, StoreError):
            text = e.strerror if e.strerror else str(e)
            raise StoreError(f"{text}; the dataset is unchanged since its last commit - "
                             "fix the cause and re-run the same command to resume") from None
        raise
    except Exception as e:  # lmdb.Error, rocksdict exceptions, OSError
        text = str(e).strip() or type(e).__name__
        raise StoreError(f"shard {s} ({spec.shard_path(s)}): write failed: {text}; the dataset is "
                         "unchanged since its last commit - free space (or raise the file size "
                         "limit) and re-run the same command to resume") from None


def _put(q: queue.Queue, stop: threading.Event, item) -> None:
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            continue

