"""Compaction: merge small batches, then compact every shard store.

1. **Merge.** Many small loads leave many small batches. Consecutive batches (in record
   order) are grouped greedily into batches of at most ``target_batch_records`` (default:
   the dataset's batch size). When any group holds more than one batch, every batch is
   rewritten under a fresh sequence number (above all existing ones, so keys stay in
   append order and record order = sequence order): a single-batch group is copied
   verbatim, a multi-batch group is decoded, concatenated and encoded once. Shard
   owners write in parallel (one writer per shard). Nothing holds the batch table or the
   plan: one pass over the rows (seq order = record order) sizes the merge (`MergePlan`),
   each worker streams the groups itself from the same catalog generation
   (merge.plan_merge) and writes its new rows to a rows file, and the switch streams them
   into the catalog (`BatchRows.streamed`): memory is flat in the number of batches. The
   manifest then switches to the new batch list atomically (one commit), listing the old
   keys (all below the first new seq) as garbage in the same write; they are deleted at once unless a reader still pins an
   older snapshot, else by a later writer (loader/garbage.py). A crash before the switch
   leaves the old state (the new keys sit above ``next_seq`` and are removed by the next
   writer, with the rows files ``.compact-rows-*``); a crash after it leaves
   the listed garbage, which the next writer collects.
2. **Store compaction.** Per shard, ``ShardStore.compact()``: LMDB writes a compacted copy
   in key order and swaps it in atomically; RocksDB runs ``compact_range``. A shard whose
   on-disk size is already close to its live bytes is skipped (``force=True`` to compact
   anyway). Uncommitted leftovers are removed first: batch keys at or above ``next_seq``
   and array tables that neither an array nor the garbage list names (and, when no merge
   garbage is pending, stray keys below the first batch).

Reports bytes on disk before and after. A documents dataset (layout docs) is compacted by
loader/docs_compact.py instead: each shard's document tables are folded into one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import BulkloadError, StoreError, UsageError
from ..infra import executors, faults, interrupts
from ..infra.lock import DatasetLock
from ..infra.progress import Progress
from ..infra.space import check_space
from ..kinds import kind_for
from ..model import manifest as mf
from ..model import runs
from ..model.chunk_index import TABLE_PREFIX, index_path, read_index
from ..model.options import MAX_WORKERS, check_count, default_workers
from ..model.placement import batch_key
from ..model.runs import save_stopped
from ..serializers import get_serializer
from ..stores.health import require_shards
from ..stores.spec import parse_dataset_uri
from ..stores.write_guard import guard_write, out_of_space, reclaim_space, trim_tails
from .garbage import (
    check_keep_snapshots,
    collect_garbage,
    collect_index_garbage,
    held_tables,
    holds_batches,
    retire_batches,
    set_keep_snapshots,
    start_writing,
)
from .merge import MergeTask, merge_worker, plan_merge, read_rows, remove_rows_files, rows_path, switch_rows
from .report import NOTHING_TO_DO, CompactReport

#: what a compaction that stopped early leaves: the records as they were
UNCHANGED = "no record changed (compaction only rewrites them); re-run the same command to compact"
#: a shard is compacted when its size on disk exceeds live bytes by this factor (+ slack)
WASTE_FACTOR = 1.25
WASTE_SLACK = 8 << 20


@dataclass
class MergePlan:
    """What one streaming pass over the batch rows (seq order) says of a merge: no group
    or row is kept (`merge.plan_merge` streams the groups again where they are merged)."""

    groups: int = 0  # new batches
    merged: bool = False  # some group holds more than one batch
    merged_bytes: int = 0  # stored bytes of the batches in groups of more than one
    live: list[int] = field(default_factory=list)  # per shard: stored bytes of its batches

    @classmethod
    def of(cls, batches: Iterable[mf.BatchEntry], target: int, shards: int) -> MergePlan:
        plan = cls(live=[0] * shards)
        for g in plan_merge(batches, target):
            plan.groups += 1
            for b in g:
                plan.live[b.shard] += b.nbytes
            if len(g) > 1:
                plan.merged = True
                plan.merged_bytes += sum(b.nbytes for b in g)
        return plan


def compact(
    dataset_uri: str,
    target_batch_records: int | None = None,
    progress: str = "none",
    workers: int | None = None,
    force: bool = False,
    keep_snapshots: int | None = None,
) -> CompactReport:
    """Merge small batches and compact every shard; returns the run's report.
    ``keep_snapshots``: from now on keep the data of that many generations before the
    current one readable (`as_of`), for this and every later writer (garbage.set_keep_snapshots)."""
    spec = parse_dataset_uri(dataset_uri)
    m = mf.load_manifest(spec.root, dataset_uri)
    check_options(m.layout_obj, m.format, m.compression, target_batch_records, workers)
    check_keep_snapshots(keep_snapshots)
    faults.from_env()
    with DatasetLock(spec.root) as lock:
        lock.set_job("compact")
        m = mf.load_manifest(spec.root, dataset_uri)
        require_shards(spec.with_shards(m.shards), m)
        set_keep_snapshots(spec, m, keep_snapshots)
        start_writing(spec, m, progress=progress)
        return compact_locked(
            spec.with_shards(m.shards),
            m,
            target_batch_records=target_batch_records,
            progress=progress,
            workers=workers,
            force=force,
        )


def check_options(layout, format: str, compression: str, target_batch_records: int | None, workers: int | None) -> None:
    """compact's options for records of ``layout`` in ``format``/``compression`` (UsageError
    naming the option; a pipeline checks its [compact] with it before its first step)."""
    check_count(
        "--target-batch-records", target_batch_records, 1, kind_for(layout, format, compression).max_batch_records()
    )
    check_count("--workers", workers, 1, MAX_WORKERS)


def compact_locked(
    spec,
    m: mf.Manifest,
    *,
    target_batch_records: int | None = None,
    progress: str = "none",
    workers: int | None = None,
    force: bool = False,
) -> CompactReport:
    """compact() with the dataset lock already held (finalize calls this)."""
    kind = kind_for(m.layout_obj, m.format, m.compression)
    if kind.own_compaction:  # e.g. documents: fold each shard's run tables (loader/docs/compact.py)
        return CompactReport.from_kind(
            kind.compact_dataset(
                spec, m, target_batch_records=target_batch_records, progress=progress, workers=workers, force=force
            )
        )
    t0 = time.perf_counter()
    layout = m.layout_obj
    target = int(target_batch_records or m.batch_records)
    if target < 1:
        raise UsageError("--target-batch-records must be at least 1")
    get_serializer(m.format, layout, m.compression, batch_records=target)  # capnp size limit
    k = m.shards
    first_new = m.next_seq  # the merged batches' first seq
    before_batches = len(m.batches)
    shard_bytes_before = shard_bytes(spec, k)
    remove_rows_files(spec.root)  # of a compaction that died
    plan = MergePlan.of(m.batches, target, k)
    merged = plan.merged
    state = _StoreState.of(spec, m)
    untidy = None if force or merged else _untidy_shards(spec, state)
    if untidy is not None and not untidy:  # nothing to do: no run, no write
        return CompactReport(
            dataset=spec.uri,
            run_id=None,
            target_batch_records=target,
            records=m.records,
            batches_before=before_batches,
            batches_after=before_batches,
            merged=False,
            bytes_before=sum(shard_bytes_before),
            bytes_after=sum(shard_bytes_before),
            shards=[
                {"shard": s, "bytes_before": b, "bytes_after": b, "compacted": False}
                for s, b in enumerate(shard_bytes_before)
            ],
            seconds=round(time.perf_counter() - t0, 4),
            status=NOTHING_TO_DO,
        )
    check_space(spec.root, _min_compact_bytes(plan, force), "compact")
    run = runs.new_run("compact", target_batch_records=target)
    m.runs.append(run)
    m.save(spec.root)
    try:
        seconds_merge = 0.0
        if merged:
            t = time.perf_counter()
            _merge(spec, m, plan, target, progress, workers or default_workers())
            seconds_merge = time.perf_counter() - t
            state = _StoreState.of(spec, m)
        shards = _compact_stores(spec, m, state, force=force or merged, only=untidy)
    except BaseException as e:
        if out_of_space(e):  # give the space of the merged batches back (stores/write_guard.py)
            trim_tails(spec, k)  # first: the deletes need the space the cut-short writes hold
            _drop_unswitched(spec, first_new)
            reclaim_space(spec, k)
        e = runs.stop(run, e, UNCHANGED)
        save_stopped(m, spec.root)
        raise e from None
    before = sum(shard_bytes_before)
    after = sum(s["bytes_after"] for s in shards)
    seconds = time.perf_counter() - t0
    with interrupts.held(lambda: f"run {run.id} had finished"):
        run.update(
            status="done",
            ended=time.time(),
            records=m.records,
            batches_before=before_batches,
            batches_after=len(m.batches),
            bytes_before=before,
            bytes_after=after,
            seconds=round(seconds, 3),
        )
        m.save(spec.root)
    return CompactReport(
        dataset=spec.uri,
        run_id=run.id,
        target_batch_records=target,
        records=m.records,
        batches_before=before_batches,
        batches_after=len(m.batches),
        merged=merged,
        bytes_before=before,
        bytes_after=after,
        shards=shards,
        merge_s=round(seconds_merge, 4),
        seconds=round(seconds, 4),
    )


def per_shard(spec, k: int, fn) -> list:
    """fn(store) of every shard opened for reading (0 for a shard that does not exist)."""
    out = []
    for s in range(k):
        if not os.path.exists(spec.shard_path(s)):
            out.append(0)
            continue
        st = spec.open_shard(s, write=False)
        try:
            out.append(fn(st))
        finally:
            st.close()
    return out


def shard_bytes(spec, k: int) -> list[int]:
    """Bytes on disk of every shard (0 for a shard that does not exist)."""
    return per_shard(spec, k, lambda st: st.nbytes())


def _merge(spec, m: mf.Manifest, plan: MergePlan, target: int, progress: str, workers: int) -> None:
    """Write the merged batches (pool workers, each streaming the plan from the catalog)
    and switch to them in one commit that streams their rows from the workers' rows files
    and retires every batch below the first new seq."""
    k = m.shards
    first_seq = m.next_seq
    nw = max(1, min(workers, k))
    paths = [rows_path(spec.root, os.getpid(), w) for w in range(nw)]
    tasks = [
        MergeTask(
            store=spec,
            worker=w,
            workers=nw,
            nshards=k,
            layout=m.layout,
            format=m.format,
            compression=m.compression,
            target=target,
            first_seq=first_seq,
            generation=m.generation,
            rows=paths[w],
            main_pid=os.getpid(),
            fault=os.environ.get(faults.ENV, ""),
        )
        for w in range(nw)
    ]
    try:
        with Progress("compact: merge batches", m.records, m.layout_obj.record_size, mode=progress) as prog:
            receipts = executors.run(merge_worker, tasks, on_progress=prog.advance)
        written = sum(rc.batches for rc in receipts)
        if written != plan.groups:
            raise StoreError(f"compaction wrote {written} of {plan.groups} batches; nothing was committed")
        faults.hit("merged")
        # the old batches: everything below the first new seq
        switch_rows(
            spec.root, m, lambda: read_rows(paths, plan.groups, first_seq), lambda: retire_batches(m, first_seq)
        )
    finally:
        remove_rows_files(spec.root, os.getpid())
    faults.hit("merge-switched")
    collect_garbage(spec, m)


def _min_compact_bytes(plan: MergePlan, force: bool) -> int:
    """A lower bound of the free space a compaction takes: the merged batches, written
    beside the old ones (whose pages the shard files keep until they are compacted), then
    the compacted copy of a shard beside the shard itself (one at a time: the largest)."""
    return plan.merged_bytes + (max(plan.live, default=0) if plan.merged or force else 0)


def _drop_unswitched(spec, first_new: int) -> None:
    """After a failed merge: delete the batches it wrote (keys from ``first_new``) unless
    the manifest on disk switched to them. Best effort: a later merge deletes them too."""
    try:
        m = mf.load_manifest(spec.root)
        if m.next_seq > first_new:
            return
        for s in range(m.shards):
            st = spec.open_shard(s, write=True)
            try:
                st.delete_range(batch_key(first_new), None)
            finally:
                st.close()
    except Exception:
        pass


@dataclass(frozen=True)
class _StoreState:
    """What tells a shard's committed data from its leftovers, and its live bytes."""

    arrays: frozenset  # array tables the manifest (or its garbage list) names
    live: tuple  # per shard: bytes the manifest's batches and arrays hold
    lo: int  # the first committed batch seq (keys below it: leftovers, unless garbage holds them)
    next_seq: int  # keys at or above it: leftovers of a run that did not commit
    holds_batches: bool

    @classmethod
    def of(cls, spec, m: mf.Manifest) -> _StoreState:
        live = [0] * m.shards
        for b in m.batches:
            live[b.shard] += b.nbytes
        collect_index_garbage(spec.root, m)  # index files of crashed finalize builds
        for a in m.arrays.values():
            try:
                idx = read_index(index_path(spec.root, a))
                for s, nb in zip(idx["shard"].tolist(), idx["nbytes"].tolist()):
                    live[s] += nb
            except BulkloadError:
                pass
        return cls(
            frozenset({a["table"] for a in m.arrays.values()} | held_tables(m)),
            tuple(live),
            min((b.seq for b in m.batches), default=m.next_seq),
            m.next_seq,
            holds_batches(m),
        )

    def stray_tables(self, st) -> list[str]:
        return [t for t in st.tables() if t.startswith(TABLE_PREFIX) and t not in self.arrays]

    def wasteful(self, size: int, s: int) -> bool:
        return size > self.live[s] * WASTE_FACTOR + WASTE_SLACK


