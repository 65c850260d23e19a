"""Finalize step 2, the build worker: write every chunk of the shards it owns, once, in key order.

Build worker w of W owns the output shards s with s mod W == w (one writer per shard).
For each owned shard that receives records it opens the shard for writing (an LMDB map
sized once for what is coming: no growth steps), drops array tables that neither a
committed array nor the garbage list names (leftovers of crashed or replaced builds) and
any earlier attempt at its own table, then fills windows of whole chunks from its source
(build_sources.py: direct from the flat batches, or merged from spill runs) and hands
each to the ChunkEmitter (build_emit.py), which sorts, applies the duplicates policy,
encodes and appends. One sync per shard at the end. Its index rows and the pieces'
samples go to ``SPILL_DIR/index-WWW.rows`` and ``.samples`` (spill_files.py); the receipt (`BuildReceipt`) carries counts and timings.

Runs in a pool worker (``build_worker(task, progress_q)``, progress in records); it stops
when the coordinator is gone. A small finalize runs its build workers as threads of the
coordinator (finalize.py): they first open every shard they write, then read. Crash behaviour: it writes only the build's own table
(``array-NAME-RUNID``) and files in the spill directory, neither of which a manifest names
before the switch; the next finalize (or compact) drops and removes them.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from functools import cached_property

import numpy as np

from ..infra import faults
from ..infra.proc import cpu_seconds, minor_faults, parent_alive, peak_rss, start_worker
from ..model.chunk_index import TABLE_PREFIX
from ..model.layouts import Layout
from ..model.placement import owned_shards
from ..stores.write_guard import guard_write
from . import spill_files
from .build_emit import BuildStats, ChunkEmitter
from .build_sources import DirectSource, SpillSource
from .job import WorkerTask

#: LMDB map of a shard written by a build: existing bytes + 1.3 x the cells + this slack
MAP_SLACK = 64 << 20


@dataclass(frozen=True)
class BuildTask(WorkerTask):
    workers: int
    nshards: int
    cell_layout: dict
    policy: str
    array: str
    table: str
    keep_tables: tuple
    runs: tuple  # spill mode: SpillRun, in record-index order
    spill_dir: str
    budget: int
    max_piece: int
    # direct mode (no spill runs): the flat batches (manifest BatchEntry) in record order,
    # and per owned shard its windows (direct.Window, direct.plan_direct)
    batches: tuple = ()
    windows: dict | None = None

    @cached_property
    def cell_layout_obj(self) -> Layout:
        return Layout.from_dict(self.cell_layout)

    def owned_shards(self) -> list[int]:
        return owned_shards(self.nshards, self.workers, self.worker)


@dataclass(frozen=True)
class BuildReceipt:
    worker: int
    pid: int
    index: str | None  # SPILL_DIR/index-WWW: its .rows and .samples files (None: it wrote no piece)
    cells: int
    dropped: int
    dropped_hash: int
    pieces: int
    chunks: int
    seconds: float
    read_s: float
    sort_s: float
    encode_s: float
    write_s: float
    sync_s: float
    max_rss: int
    minflt: int
    cpu_s: float


def build_worker(task: BuildTask, progress_q, writers_open=None, decoded=None) -> BuildReceipt:
    """Build the chunks of the shards this worker owns. ``writers_open``: a
    ``threading.Barrier`` of the build workers run as threads of one process (see
    `_open_writers_first`), else None; ``decoded``: the records their scan kept
    (decoded.py; direct mode), else None."""
    t0 = time.perf_counter()
    start_worker(task)  # keeps freed heap for reuse (infra/heap.py): chunk values, LMDB's overflow pages
    timings = {"read_s": 0.0, "sort_s": 0.0, "encode_s": 0.0, "write_s": 0.0, "sync_s": 0.0}
    stats = BuildStats()
    em = ChunkEmitter(task, timings, stats)
    src = DirectSource(task, em, timings, decoded) if task.windows is not None else SpillSource(task, em, timings)
    shards = [s for s in task.owned_shards() if src.incoming(s)]
    opened = _open_writers_first(task, shards, em, src, writers_open)
    try:
        for s in shards:
            st = opened.pop(s, None) or _open_shard(task, s, src.incoming(s) * em.crs)
            _build_shard(task, s, st, em, src, progress_q)
    finally:
        for st in opened.values():
            st.close()
        src.close()
    path = None
    if em.index_rows:
        path = os.path.join(task.spill_dir, f"index-{task.worker:03d}")
        spill_files.save(path + ".rows", np.array(em.index_rows, dtype=em.idt))
        spill_files.save(path + ".samples", np.concatenate(em.samples))
    return BuildReceipt(
        task.worker,
        os.getpid(),
        path,
        **asdict(stats),
        seconds=round(time.perf_counter() - t0, 4),
        read_s=round(timings["read_s"], 4),
        sort_s=round(timings["sort_s"], 4),
        encode_s=round(timings["encode_s"], 4),
        write_s=round(timings["write_s"], 4),
        sync_s=round(timings["sync_s"], 4),
        max_rss=peak_rss(),
        minflt=minor_faults(),
        cpu_s=cpu_seconds(),
    )


def _open_writers_first(task: BuildTask, shards: list[int], em: ChunkEmitter, src, writers_open) -> dict:
    """With ``writers_open`` (build workers run as threads of one process): every shard this
    worker owns opened for writing, then the wait until every other worker has opened its
    own, before anything is read. A process has one LMDB environment per shard, shared by
    its readers and its writer (stores/lmdb_env.py): a reader opened first would make it
    read-only and the writer's open fail; once open, other threads only read it (read
    transactions never wait for the writer). Without: nothing (each shard is opened in turn)."""
    if writers_open is None:
        return {}
    opened: dict = {}
    try:
        for s in shards:
            opened[s] = _open_shard(task, s, src.incoming(s) * em.crs)
            # and the handle of its flat batches, now: py-lmdb opens a table's handle in a
            # writable environment inside a write transaction, holding the GIL - in another
            # thread, during this worker's writes, that is a deadlock
            opened[s].has_table("batches")
        writers_open.wait()
    except BaseException:
        writers_open.abort()  # the other workers stop waiting (BrokenBarrierError)
        for st in opened.values():
            st.close()
        raise
    return opened


def _open_shard(task: BuildTask, s: int, incoming_bytes: int):
    """Shard ``s`` opened for writing; an LMDB map sized once for what is coming."""
    store = task.job.store
    path = store.shard_path(s)
    data = os.path.join(path, "data.mdb")
    existing = os.path.getsize(data) if os.path.exists(data) else 0
    opts = dict(store.options)
    if store.scheme in ("lmdb", "mem"):  # size the map once: no growth steps
        opts["map_size"] = str(existing + int(incoming_bytes * 1.3) + MAP_SLACK)
    return store.backend.open(path, write=True, options=opts)


def _build_shard(task: BuildTask, s: int, st, em: ChunkEmitter, src, progress_q) -> None:
    """Write every chunk of shard ``s`` (open as ``st``, closed here) and sync it."""
    try:
        for t_name in st.tables():  # leftovers of crashed or replaced builds
            if t_name.startswith(TABLE_PREFIX) and t_name not in task.keep_tables:
                st.drop_table(t_name)
        st.drop_table(task.table)
        em.start_shard(st, s, src.incoming(s))
        for n in src.windows(s, st):
            progress_q.put(n)
            if not parent_alive(task.main_pid):
                raise SystemExit("coordinator died")
        em.flush_group()
        src.close_readers()
        t = time.perf_counter()
        guard_write(task.job.store, s, st.sync)
        em.timings["sync_s"] += time.perf_counter() - t
        faults.hit("synced")
    finally:
        em.end_shard()
        src.close_readers()
        st.close()
