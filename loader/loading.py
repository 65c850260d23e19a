"""`load`: one run that appends a source's records to a dataset, all or nothing.

1. parse and check everything (source, dataset, layout, format) before touching data;
2. lock the dataset (one writing job at a time) and read its manifest;
3. plan batches (seq, first record, count), deal them to shard owners;
4. run the workers (they sync their shards before reporting);
5. commit: list the new batches in the manifest, atomically.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import asdict, dataclass, field

from . import manifest as mf
from .errors import (BulkloadError, DatasetMismatchError, MissingPathError, NotWritableError,
                     UsageError)
from .layouts import Layout, get_layout
from .lock import DatasetLock
from .pool import Pool, in_thread
from .progress import Progress
from .serializers import get_serializer
from .sources import FileSource, GenSource, StdinSource, parse_source
from .stores.base import MEM_ROOT, StoreSpec, parse_dataset_uri
from .workers import LoadTask, load_worker

DEFAULT_BATCH_RECORDS = 10_000
FORMATS = ("capnp", "arrow")
COMPRESSIONS = ("none", "lz4", "zstd")


@dataclass
class LoadReport:
    dataset: str
    source: str
    run_id: str
    records: int
    bytes: int
    stored_bytes: int
    batches: int
    shards: int
    workers: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    format: str
    compression: str
    layout: str
    stages: dict = field(default_factory=dict)
    peak_rss_bytes: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def prepare_root(spec: StoreSpec) -> None:
    """Create the dataset directory; its parent must exist and be writable."""
    if spec.scheme == "mem":
        os.makedirs(MEM_ROOT, exist_ok=True)
    parent = os.path.dirname(spec.root.rstrip("/")) or "/"
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise UsageError(f"{parent} is not a directory (needed for dataset {spec.uri})")
    if not os.path.isdir(parent):
        raise MissingPathError(f"directory {parent} does not exist (needed for dataset {spec.uri}); "
                               f"create it first: mkdir -p {parent}")
    if not os.path.isdir(spec.root):
        try:
            os.mkdir(spec.root)
        except PermissionError:
            raise NotWritableError(f"cannot create dataset {spec.uri}: directory {parent} is not writable; "
                                   "choose a writable location") from None
        except FileExistsError:
            raise UsageError(f"dataset path {spec.root} exists and is not a directory") from None
        except OSError as e:
            raise NotWritableError(f"cannot create dataset {spec.uri}: {e.strerror}; "
                                   "choose a writable location") from None
    if not os.access(spec.root, os.W_OK):
        raise NotWritableError(f"dataset directory {spec.root} is not writable; fix its permissions "
                               "or choose another location")


def check_compatible(m: mf.Manifest, spec: StoreSpec, layout: Layout, fmt: str, compression: str,
                     shards: int) -> None:
    if not m.batches:
        return  # an empty dataset can be redefined
    wrong = []
    if m.layout["name"] != layout.name or m.layout["fields"] != layout.to_dict()["fields"]:
        wrong.append(f"layout {m.layout['name']!r} (not {layout.name!r})")
    if m.format != fmt:
        wrong.append(f"format {m.format!r} (not {fmt!r})")
    if m.compression != compression:
        wrong.append(f"compression {m.compression!r} (not {compression!r})")
    if m.shards != shards:
        wrong.append(f"{m.shards} shards (not {shards})")
    if m.scheme != spec.scheme:
        wrong.append(f"store {m.scheme} (not {spec.scheme})")
    if wrong:
        raise DatasetMismatchError(
            f"dataset {spec.uri} already holds records with " + ", ".join(wrong)
            + "; load into a new dataset, or drop the conflicting option to append"
        )


def load(source: str, dataset: str, *, layout: str | None = None, format: str | None = None,
         compression: str | None = None, shards: int | None = None, workers: int | None = None,
         batch_records: int | None = None, progress: str = "none", stdin=None) -> LoadReport:
    """Append the records of ``source`` to ``dataset``; returns the run's report."""
    t_start = time.perf_counter()
    spec = parse_dataset_uri(dataset)
    existing = mf.load_manifest(spec.root) if mf.exists(spec.root) else None

    # --- resolve options: explicit > URI > existing dataset > defaults ---------------
    layout_obj = get_layout(layout) if layout else None
    src = parse_source(source, layout_obj)
    if layout_obj is None:
        if isinstance(src, GenSource):
            layout_obj = get_layout(src.layout)
        elif existing is not None:
            layout_obj = existing.layout_obj
        else:
            layout_obj = get_layout("scidb96")
    fmt = format or (existing.format if existing and existing.batches else "capnp")
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    comp = compression or (existing.compression if existing and existing.batches else "none")
    if comp not in COMPRESSIONS:
        raise UsageError(f"unknown compression {comp!r}; use one of {', '.join(COMPRESSIONS)}")
    get_serializer(fmt, layout_obj, comp)  # rejects unsupported combinations
    if shards is not None and spec.shards is not None and shards != spec.shards:
        raise UsageError(f"--shards {shards} contradicts ?shards={spec.shards} in {dataset}")
    k = shards or spec.shards or (existing.shards if existing and existing.batches else None) or default_workers()
    if not 1 <= k <= 1024:
        raise UsageError("--shards must be between 1 and 1024")
    w_req = default_workers() if workers is None else workers
    if w_req < 1:
        raise UsageError("--workers must be at least 1")
    b = batch_records if batch_records is not None else (existing.batch_records if existing and existing.batches else DEFAULT_BATCH_RECORDS)
    if b < 1:
        raise UsageError("--batch-records must be at least 1")
    total = src.count(layout_obj)  # a partial trailing record fails here, before any write
    spec = spec.with_shards(k)

    prepare_root(spec)
    with DatasetLock(spec.root) as lock:
        lock.set_job(f"load {src.uri}")
        m = mf.load_manifest(spec.root) if mf.exists(spec.root) else None
        if m is not None:
            check_compatible(m, spec, layout_obj, fmt, comp, k)
        if m is None or not m.batches:
            keep = {"runs": m.runs, "dataset_id": m.dataset_id, "created": m.created} if m else {}
            m = mf.Manifest(layout=layout_obj.to_dict(), format=fmt, compression=comp,
                            scheme=spec.scheme, shards=k, batch_records=b, **keep)
        run = mf.new_run("load", source=src.uri, workers=None)
        m.runs.append(run)
        m.save(spec.root)

        nworkers = max(1, min(w_req, k))
        run["workers"] = nworkers
        rs = layout_obj.record_size
        shard_hint = (total * rs // k) if total is not None else 0
        tasks = [LoadTask(store=spec, worker=w, workers=nworkers, nshards=k, layout=layout_obj.to_dict(),
                          format=fmt, compression=comp,
                          source=None if isinstance(src, StdinSource) else src,
                          first_seq=m.next_seq, first_record=m.next_record, total=total,
                          batch_records=b, shard_bytes_hint=shard_hint, main_pid=os.getpid())
                 for w in range(nworkers)]
        try:
            with Progress("load", total, rs, mode=progress) as prog:
                if isinstance(src, StdinSource):
                    receipts, total = _run_stdin(tasks, prog, stdin, layout_obj)
                else:
                    pool = Pool(load_worker, tasks, on_progress=prog.advance)
                    receipts = pool.run()
        except BaseException as e:
            run.update(status="failed", ended=time.time(),
                       error=str(e) if isinstance(e, BulkloadError) else f"{type(e).__name__}: {e}")
            m.save(spec.root)
            raise

        # --- commit -------------------------------------------------------------------
        rows = sorted(r for rc in receipts for r in rc["batches"])
        m.batches.extend(mf.BatchEntry(*r) for r in rows)
        seconds = time.perf_counter() - t_start
        stages = {k2: round(max(rc[k2] for rc in receipts), 3)
                  for k2 in ("produce_s", "serialize_s", "write_s", "sync_s")} if receipts else {}
        nrec = sum(r[3] for r in rows)
        run.update(status="done", ended=time.time(), records=nrec, batches=len(rows),
                   seconds=round(seconds, 3), first_seq=tasks[0].first_seq)
        m.save(spec.root)

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 + sum(rc["max_rss"] for rc in receipts)
    nbytes = nrec * rs
    return LoadReport(
        dataset=spec.uri, source=src.uri, run_id=run["id"], records=nrec, bytes=nbytes,
        stored_bytes=sum(r[5] for r in rows), batches=len(rows), shards=k, workers=nworkers,
        seconds=round(seconds, 4), records_per_s=round(nrec / seconds, 1),
        mb_per_s=round(nbytes / seconds / 1e6, 2), format=fmt, compression=comp,
        layout=layout_obj.name, stages=stages, peak_rss_bytes=peak,
    )


def _run_stdin(tasks: list[LoadTask], prog: Progress, stdin, layout: Layout) -> tuple[list, int]:
    """Read stdin in the coordinator into shared-memory slots; workers take them from there."""
    import sys
    from multiprocessing import shared_memory

    from .pool import context
    from .errors import PartialRecordError

    ctx = context()
    t0 = tasks[0]
    rs, b, k = layout.record_size, t0.batch_records, t0.nshards
    nslots = 2 * len(tasks) + 2
    slot_bytes = b * rs
    shm = shared_memory.SharedMemory(create=True, size=max(1, nslots * slot_bytes))
    free_slots = ctx.Queue()
    for i in range(nslots):
        free_slots.put(i)
    inboxes = [ctx.Queue(maxsize=nslots) for _ in tasks]
    pool = Pool(load_worker, tasks, extras=[(inbox, free_slots, shm.name) for inbox in inboxes],
                on_progress=prog.advance)
    stream = stdin if stdin is not None else sys.stdin.buffer
    result = {"total": 0}

    def feed():
        seq, first, offset = t0.first_seq, t0.first_record, 0
        try:
            while True:
                slot = free_slots.get()
                mv = shm.buf[slot * slot_bytes:(slot + 1) * slot_bytes]
                got = _read_full(stream, mv)
                del mv
                if got % rs:
                    raise PartialRecordError("<stdin>", offset + got - got % rs, rs, got % rs)
                if got == 0:
                    break
                count = got // rs
                inboxes[(seq % k) % len(tasks)].put((seq, first, count, slot))
                seq, first, offset = seq + 1, first + count, offset + got
                result["total"] += count
                if got < slot_bytes:
                    break
        except BaseException as e:
            pool.fail(e)  # before the workers can finish: the run must fail
            raise
        finally:
            for inbox in inboxes:
                inbox.put(None)

    try:
        in_thread(feed, pool)
        receipts = pool.run()
    finally:
        shm.close()
        shm.unlink()
    return receipts, result["total"]


def _read_full(stream, mv: memoryview) -> int:
    got = 0
    while got < len(mv):
        k = stream.readinto(mv[got:])
        if not k:
            break
        got += k
    return got