def _untidy_shards(spec, state: _StoreState) -> set[int]:
    """The shards a compaction without a merge would change: an interrupted compaction of
    theirs, uncommitted leftovers in them, or too much space on disk. Nothing is written;
    an LMDB shard is opened as its writer all the same (the dataset lock is held, and
    opening it writes no data file): finalize, which compacts first, then writes the
    shards, and a read-only environment would be closed and opened again for writing (a
    fresh finalize of 1M records: scan 0.03 -> 0.11 s). A RocksDB open for writing
    rewrites CURRENT and its MANIFEST: those are opened read-only."""

    def untidy(st) -> bool:
        return (
            st.seek(batch_key(state.next_seq)) is not None
            or (
                state.lo > 0
                and not state.holds_batches
                and next(iter(st.range(None, batch_key(state.lo))), None) is not None
            )
            or bool(state.stray_tables(st))
            or state.wasteful(st.nbytes(), s)
        )

    out = set()
    for s in range(len(state.live)):
        if spec.backend.interrupted_compaction(spec.shard_path(s)):
            out.add(s)  # its open for writing finishes or rolls back that compaction
        elif os.path.exists(spec.shard_path(s)):
            st = spec.open_shard(s, write=spec.scheme in ("lmdb", "mem"))
            try:
                if untidy(st):
                    out.add(s)
            finally:
                st.close()
    return out


