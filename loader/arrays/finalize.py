"""Redimension: turn a dataset's flat records into a 2-D chunked, indexed array, out of core
(scan -> direct or spill -> build -> commit). Storage, windows, small finalizes as threads,
crash safety and kill points, duplicates: docs/design/finalize.md."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ..errors import BulkloadError, InputError, NoSpaceError, StoreError, UsageError, WorkerError
from ..infra import executors, faults, interrupts
from ..infra.fsatomic import mkdir_inside
from ..infra.lock import DatasetLock
from ..infra.progress import Progress
from ..infra.space import check_space
from ..infra.threads import TaskThread
from ..kinds import kind_for
from ..maintain.compact import compact_locked
from ..maintain.garbage import (
    check_keep_snapshots,
    collect_garbage,
    collect_index_garbage,
    held_tables,
    retire_array,
    set_keep_snapshots,
    start_writing,
)
from ..maintain.report import NOTHING_TO_DO
from ..model import manifest as mf
from ..model.chunk_index import (
    INDEX_DIR,
    TABLE_PREFIX,
    index_columns,
    index_file,
    sample_counts,
    warm_up_writer,
    write_index,
)
from ..model.layouts import Layout
from ..model.options import MAX_WORKERS, check_count, default_workers
from ..model.optspec import DEFAULT_ARRAY
from ..model.runs import FinalizeRun, need, new_run, save_stopped
from ..model.runs import stop as stop_run
from ..serializers import get_serializer
from ..stores.health import require_shards
from ..stores.registry import open_in_this_process
from ..stores.spec import StoreSpec, parse_dataset_uri
from ..stores.write_guard import out_of_space, reclaim_space, trim_tails
from . import spill_files
from .build import BuildTask, build_worker
from .build_emit import SAMPLE_DTYPE
from .chunks import KEY_FORMAT, SHARD_MAP
from .decoded import Decoded
from .direct import direct_window_records, plan_direct
from .job import ArrayJob
from .partition import PartitionTask, partition_worker
from .report import FinalizeReport, IndexTotals, stage_figures, worker_peak_rss
from .scan import ENTRY_DTYPE, MAX_SCAN_ENTRIES, ScanTask, scan_worker
from .spec import ArraySpec, make_spec

STRATEGIES = ("auto", "direct", "spill")
#: bytes of memory per worker: its whole process (peak RSS), from 128 MiB up
DEFAULT_MEMORY_BUDGET = 512 << 20
MIN_MEMORY_BUDGET = 4096
#: what a worker holds besides its record buffers: the interpreter, numpy, pyarrow and the
#: stores' libraries (40-55 MiB of RSS measured, 20M scidb96 records), with room to spare
WORKER_RESERVE = 96 << 20
#: a finalize of at most this many bytes of records runs in-process (see above)
SMALL_FINALIZE_BYTES = 128 << 20
#: most cells per stored piece for formats without a size limit (Arrow)
MAX_PIECE_CELLS = 1 << 22
SPILL_PREFIX = ".finalize-"
#: what a finalize that stopped early leaves
UNCHANGED = "the arrays are unchanged; re-run the same command to finalize"


@dataclass(frozen=True)
class FinalizeOptions:
    """finalize()'s arguments, as given."""

    dims: object
    array: str
    duplicates: str
    workers: int | None
    compact: bool
    progress: str
    memory_budget: int | None
    strategy: str
    compression: str | None = None  # of the array's chunk pieces (None: "none")
    force: bool = False  # rebuild an array that is up to date
    keep_snapshots: int | None = None  # the dataset's retention of old generations (garbage.set_keep_snapshots)


@dataclass(frozen=True)
class FinalizePlan:
    """What a finalize will do, checked before the dataset is locked."""

    options: FinalizeOptions
    array: ArraySpec
    cell: Layout
    workers: int  # requested workers of each phase (--workers, else the cores)
    budget: int  # bytes per worker: its peak RSS
    buffers: int  # of which its record buffers (buffer_budget)
    max_piece: int  # cells per stored piece
    fault: str  # BULKLOAD_FAULT of the job
    compression: str = "none"  # of the array's chunk pieces


