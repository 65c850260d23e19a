"""`bulkload compact` on a documents dataset: fold each shard's document tables into one.

Every document run whose ids interleave with the stored ones writes a table of its own
(``docs-RUNID``, kind.py), so a cron job loading random ids adds one table per shard per
run until LMDB's ``max_dbs`` refuses the next run. Compaction rewrites all committed
documents of such a shard, id-sorted, into ONE new table ``docs-<compact run id>``,
re-packed into fresh batches with the dataset's format and compression (the load
worker's own encoder, `DocsWriter.encode`: blocks by `Packer`, or one value per document
with a fresh per-table zstd dictionary). This module is the coordinator: it plans
(`plan_compaction`: which shards, why), runs the fold workers (fold.py: one process per
worker owns whole shards, shard mod W, and folds them window by window in bounded
memory), switches the manifest and tidies the stores.

**Commit and crash safety.** The job holds the dataset lock and first records a
``compact`` run in the manifest (unfinished loads / ingests are superseded: their pending
batches are void, as when a new run starts). Workers first drop the doc tables no
committed batch of their shard names (leftovers of failed runs or of a killed
compaction; tables the garbage list holds stay), then write and sync the new tables. One
catalog commit then replaces the folded shards' batch entries with the new ones (fresh
seqs above all others, seq mod K = shard), lists the old tables as garbage and marks the
run done. Nothing holds the batch table: the plan is one streaming pass over the rows
(`shard_states`), the workers read their shards' rows from the catalog themselves and
write their new rows to rows files (``.compact-rows-PID-SHARD``, merge.RowsFile), and
the switch streams the kept rows and the new ones into the commit (merge.switch_rows, as
fixed-size compaction does): memory is flat in the number of batches. The rows files
are removed after the switch; those of a killed compaction by the next writer
(garbage.start_writing). Before it, the new tables are unreferenced leftovers (the next writer or
compaction drops them) and the old state is intact; after it, the old tables are
garbage: dropped at once unless a reader still pins an older snapshot, else by a later
writer (loader/maintain/garbage.py). Finally each shard store is compacted when its size
on disk exceeds its live bytes (LMDB keeps freed pages in its file), as
loader/maintain/compact.py does for fixed-size datasets.

Fault points (loader/infra/faults.py): coordinator ``docs-folded`` (new tables synced,
manifest not switched), ``docs-switched`` (switched, old tables not dropped),
``docs-dropping`` (old tables dropped from some shards only, in the garbage collector);
workers ``fold`` (a window was put, not yet synced; fold.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ..errors import BulkloadError, StoreError, UsageError
from ..infra import executors, faults
from ..infra.progress import Progress
from ..kinds import Kind, kind_for
from ..maintain.compact import UNCHANGED, WASTE_FACTOR, WASTE_SLACK, per_shard, shard_bytes
from ..maintain.garbage import collect_garbage, held_tables, retire_doc_tables
from ..maintain.merge import read_rows, remove_rows_files, rows_path, switch_rows
from ..model import manifest as mf
from ..model import runs
from ..model.catalog_rows import BatchRows
from ..model.options import default_workers
from ..model.runs import Run
from ..stores.spec import StoreSpec
from ..stores.write_guard import guard_write
from .fold import FoldTask, ShardFold, clear_leftovers, fold_worker, open_writer, table_tops
from .layout import DOCS
from .tables import doc_tables

#: a shard with one table is still folded when it has more than this many times the
#: batches a fold would write (many small ingest runs appended to one table)
BATCH_WASTE = 2


# --- planning -------------------------------------------------------------------------------


@dataclass
class ShardState:
    """One streaming pass's figures of a shard's batch rows."""

    batches: int = 0  # rows
    records: int = 0  # of every row of the shard
    keyed: int = 0  # rows with documents
    docs: int = 0
    tables: set = field(default_factory=set)  # the tables those rows name


def shard_states(batches: Iterable[mf.BatchEntry], k: int) -> list[ShardState]:
    """Per shard, its `ShardState` (one pass over the rows: streamed, none kept)."""
    out = [ShardState() for _ in range(k)]
    for b in batches:
        st = out[b.shard]
        st.batches += 1
        st.records += b.records
        if b.keyed and b.docs:
            st.keyed += 1
            st.docs += b.docs
            st.tables.add(b.table)
    return out


def plan_shards(states: list[ShardState], target: int, force: bool) -> dict[int, str]:
    """{shard: why it is folded} of the shards to rewrite."""
    out = {}
    for s, st in enumerate(states):
        if not st.keyed:
            continue
        if len(st.tables) > 1:
            out[s] = f"{len(st.tables)} document tables"
        elif st.keyed > BATCH_WASTE * -(-st.docs // target) + 1:
            out[s] = f"{st.keyed} small batches"
        elif force:
            out[s] = "--force"
    return out


@dataclass(frozen=True)
class CompactPlan:
    """What a documents compaction does, decided before anything is written, and the
    state before it (for the report)."""

    target: int  # documents per new batch
    kind: Kind  # the dataset's documents kind (format, compression)
    store_options: tuple  # the kind's options for opening a shard (RocksDB: zstd dictionary)
    why: dict  # {shard: why it is folded}; empty: nothing to do
    bytes_before: list  # per shard, on disk
    tables_before: list  # per shard, document tables
    batches_before: int
    states: list  # per shard, its ShardState (records, the tables its rows name)

    @property
    def folded(self) -> list[int]:
        return sorted(self.why)

    @property
    def records(self) -> int:
        """Records of the folded shards."""
        return sum(self.states[s].records for s in self.why)


def plan_compaction(spec: StoreSpec, m: mf.Manifest, target_batch_records: int | None, force: bool) -> CompactPlan:
    """The shards to fold and the state before (reads every shard's size and tables)."""
    target = int(target_batch_records or m.batch_records)
    if target < 1:
        raise UsageError("--target-batch-records must be at least 1")
    kind = kind_for(DOCS, m.format, m.compression)
    states = shard_states(m.batches, m.shards)
    return CompactPlan(
        target,
        kind,
        kind.store_options(spec.scheme),
        plan_shards(states, target, force),
        shard_bytes(spec, m.shards),
        per_shard(spec, m.shards, lambda st: len(doc_tables(st))),
        len(m.batches),
        states,
    )


# --- the coordinator ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Folds:
    """What the fold workers wrote: per folded shard its `ShardFold`, and how long it took."""

    shards: dict  # {shard: ShardFold}
    seconds: float

    @property
    def documents(self) -> int:
        return sum(f.documents for f in self.shards.values())

    @property
    def text_bytes(self) -> int:
        return sum(f.text_bytes for f in self.shards.values())


def compact_docs(
    spec: StoreSpec,
    m: mf.Manifest,
    *,
    target_batch_records: int | None = None,
    progress: str = "none",
    workers: int | None = None,
    force: bool = False,
) -> dict:
    """Fold the document tables of each shard into one (the dataset lock is held); the
    report (a dict, as `loader.maintain.compact.compact` returns)."""
    t0 = time.perf_counter()
    plan = plan_compaction(spec, m, target_batch_records, force)
    base = {
        "dataset": spec.uri,
        "layout": "docs",
        "target_batch_records": plan.target,
        "records": m.records,
        "batches_before": plan.batches_before,
        "tables_before": max(plan.tables_before, default=0),
        "bytes_before": sum(plan.bytes_before),
    }
    rows = [
        {
            "shard": s,
            "status": "fold" if s in plan.why else "nothing to do",
            "why": plan.why.get(s),
            "tables_before": plan.tables_before[s],
            "bytes_before": plan.bytes_before[s],
        }
        for s in range(m.shards)
    ]
    if not plan.why:  # nothing written, no run recorded
        for r in rows:
            r.update(tables_after=r["tables_before"], bytes_after=r["bytes_before"], documents=0, compacted=False)
        return _report(base, rows, m, None, None, time.perf_counter() - t0)
    run, table = _start_run(spec, m, plan)
    try:
        folds = _fold(spec, m, plan, table, progress, workers)
        _switch(spec, m, plan, run, table, folds)
    except BaseException as e:
        if run.status != "done":
            e = runs.stop(run, e, UNCHANGED)
            m.save(spec.root)
        raise e from None
    # the old tables are garbage now: dropped unless a reader pins them; then compact the stores
    collect_garbage(spec, m)
    _tidy_shards(spec, m, plan, rows, force)
    _add_folds(rows, folds)
    seconds = time.perf_counter() - t0
    run.update(
        bytes_before=base["bytes_before"], bytes_after=sum(r["bytes_after"] for r in rows), seconds=round(seconds, 3)
    )
    m.save(spec.root)
    return _report(base, rows, m, run.id, folds, seconds)


def _start_run(spec: StoreSpec, m: mf.Manifest, plan: CompactPlan) -> tuple[Run, str]:
    """Record the compaction's run (and its new table) in the manifest; unfinished loads
    and ingests are superseded. (the run, its table)"""
    run = runs.new_run("compact", target_batch_records=plan.target, layout="docs", shards_folded=plan.folded)
    table = plan.kind.run_table(run.id)
    run.table = table
    runs.supersede(m, None, by=run.id)  # their pending batches may sit in tables dropped below
    m.runs.append(run)
    m.save(spec.root)
    return run, table


def _fold(spec: StoreSpec, m: mf.Manifest, plan: CompactPlan, table: str, progress: str, workers: int | None) -> Folds:
    """Run the fold workers (each owns whole shards, reads their rows from the catalog
    and writes their new rows to a rows file per shard) until every folded shard's new
    table is written and synced."""
    t = time.perf_counter()
    folded = plan.folded
    nw = max(1, min(workers or default_workers(), len(folded)))
    head = dict(
        layout=m.layout,
        format=m.format,
        compression=m.compression,
        scheme=m.scheme,
        shards=m.shards,
        batch_records=m.batch_records,
    )
    tasks = []
    for w in range(nw):
        mine = tuple(folded[w::nw])
        tasks.append(
            FoldTask(
                store=spec,
                worker=w,
                shards=mine,
                manifest=head,
                generation=m.generation,
                rows_files=tuple(rows_path(spec.root, os.getpid(), s) for s in mine),
                first_seq=_first_seq(m),
                table=table,
                target=plan.target,
                keep_tables=tuple(sorted(held_tables(m))),
                store_options=plan.store_options,
                main_pid=os.getpid(),
                fault=os.environ.get(faults.ENV, ""),
            )
        )
    with Progress("compact: fold documents", plan.records, plan.kind.record_bytes(), mode=progress) as prog:
        receipts = executors.run(fold_worker, tasks, on_progress=prog.advance)
    folds = Folds({s: f for rc in receipts for s, f in rc.shards.items()}, time.perf_counter() - t)
    faults.hit("docs-folded")
    return folds


def _first_seq(m: mf.Manifest) -> int:
    """The seq of the folded shards' first new batch: above all others, a multiple of the
    shard count (shard s's j-th new batch: this + j * shards + s, so seq mod K = shard)."""
    return -(-m.next_seq // m.shards) * m.shards


def _switch(spec: StoreSpec, m: mf.Manifest, plan: CompactPlan, run: Run, table: str, folds: Folds) -> None:
    """One catalog commit: the folded shards' batches replaced by the new ones (streamed:
    the kept rows from the catalog as read, then the new ones from the rows files), their
    old tables listed as garbage, the run done."""
    if folds.documents != plan.records:
        raise StoreError(
            f"compaction read {folds.documents} of the {plan.records} documents of "
            f"shards {plan.folded}; nothing was committed - run `bulkload verify`"
        )
    old = m.batches
    records, next_record = m.records, m.next_record
    new = sum(f.batches for f in folds.shards.values())

    def rows() -> Iterator[mf.BatchEntry]:
        snap = getattr(m, "_snap", None)  # (read at each pass: a commit that grows the map reads it again)
        kept = BatchRows(snap=snap, agg=snap.aggregates()) if snap is not None else old
        yield from (b for b in kept if b.shard not in plan.why)
        rec = next_record
        for b in read_rows(paths, new, table=table):
            b.first, b.count = rec, b.records  # keyed rows: `records` are their documents
            rec += b.records
            yield b

    def retire() -> None:
        for s in plan.folded:
            retire_doc_tables(m, s, plan.states[s].tables)
        run.update(
            status="done",
            ended=time.time(),
            records=records,
            documents_rewritten=folds.documents,
            text_bytes_rewritten=folds.text_bytes,
            batches_before=plan.batches_before,
            batches_after=plan.batches_before - sum(plan.states[s].batches for s in plan.why) + new,
            fold_seconds=round(folds.seconds, 3),
        )

    paths = [rows_path(spec.root, os.getpid(), s) for s in plan.folded]
    try:
        switch_rows(spec.root, m, rows, retire)
    finally:
        remove_rows_files(spec.root, os.getpid())
    faults.hit("docs-switched")


def _tidy_shards(spec: StoreSpec, m: mf.Manifest, plan: CompactPlan, rows: list[dict], force: bool) -> None:
    """Per shard after the switch: drop leftover tables, then compact its store when its
    size on disk exceeds its live bytes (LMDB keeps freed pages in its file); the figures
    go into ``rows``. A shard that cannot be opened is left to the next writer."""
    keep = held_tables(m)
    live = [0] * m.shards
    for b in m.batches:
        live[b.shard] += b.nbytes
    tops = table_tops(m.batches)
    for s in range(m.shards):
        if not os.path.exists(spec.shard_path(s)):
            continue
        try:
            st = open_writer(spec, s, plan.store_options)
        except (BulkloadError, OSError):
            continue  # dropped by the next writer
        try:
            clear_leftovers(st, tops.get(s, {}), keep)
            st.sync()
            r = rows[s]
            r["tables_after"] = len(doc_tables(st))
            size = st.nbytes()
            r["compacted"] = bool(force or size > live[s] * WASTE_FACTOR + WASTE_SLACK)
            if r["compacted"]:
                size = guard_write(spec, s, st.compact)[1]
            r["bytes_after"] = size
        finally:
            st.close()


def _add_folds(rows: list[dict], folds: Folds) -> None:
    """Complete the shard rows: what each fold did (a shard not tidied keeps its figures)."""
    for r in rows:
        r.setdefault("tables_after", r["tables_before"])
        r.setdefault("bytes_after", r["bytes_before"])
        r.setdefault("compacted", False)
        g: ShardFold | None = folds.shards.get(r["shard"])
        r["status"] = "folded" if g else r["status"]
        r["documents"] = g.documents if g else 0
        if g:
            r.update(
                windows=g.windows,
                components=g.components,
                splits=g.splits,
                leftovers_dropped=g.leftovers_dropped,
                seconds=g.seconds,
                max_rss=g.max_rss,
            )


def _report(
    base: dict, rows: list[dict], m: mf.Manifest, run_id: str | None, folds: Folds | None, seconds: float
) -> dict:
    """The compaction's report: ``base`` (the state before) and the state after."""
    text = folds.text_bytes if folds else 0
    return base | {
        "run_id": run_id,
        "status": "done" if folds else "nothing-to-do",
        "merged": folds is not None,
        "batches_after": len(m.batches),
        "tables_after": max(r["tables_after"] for r in rows),
        "bytes_after": sum(r["bytes_after"] for r in rows),
        "documents_rewritten": folds.documents if folds else 0,
        "text_bytes_rewritten": text,
        "shards": rows,
        "fold_s": round(folds.seconds, 4) if folds else 0.0,
        "mb_per_s": round(text / max(folds.seconds, 1e-9) / 1e6, 1) if folds else 0.0,
        "seconds": round(seconds, 4),
    }