def _compact_stores(spec, m: mf.Manifest, state: _StoreState, *, force: bool, only: set[int] | None) -> list[dict]:
    """Remove each shard's leftovers and compact it when it needs it (``only``: the shards
    `_untidy_shards` found; the others are left unopened)."""
    out = []
    sizes = shard_bytes(spec, m.shards) if only is not None else None
    for s in range(m.shards):
        if not os.path.exists(spec.shard_path(s)) or (only is not None and s not in only):
            size = sizes[s] if sizes is not None else 0
            out.append({"shard": s, "bytes_before": size, "bytes_after": size, "compacted": False})
            continue
        st = spec.open_shard(s, write=True)
        try:
            # uncommitted leftovers: batch keys above the committed ones, unreferenced array tables
            garbage = st.delete_range(batch_key(state.next_seq), None)
            if state.lo > 0 and not state.holds_batches:
                garbage += st.delete_range(None, batch_key(state.lo))
            for t in state.stray_tables(st):
                st.drop_table(t)
                garbage += 1
            size = st.nbytes()
            if force or garbage or state.wasteful(size, s):
                before, after = guard_write(spec, s, st.compact)
                out.append({"shard": s, "bytes_before": before, "bytes_after": after, "compacted": True})
            else:
                out.append({"shard": s, "bytes_before": size, "bytes_after": size, "compacted": False})
        finally:
            st.close()
    return out