@dataclass
class _Build:
    """One finalize run under the dataset lock: where it writes and what its phases gave."""

    spec: StoreSpec
    m: mf.Manifest
    plan: FinalizePlan
    run: FinalizeRun  # the manifest's run entry
    table: str
    spill: str  # the run's spill directory
    compact_report: dict | None  # the compaction's report (to_dict())
    flat: list = field(default_factory=list)  # committed batches in record order
    groups: list = field(default_factory=list)  # contiguous batch ranges of the scan/partition workers
    phase_seconds: dict = field(default_factory=dict)
    windows: dict | None = None  # the direct plan; None: spill
    why: str = "strategy spill"
    scan: list = field(default_factory=list)  # receipts of each phase
    partition: list = field(default_factory=list)
    build: list = field(default_factory=list)
    runs: tuple = ()  # SpillRun of every partition worker
    in_process: bool = False  # the phases' tasks run as threads of this process
    decoded: Decoded | None = None  # in-process, direct: the records the scan kept, for the build

    @property
    def nbuild(self) -> int:
        return max(1, min(self.plan.workers, self.m.shards))

    def job(self) -> ArrayJob:
        a = self.plan.array
        return ArrayJob(
            self.spec,
            self.m.layout,
            self.m.format,
            self.m.compression,
            a.dims,
            a.chunks,
            os.getpid(),
            self.plan.fault,
            cell_compression=self.plan.compression,
        )

    def progress(self, phase: str) -> Progress:
        return Progress(
            f"finalize {self.plan.array.name}: {phase}",
            self.m.records,
            self.m.layout_obj.record_size,
            mode=self.plan.options.progress,
        )


def finalize(
    dataset_uri: str,
    dims=None,
    array: str = DEFAULT_ARRAY,
    duplicates: str = "error",
    workers: int | None = None,
    compact: bool = True,
    progress: str = "none",
    memory_budget: int | None = None,
    strategy: str = "auto",
    compression: str | None = None,
    force: bool = False,
    keep_snapshots: int | None = None,
) -> FinalizeReport:
    """Compact (unless ``compact=False``) and redimension the dataset into a 2-D array.

    ``strategy``: ``auto`` (default: direct when the records of each window of chunks sit
    in few batches, else spill), ``direct`` (direct whenever the chunk boxes allow it) or
    ``spill`` (always partition into spill runs); see the module docstring.
    ``compression``: of the array's chunk pieces, ``none`` (default, whatever the flat
    batches use: a box query reads a piece zero-copy; compressed, it decompresses the
    whole piece, ~70 x slower for a 1,000-cell box), ``lz4`` or ``zstd``.

    ``dims``: None takes the layout's default (scidb96: ``i0:10,i1:100000``; other layouts
    have none: a UsageError asks for them).

    An array that is up to date (built from every record, with these dims, chunks,
    duplicates policy and compression) is not rebuilt unless ``force``: nothing is written,
    no run is recorded, and the report's ``status`` is ``nothing-to-do`` (its figures are
    the array's). Its compaction is done first (unless ``compact=False``) when it has work.

    Returns a FinalizeReport (``to_dict()`` for JSON). Raises UsageError for bad
    dims/options (nothing touched), DuplicateCellError under ``duplicates="error"``
    (nothing committed). ``keep_snapshots``: from now on keep the data of that many
    generations before the current one readable (`as_of`; maintain/garbage.set_keep_snapshots).
    """
    t_start = time.perf_counter()
    spec = parse_dataset_uri(dataset_uri)
    m = mf.load_manifest(spec.root, dataset_uri)
    plan = _plan(
        m,
        FinalizeOptions(
            dims,
            array,
            duplicates,
            workers,
            compact,
            progress,
            memory_budget,
            strategy,
            compression,
            force,
            keep_snapshots,
        ),
    )
    spec.backend  # noqa: B018 - imported first: it would wait ~0.1 s for the thread's pyarrow import
    # imports pyarrow for the index file, beside the phases; never left running when this
    # returns: a thread inside pyarrow when the interpreter exits aborts the process
    # ("terminate called without an active exception", SIGABRT)
    warm_up = TaskThread(warm_up_writer)
    check_space(spec.root, _min_build_bytes(m, plan), f"finalize of {m.records:,} records into array {array!r}")
    try:
        with DatasetLock(spec.root) as lock:
            lock.set_job(f"finalize {array}")
            b = _begin(spec, dataset_uri, plan)
            current = None if plan.options.force else up_to_date(b.m, plan)
            if current is not None:
                return _nothing_to_do(b, current, t_start)
            warm_up.start()
            rows = _build_array(b)
            totals = IndexTotals.of(rows, plan.array.dims)
            summary = _commit(b, totals, t_start)
    finally:
        warm_up.ended(None)
    return _report(b, summary, totals, t_start)


def _plan(m: mf.Manifest, opts: FinalizeOptions) -> FinalizePlan:
    return plan_finalize(m.layout_obj, m.format, opts)


def plan_finalize(layout: Layout, format: str, opts: FinalizeOptions) -> FinalizePlan:
    """Check every option (UsageError, nothing touched) and fix what a finalize of records
    of ``layout`` stored in ``format`` will do (a pipeline checks its [finalize] with it
    before its first step: api/pipeline_check.py)."""
    aspec = make_spec(layout, opts.dims, opts.array, opts.duplicates)
    check_count("--workers", opts.workers, 1, MAX_WORKERS)
    check_keep_snapshots(opts.keep_snapshots)
    if opts.strategy not in STRATEGIES:
        raise UsageError(f"strategy {opts.strategy!r} is unknown; use one of {', '.join(STRATEGIES)}")
    fault = faults.from_env()
    budget = DEFAULT_MEMORY_BUDGET if opts.memory_budget is None else int(opts.memory_budget)
    if budget < MIN_MEMORY_BUDGET:
        raise UsageError(f"memory budget {budget} bytes is too small; give at least {MIN_MEMORY_BUDGET}")
    w_req = int(opts.workers) if opts.workers else default_workers()
    cell = aspec.cell_layout()
    compression = opts.compression or "none"
    cser = get_serializer(format, cell, compression)  # rejects impossible combinations
    max_piece = max(1, min(cser.max_records or MAX_PIECE_CELLS, MAX_PIECE_CELLS))
    return FinalizePlan(opts, aspec, cell, w_req, budget, buffer_budget(budget), max_piece, fault, compression)


def _min_build_bytes(m: mf.Manifest, plan: FinalizePlan) -> int:
    """A lower bound of what the new array's chunks take in the stores: every record is a
    cell (policies error and keep; first and last may drop some: 0), stored as the cell
    kind's `min_stored_bytes` (the old build is freed only when the manifest switches)."""
    if plan.array.policy not in ("error", "keep"):
        return 0
    return kind_for(plan.cell, m.format, plan.compression).min_stored_bytes(None, m.records)


def buffer_budget(budget: int) -> int:
    """Bytes of record buffers (windows, sort keys, chunk values) a worker may hold under
    ``budget``: the budget less the worker's own footprint (`WORKER_RESERVE`), so the budget
    bounds the whole process. Below ~128 MiB a quarter of the budget is kept: such budgets
    size the buffers (e.g. to force spill runs) but cannot bound the interpreter itself."""
    return max(budget // 4, budget - WORKER_RESERVE)


def _begin(spec: StoreSpec, dataset_uri: str, plan: FinalizePlan) -> _Build:
    """With the lock held: re-read the manifest, compact, and make the new run (recorded by
    `_build_array`)."""
    m = mf.load_manifest(spec.root, dataset_uri)
    require_shards(spec.with_shards(m.shards), m)
    if m.layout != plan.array.layout:
        raise UsageError(f"dataset {spec.uri} changed layout while finalize started; retry")
    spec = spec.with_shards(m.shards)
    set_keep_snapshots(spec, m, plan.options.keep_snapshots)
    start_writing(spec, m, progress=plan.options.progress)
    compact_report = None
    if plan.options.compact:
        compact_report = compact_locked(spec, m, progress=plan.options.progress, workers=plan.options.workers).to_dict()
        m = mf.load_manifest(spec.root, dataset_uri)
    a = plan.array
    run = new_run("finalize", array=a.name, dims=a.dims_text, duplicates=a.policy, workers=None)
    spill = os.path.join(spec.root, f"{SPILL_PREFIX}{run.id}")
    return _Build(spec, m, plan, run, f"{TABLE_PREFIX}{a.name}-{run.id}", spill, compact_report)


def up_to_date(m: mf.Manifest, plan: FinalizePlan) -> dict | None:
    """The summary of the array ``plan`` would build when the manifest ``m`` holds it as
    that build would make it (no record appended since, same dims, chunks, policy, format
    and cell compression), else None. Compaction does not change it: it keeps every record."""
    a, want = m.arrays.get(plan.array.name), plan.array
    if a is None or a.get("stale") or a["built_from_records"] != m.records:
        return None
    same = (
        [(d["name"], d["chunk"]) for d in a["dims"]] == list(zip(want.dims, want.chunks))
        and a["policy"] == want.policy
        and a["format"] == m.format
        and a.get("compression", "none") == plan.compression
        and a["cell_layout"] == plan.cell.to_dict()
    )
    return a if same else None


def _nothing_to_do(b: _Build, a: dict, t_start: float) -> FinalizeReport:
    """The report of a finalize whose array was up to date: the array's figures, no run."""
    return FinalizeReport(
        dataset=b.spec.uri,
        array=a["name"],
        run_id=None,
        dims=a["dims"],
        policy=a["policy"],
        records=a["built_from_records"],
        bytes=a["built_from_records"] * b.m.layout_obj.record_size,
        cells=a["cells"],
        chunks=a["chunks"],
        pieces=a["pieces"],
        dropped=a["dropped"],
        bounds=a["bounds"],
        stored_bytes=a["bytes"],
        strategy="none",
        strategy_reason="the array is up to date",
        windows=None,
        spill_runs=0,
        workers={"scan": 0, "partition": 0, "build": 0},
        memory_budget=b.plan.budget,
        seconds=round(time.perf_counter() - t_start, 4),
        mb_per_s=0.0,
        records_per_s=0.0,
        stages={},
        worker_peak_rss_bytes=0,
        worker_max_rss_bytes=0,
        compact=b.compact_report,
        status=NOTHING_TO_DO,
    )


def _record_run(b: _Build) -> None:
    """Record the new run in the manifest; remove the leftovers of crashed runs (we hold the
    lock) and make the run's spill directory."""
    b.m.runs.append(b.run)
    b.m.save(b.spec.root)
    for leftover in os.listdir(b.spec.root):
        if leftover.startswith(SPILL_PREFIX):
            shutil.rmtree(os.path.join(b.spec.root, leftover), ignore_errors=True)
    collect_index_garbage(b.spec.root, b.m)
    os.mkdir(b.spill)
    mkdir_inside(os.path.join(b.spec.root, INDEX_DIR))


def _build_array(b: _Build) -> np.ndarray:
    """Run the phases and write the index file; returns its rows. On any failure the
    new table is dropped, the run is recorded as stopped and the error raised."""
    try:
        _record_run(b)  # inside: a stop signal during its save is recorded too
        small = small_executor(b)
        b.in_process = small is not None
        with executors.using(small) if small is not None else contextlib.nullcontext():
            return _run_phases(b)
    except BaseException as e:
        shutil.rmtree(b.spill, ignore_errors=True)  # first: the drop and the run's record need space
        full = out_of_space(e)
        if full:  # a shard's cut-short writes hold the space the other shards' drops need
            trim_tails(b.spec, b.m.shards)
        _drop_tables(b.spec, b.m.shards, b.table)
        if full:
            reclaim_space(b.spec, b.m.shards)
        err = e
        if isinstance(e, WorkerError):
            # the worker's own error: it names the cell or record, the shard or the file
            err = e.raised(InputError, StoreError, NoSpaceError) or e
        err = stop_run(b.run, err, UNCHANGED)
        save_stopped(b.m, b.spec.root)
        raise err from None
    finally:
        shutil.rmtree(b.spill, ignore_errors=True)


def small_executor(b: _Build) -> executors.ThreadExecutor | None:
    """A ThreadExecutor for a small finalize (module docstring), else None: the executor in effect."""
    nbytes = b.m.records * b.m.layout_obj.record_size
    small = (
        type(executors.current()) is executors.LocalExecutor
        and nbytes <= min(SMALL_FINALIZE_BYTES, b.plan.buffers // 3)
        and not faults.aims_at_worker(b.plan.fault)
        and not open_in_this_process(b.spec)
    )
    return executors.ThreadExecutor() if small else None


def _run_phases(b: _Build) -> np.ndarray:
    """scan -> (partition) -> build -> index; returns the index rows."""
    nscan = max(1, min(b.plan.workers, len(b.m.batches) or 1))
    b.groups = _split_batches(b.m.batches, nscan)
    b.flat = sorted(b.m.batches, key=lambda e: e.first)
    if b.plan.options.strategy != "spill" and b.flat:
        _scan(b)
    faults.hit("scanned")
    if b.windows is None:
        _partition(b)
    b.run.workers = max(len(b.groups), b.nbuild)
    b.run.strategy = "direct" if b.windows is not None else "spill"
    _build(b)
    return _write_index(b)


def _scan(b: _Build) -> None:
    """Phase 0: count the records of every chunk per batch, then plan direct windows."""
    t = time.perf_counter()
    pos_of = {e.seq: i for i, e in enumerate(b.flat)}
    job = b.job()
    tasks = [
        ScanTask(job, w, tuple(g), tuple(pos_of[e.seq] for e in g), b.spill, MAX_SCAN_ENTRIES // len(b.groups))
        for w, g in enumerate(b.groups)
    ]
    keep = b.in_process and job.serializer().decode_copies  # decoded.py
    kept = Decoded.for_batches(b.flat, b.m.layout_obj.dtype) if keep else None
    with b.progress("scan") as prog:
        b.scan = executors.run(
            scan_worker, tasks, extras=None if kept is None else [(kept,)] * len(tasks), on_progress=prog.advance
        )
    if any(rc.scattered for rc in b.scan):
        b.why = "records too scattered over chunks"
    else:
        entries = np.concatenate([spill_files.load(rc.entries, ENTRY_DTYPE) for rc in b.scan])
        cap = direct_window_records(b.plan.buffers, b.m.layout_obj.record_size)
        b.windows, b.why = plan_direct(
            entries, b.flat, b.m.shards, b.nbuild, cap, b.plan.array.chunks, strict=b.plan.options.strategy == "direct"
        )
    b.decoded = kept if b.windows is not None else None  # a spilled build reads the runs
    b.phase_seconds["scan_s"] = round(time.perf_counter() - t, 3)


def _partition(b: _Build) -> None:
    """Phase 1 (spill): partition the records into spill runs."""
    t = time.perf_counter()
    job = b.job()
    tasks = [PartitionTask(job, w, tuple(g), b.m.shards, b.spill, b.plan.buffers) for w, g in enumerate(b.groups)]
    with b.progress("partition") as prog:
        b.partition = executors.run(partition_worker, tasks, on_progress=prog.advance)
    b.runs = tuple(run for rc in b.partition for run in rc.runs)
    b.phase_seconds["partition_s"] = round(time.perf_counter() - t, 3)
    faults.hit("spilled")


def _build(b: _Build) -> None:
    """Phase 2: build every chunk, one writer per shard."""
    t = time.perf_counter()
    plan, m, nbuild = b.plan, b.m, b.nbuild
    keep_tables = tuple(sorted({a["table"] for a in m.arrays.values()} | held_tables(m) | {b.table}))
    direct = b.windows is not None
    tasks = [
        BuildTask(
            b.job(),
            w,
            workers=nbuild,
            nshards=m.shards,
            cell_layout=plan.cell.to_dict(),
            policy=plan.array.policy,
            array=plan.array.name,
            table=b.table,
            keep_tables=keep_tables,
            runs=b.runs,
            spill_dir=b.spill,
            budget=plan.buffers,
            max_piece=plan.max_piece,
            batches=tuple(b.flat) if direct else (),
            windows={s: b.windows.get(s, []) for s in range(m.shards) if s % nbuild == w}
            if b.windows is not None  # (direct)
            else None,
        )
        for w in range(nbuild)
    ]
    # threads of this process: every writer opens before any reader (build._open_writers_first)
    extras = [(threading.Barrier(nbuild), b.decoded)] * nbuild if b.in_process else None
    with b.progress("write chunks") as prog:
        b.build = executors.run(build_worker, tasks, extras=extras, on_progress=prog.advance)
    b.phase_seconds["build_s"] = round(time.perf_counter() - t, 3)
    faults.hit("built")


def _write_index(b: _Build) -> np.ndarray:
    """Phase 3: merge the workers' index rows (key order) and write the index file."""
    t = time.perf_counter()
    idt = np.dtype(index_columns(b.plan.cell))
    parts = [
        (spill_files.load(rc.index + ".rows", idt), spill_files.load(rc.index + ".samples", SAMPLE_DTYPE))
        for rc in b.build
        if rc.index
    ]
    rows = np.concatenate([r for r, _ in parts]) if parts else np.empty(0, idt)
    samples = np.concatenate([s for _, s in parts]) if parts else None
    order = np.lexsort((rows["piece"], rows["ccol"], rows["crow"]))
    if samples is not None:
        samples = samples[_sample_order(sample_counts(rows), order)]
    rows = rows[order]
    write_index(os.path.join(b.spec.root, index_file(b.table)), rows, samples)
    b.phase_seconds["index_s"] = round(time.perf_counter() - t, 3)
    faults.hit("indexed")
    return rows


def _sample_order(counts: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Where the samples of index rows reordered by ``order`` are in the samples of the
    rows before (row j has ``counts[j]`` of them, in row order)."""
    start = np.concatenate([[0], np.cumsum(counts)])[:-1]
    n = counts[order]
    new_start = np.concatenate([[0], np.cumsum(n)])[:-1]
    return np.repeat(start[order] - new_start, n) + np.arange(int(n.sum()))


def _commit(b: _Build, totals: IndexTotals, t_start: float) -> dict:
    """Switch the manifest to the new build (listing the old one as garbage); returns
    the array's summary."""
    summary = _summary(b, totals)
    m, run = b.m, b.run
    old = m.arrays.get(summary["name"])
    seconds = time.perf_counter() - t_start
    with interrupts.held(lambda: f"run {run.id} had finished: array {summary['name']!r} was committed"):
        m.arrays[summary["name"]] = summary
        if old is not None:
            retire_array(m, old)
        run.update(
            status="done",
            ended=time.time(),
            records=summary["built_from_records"],
            cells=totals.cells,
            chunks=totals.chunks,
            seconds=round(seconds, 3),
            spill_runs=len(b.runs),
        )
        m.save(b.spec.root)  # the switch
    faults.hit("switched")
    collect_garbage(b.spec, m)
    return summary


def _summary(b: _Build, totals: IndexTotals) -> dict:
    """The manifest's entry for the new array."""
    a, m = b.plan.array, b.m
    types = {f.name: f.type for f in m.layout_obj.fields}
    return {
        "name": a.name,
        "dims": [{"name": d, "type": types[d], "chunk": c} for d, c in zip(a.dims, a.chunks)],
        "attrs": a.attrs,
        "synthetic": ["syn"] if a.policy == "keep" else [],
        "policy": a.policy,
        "format": m.format,
        "compression": b.plan.compression,
        "cell_layout": b.plan.cell.to_dict(),
        "table": b.table,
        "index": index_file(b.table),
        "key": KEY_FORMAT,
        "shard_map": SHARD_MAP,
        "bounds": totals.bounds,
        "cells": totals.cells,
        "chunks": totals.chunks,
        "pieces": totals.pieces,
        "bytes": totals.bytes,
        "built_from_records": m.records,
        "built_from_batches": len(m.batches),
        "dropped": int(sum(rc.dropped for rc in b.build)),
        "dropped_hash": int(sum(rc.dropped_hash for rc in b.build) % 2**64),
        "run_id": b.run.id,
        "created": time.time(),
    }


def _report(b: _Build, summary: dict, totals: IndexTotals, t_start: float) -> FinalizeReport:
    seconds = time.perf_counter() - t_start
    total = summary["built_from_records"]
    nbytes = total * b.m.layout_obj.record_size
    return FinalizeReport(
        dataset=b.spec.uri,
        array=summary["name"],
        run_id=b.run.id,
        dims=summary["dims"],
        policy=summary["policy"],
        records=total,
        bytes=nbytes,
        cells=totals.cells,
        chunks=totals.chunks,
        pieces=totals.pieces,
        dropped=summary["dropped"],
        bounds=totals.bounds,
        stored_bytes=totals.bytes,
        strategy=need(b.run, "strategy", b.run.strategy),
        strategy_reason=b.why,
        windows=sum(len(v) for v in b.windows.values()) if b.windows is not None else None,
        spill_runs=len(b.runs),
        workers={"scan": len(b.scan), "partition": len(b.partition), "build": b.nbuild},
        memory_budget=b.plan.budget,
        seconds=round(seconds, 4),
        mb_per_s=round(nbytes / seconds / 1e6, 2) if seconds > 0 else 0.0,
        records_per_s=round(total / seconds, 1) if seconds > 0 else 0.0,
        stages=stage_figures(b.phase_seconds, b.scan, b.partition, b.build),
        worker_peak_rss_bytes=worker_peak_rss(b.scan, b.partition, b.build),
        worker_max_rss_bytes=max(rc.max_rss for rc in (*b.scan, *b.partition, *b.build)),
        compact=b.compact_report,
        in_process=b.in_process,
    )


def _split_batches(batches: Iterable[mf.BatchEntry], nparts: int) -> list[list[mf.BatchEntry]]:
    """Contiguous groups of batches (in record order) with about equal record counts."""
    bs = sorted(batches, key=lambda b: b.first)
    if not bs:
        return [[]]
    total = sum(b.count for b in bs)
    out: list[list[mf.BatchEntry]] = []
    cur: list[mf.BatchEntry] = []
    acc = 0
    for b in bs:
        cur.append(b)
        acc += b.count
        if len(out) < nparts - 1 and acc >= total * (len(out) + 1) / nparts:
            out.append(cur)
            cur = []
    if cur or not out:
        out.append(cur)
    return [g for g in out if g] or [[]]


def _drop_tables(spec, nshards: int, table: str) -> None:
    """Best effort: drop the uncommitted `table` in every shard (what fails is swept by
    the next finalize)."""
    for s in range(nshards):
        if not os.path.exists(spec.shard_path(s)):
            continue
        try:
            st = spec.open_shard(s, write=True)
        except (BulkloadError, OSError):
            continue
        try:
            st.drop_table(table)
        except Exception:
            pass
        finally:
            st.close()
