"""`bulkload compact` on a documents dataset: fold each shard's document tables into one.

Every document run whose ids interleave with the stored ones writes a table of its own
(``docs-RUNID``, loader/record_kinds.py), so a cron job loading random ids adds one table
per shard per run until LMDB's ``max_dbs`` refuses the next run. Compaction rewrites all
committed documents of such a shard, id-sorted, into ONE new table ``docs-<compact run
id>``, re-packed into fresh batches with the dataset's format and compression (the load
worker's own encoder, `KeyedWriter.encode`: blocks by `Packer`, or one value per document
with a fresh per-table zstd dictionary).

**Windows.** Memory stays bounded: a shard's batches whose id ranges [lo, hi] overlap form
connected components; a component is cut into id windows holding about ``target``
documents each (estimated from every batch's count and range, as if its ids were spread
uniformly), and each window is read from every overlapping batch (`DocReader._batch_docs`),
concatenated and sorted by id. A window that turns out larger than ``SPLIT x target`` is
split at the median id read so far and read again in halves. Each window becomes one or
more batches of about ``target`` documents and is written with one ``put_sorted`` (keys
ascend across windows: LMDB append, RocksDB SST ingestion). One process per worker owns
whole shards (shard mod W), as in a load.

**Commit and crash safety.** The job holds the dataset lock and first records a
``compact`` run in the manifest (unfinished loads / ingests are superseded: their pending
batches are void, as when a new run starts). Workers first drop the doc tables no
committed batch of their shard names (leftovers of failed runs or of a killed
compaction; tables the garbage list holds stay), then write and sync the new tables. One
manifest write then replaces the folded shards' batch entries with the new ones (fresh
seqs above all others, seq mod K = shard), lists the old tables as garbage and marks the
run done. Before it, the new tables are unreferenced leftovers (the next writer or
compaction drops them) and the old state is intact; after it, the old tables are
garbage: dropped at once unless a reader still pins an older snapshot, else by a later
writer (loader/garbage.py). Finally each shard store is compacted when its size on disk
exceeds its live bytes (LMDB keeps freed pages in its file), as compact.py does for
fixed-size datasets.

Fault points (loader/faults.py): coordinator ``docs-folded`` (new tables synced,
manifest not switched), ``docs-switched`` (switched, old tables not dropped),
``docs-dropping`` (old tables dropped from some shards only, in the garbage collector);
workers ``fold`` (a window was put, not yet synced).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..errors import BulkloadError, UsageError, VerifyError
from ..infra import faults
from ..maintain.garbage import collect_garbage, held_tables, retire_doc_tables
from ..model import manifest as mf
from ..stores import registry
from ..stores.spec import StoreSpec

#: a window holding more than this many times the target is split
SPLIT = 4
#: a shard with one table is still folded when it has more than this many times the
#: batches a fold would write (many small ingest runs appended to one table)
BATCH_WASTE = 2


# --- planning -------------------------------------------------------------------------------

def components(batches: list) -> list[list]:
    """Groups of batches whose id ranges overlap (transitively), in id order."""
    out: list[list] = []
    top = -1
    for b in sorted(batches, key=lambda b: (b.lo, b.hi)):
        if out and b.lo <= top:
            out[-1].append(b)
            top = max(top, b.hi)
        else:
            out.append([b])
            top = b.hi
    return out


def windows(comp: list, target: int) -> list[tuple[int, int]]:
    """Id windows [a, z] covering a component, each holding about ``target`` documents
    by estimate: each batch's documents spread uniformly over its [lo, hi]."""
    lo, hi = min(b.lo for b in comp), max(b.hi for b in comp)
    total = sum(b.docs for b in comp)
    n = max(1, -(-total // max(1, target)))
    if n == 1:
        return [(lo, hi)]
    # piecewise constant density between the batches' ends (a sweep); cumulative estimate
    delta: dict[int, float] = {}
    for b in comp:
        d = b.docs / (b.hi - b.lo + 1)
        delta[b.lo] = delta.get(b.lo, 0.0) + d
        delta[b.hi + 1] = delta.get(b.hi + 1, 0.0) - d
    points = sorted(delta)
    cuts, j, est, dens = [], 1, 0.0, 0.0
    for p, q in zip(points, points[1:]):
        dens += delta[p]
        seg = dens * (q - p)
        while j < n and est + seg >= j * total / n:
            x = p + int((j * total / n - est) / dens) if dens > 0 else p
            x = min(max(x, p), q - 1)
            if x > (cuts[-1] if cuts else lo):
                cuts.append(x)
            j += 1
        est += seg
    bounds = [lo] + cuts + [hi + 1]
    return [(a, z - 1) for a, z in zip(bounds, bounds[1:])]


def plan_shards(m: mf.Manifest, target: int, force: bool) -> dict[int, str]:
    """{shard: why it is folded} of the shards to rewrite."""
    out = {}
    for s in range(m.shards):
        bs = [b for b in m.batches if b.shard == s and b.keyed and b.docs]
        if not bs:
            continue
        tables = {b.table for b in bs}
        docs = sum(b.docs for b in bs)
        if len(tables) > 1:
            out[s] = f"{len(tables)} document tables"
        elif len(bs) > BATCH_WASTE * -(-docs // target) + 1:
            out[s] = f"{len(bs)} small batches"
        elif force:
            out[s] = "--force"
    return out


# --- shards -----------------------------------------------------------------------------------

def open_writer(spec: StoreSpec, s: int, store_options: tuple, want_tables: int = 0):
    """Open shard s for writing with the run's store options and, on LMDB, room for every
    table it holds plus the new one (a dataset at its max_dbs limit must still fold)."""
    from .tables import doc_tables

    opts = dict(spec.options) | dict(store_options)
    if spec.scheme == "rocksdb":
        return registry.open_writer(spec, s, opts)
    from ..stores.options import DEFAULT_MAX_DBS

    limit = max(int(opts.get("max_dbs", DEFAULT_MAX_DBS)), want_tables + 64)
    st = registry.open_writer(spec, s, opts | {"max_dbs": str(limit)})
    n = len(doc_tables(st)) + 4
    if n > limit:
        st.close()
        st = registry.open_writer(spec, s, opts | {"max_dbs": str(n)})
    return st


def clear_leftovers(st, batches: list, keep=()) -> int:
    """Drop the doc tables no batch of ``batches`` (this shard's committed ones) names,
    except ``keep`` (tables the garbage list holds for readers), and the keys above each
    named table's highest committed id; returns tables dropped."""
    from .batch import key_of
    from .tables import doc_tables, drop_doc_table

    top: dict[str, int] = {}
    for b in batches:
        if b.keyed and b.docs:
            top[b.table] = max(top.get(b.table, -1), b.hi)
    n = 0
    for t in doc_tables(st):
        if t in top:
            if top[t] < 2**64 - 1:
                st.delete_range(key_of(top[t] + 1), None, table=t)
        elif t not in keep:
            drop_doc_table(st, t)
            n += 1
    return n


# --- the worker ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class FoldTask:
    store: StoreSpec
    worker: int
    shards: tuple  # the shards this worker folds
    manifest: dict  # layout, format, compression, scheme, shards, batch_records (no batches)
    rows: tuple  # committed batch rows of those shards
    table: str  # the new table
    target: int
    keep_tables: tuple = ()  # tables the garbage list holds (not leftovers)
    store_options: tuple = ()
    main_pid: int = 0
    fault: str = ""


class _View:
    """What DocReader reads through: one shard, opened by this worker for writing."""

    def __init__(self, m: mf.Manifest, st, uri: str):
        from .layout import DOCS

        self.manifest, self.layout, self._st, self.uri = m, DOCS, st, uri

    def shard(self, i: int):
        return self._st

    def moved_on(self):
        return None  # the dataset lock is held: nothing moves

    def missing(self, problem: str):
        return VerifyError(problem)


def fold_worker(task: FoldTask, progress_q) -> dict:
    """One worker process: fold each of its shards in turn (one writer per shard)."""
    from ..infra.proc import peak_rss, start_worker

    start_worker(task)
    out = {}
    for s in task.shards:
        out[s] = fold_shard(task, s, progress_q.put)
        out[s]["max_rss"] = peak_rss()
    return {"worker": task.worker, "shards": out}


def fold_shard(task: FoldTask, s: int, report=lambda n: None) -> dict:
    """Rewrite shard s's committed documents into task.table; returns its new batch rows
    (seq and first left to the coordinator) and figures."""
    from ..kinds import kind_for
    from .access import DocReader
    from .batch import DocBatch, duplicate_ids, sort_by_id
    from .layout import DOCS

    t0 = time.perf_counter()
    batches = [mf.BatchEntry(*r) for r in task.rows if r[1] == s]
    m = mf.Manifest(**task.manifest, batches=batches)
    kind = kind_for(DOCS, m.format, m.compression)
    st = open_writer(task.store, s, task.store_options, len({b.table for b in batches}))
    try:
        dropped = clear_leftovers(st, batches, task.keep_tables)  # includes a killed compaction's table
        reader = DocReader(_View(m, st, task.store.uri))
        writer = kind.writer(SimpleNamespace(table=task.table, store=task.store))
        live = [b for b in batches if b.keyed and b.docs]
        rows, ndocs, nwin, ncomp, nsplit, text = [], 0, 0, 0, 0, 0
        for comp in components(live):
            ncomp += 1
            todo = list(reversed(windows(comp, task.target)))
            while todo:
                a, z = todo.pop()
                parts, n, split = [], 0, None
                for b in comp:
                    if b.hi < a or b.lo > z:
                        continue
                    d = reader._batch_docs(b, max(a, b.lo), min(z, b.hi))
                    parts.append(d)
                    n += len(d)
                    if n > SPLIT * task.target and z > a:
                        ids = np.sort(np.concatenate([p.ids for p in parts]))
                        split = min(max(int(ids[len(ids) // 2]), a + 1), z)
                        break
                if split is not None:  # the estimate was far off: read it again in halves
                    del parts
                    nsplit += 1
                    todo += [(split, z), (a, split - 1)]
                    continue
                batch = sort_by_id(DocBatch.concat(parts).compact())
                dup = duplicate_ids(batch.ids)
                if len(dup):
                    raise VerifyError(
                        f"shard {s} of {task.store.uri}: id {int(dup[0])} is stored by two batches; nothing "
                        "was changed - run `bulkload verify` and reload the affected documents")
                if not len(batch):
                    continue
                nwin += 1
                pieces = max(1, round(len(batch) / task.target))
                cuts = [len(batch) * i // pieces for i in range(pieces + 1)]
                items = []
                for i, j in zip(cuts, cuts[1:]):
                    got, row, nb, _ = writer.encode(0, 0, j - i, (batch.slice(i, j), []), s, st)
                    items += got
                    rows.append(row)
                    text += nb
                st.put_sorted(items, table=task.table)
                faults.hit("fold")
                ndocs += len(batch)
                report(len(batch))
        st.sync()
    finally:
        st.close()
    return {"rows": rows, "documents": ndocs, "text_bytes": text, "windows": nwin, "components": ncomp, "splits": nsplit,
            "leftovers_dropped": dropped, "seconds": round(time.perf_counter() - t0, 4)}


# --- the coordinator ------------------------------------------------------------------------------

def compact_docs(spec: StoreSpec, m: mf.Manifest, *, target_batch_records: int | None = None,
                 progress: str = "none", workers: int | None = None, force: bool = False) -> dict:
    """Fold the document tables of each shard into one (the dataset lock is held)."""
    from ..infra.pool import Pool
    from ..infra.progress import Progress
    from ..kinds import kind_for
    from ..model import runs
    from ..model.options import default_workers
    from .layout import DOCS
    from .tables import doc_tables

    t0 = time.perf_counter()
    target = int(target_batch_records or m.batch_records)
    if target < 1:
        raise UsageError("--target-batch-records must be at least 1")
    k = m.shards
    kind = kind_for(DOCS, m.format, m.compression)
    sopts = kind.store_options(spec.scheme)
    plan = plan_shards(m, target, force)
    sizes_before = _sizes(spec, k)
    tables_before = _table_counts(spec, k)
    batches_before = len(m.batches)
    shard_rep = [{"shard": s, "status": "fold" if s in plan else "nothing to do", "why": plan.get(s),
                  "tables_before": tables_before[s], "bytes_before": sizes_before[s]} for s in range(k)]
    base = {"dataset": spec.uri, "layout": "docs", "target_batch_records": target, "records": m.records,
            "batches_before": batches_before, "tables_before": max(tables_before, default=0),
            "bytes_before": sum(sizes_before)}
    if not plan:  # nothing written, no run recorded
        for r in shard_rep:
            r.update(tables_after=r["tables_before"], bytes_after=r["bytes_before"], documents=0, compacted=False)
        return base | {"run_id": None, "status": "nothing-to-do", "merged": False, "batches_after": batches_before,
                       "tables_after": base["tables_before"], "bytes_after": base["bytes_before"],
                       "documents_rewritten": 0, "text_bytes_rewritten": 0, "shards": shard_rep,
                       "fold_s": 0.0, "mb_per_s": 0.0, "seconds": round(time.perf_counter() - t0, 4)}

    run = runs.new_run("compact", target_batch_records=target, layout="docs", shards_folded=sorted(plan))
    table = kind.run_table(run.id)
    run.table = table
    runs.supersede(m, None, by=run.id)  # their pending batches may sit in tables dropped below
    m.runs.append(run)
    m.save(spec.root)
    try:
        t = time.perf_counter()
        folded = sorted(plan)
        nw = max(1, min(workers or default_workers(), len(folded)))
        head = dict(layout=m.layout, format=m.format, compression=m.compression, scheme=m.scheme,
                    shards=m.shards, batch_records=m.batch_records)
        tasks = []
        for w in range(nw):
            mine = tuple(folded[w::nw])
            tasks.append(FoldTask(store=spec, worker=w, shards=mine, manifest=head,
                                  rows=tuple(tuple(b.row()) for b in m.batches if b.shard in mine),
                                  table=table, target=target, keep_tables=tuple(sorted(held_tables(m))),
                                  store_options=sopts, main_pid=os.getpid(),
                                  fault=os.environ.get(faults.ENV, "")))
        total = sum(b.records for b in m.batches if b.shard in plan)
        with Progress("compact: fold documents", total, kind.record_bytes(), mode=progress) as prog:
            receipts = Pool(fold_worker, tasks, on_progress=prog.advance).run()
        got = {s: r for rc in receipts for s, r in rc["shards"].items()}
        fold_s = time.perf_counter() - t
        faults.hit("docs-folded")
        # the switch: fresh seqs above all others (seq mod K = shard), one manifest write
        first_seq = -(-m.next_seq // k) * k
        new = []
        for s in folded:
            for j, row in enumerate(got[s]["rows"]):
                row[0] = first_seq + j * k + s
                new.append(mf.BatchEntry(*row))
        new.sort(key=lambda b: b.seq)
        rec = m.next_record
        for b in new:
            b.first, b.count = rec, b.docs
            rec += b.docs
        docs_before = sum(b.records for b in m.batches if b.shard in plan)
        if sum(b.docs for b in new) != docs_before:
            from ..errors import StoreError

            raise StoreError(f"compaction read {sum(b.docs for b in new)} of the {docs_before} documents of "
                             f"shards {folded}; nothing was committed - run `bulkload verify`")
        for s in folded:
            retire_doc_tables(m, s, {b.table for b in m.batches if b.shard == s and b.keyed and b.docs})
        m.batches = [b for b in m.batches if b.shard not in plan] + new
        ndocs = sum(got[s]["documents"] for s in folded)
        text = sum(got[s]["text_bytes"] for s in folded)
        run.update(status="done", ended=time.time(), records=m.records, documents_rewritten=ndocs,
                   text_bytes_rewritten=text, batches_before=batches_before, batches_after=len(m.batches),
                   fold_seconds=round(fold_s, 3))
        m.save(spec.root)  # the switch
        faults.hit("docs-switched")
    except BaseException as e:
        if run.status != "done":
            from ..maintain.compact import UNCHANGED

            e = runs.stop(run, e, UNCHANGED)
            m.save(spec.root)
        raise e from None
    # the old tables are garbage now: dropped unless a reader pins them; then compact the stores
    collect_garbage(spec, m)
    keep = held_tables(m)
    live = [0] * k
    for b in m.batches:
        live[b.shard] += b.nbytes
    from ..maintain.compact import WASTE_FACTOR, WASTE_SLACK

    for s in range(k):
        if not os.path.exists(spec.shard_path(s)):
            continue
        try:
            st = open_writer(spec, s, sopts)
        except (BulkloadError, OSError):
            continue  # dropped by the next writer
        try:
            clear_leftovers(st, [b for b in m.batches if b.shard == s], keep)
            st.sync()
            r = shard_rep[s]
            r["tables_after"] = len(doc_tables(st))
            size = st.nbytes()
            r["compacted"] = bool(force or size > live[s] * WASTE_FACTOR + WASTE_SLACK)
            if r["compacted"]:
                size = st.compact()[1]
            r["bytes_after"] = size
        finally:
            st.close()
    for s in range(k):
        r = shard_rep[s]
        r.setdefault("tables_after", r["tables_before"])
        r.setdefault("bytes_after", r["bytes_before"])
        r.setdefault("compacted", False)
        g = got.get(s)
        r["status"] = "folded" if g else r["status"]
        r["documents"] = g["documents"] if g else 0
        if g:
            r.update(windows=g["windows"], components=g["components"], splits=g["splits"],
                     leftovers_dropped=g["leftovers_dropped"], seconds=g["seconds"], max_rss=g["max_rss"])
    seconds = time.perf_counter() - t0
    after = sum(r["bytes_after"] for r in shard_rep)
    run.update(bytes_before=base["bytes_before"], bytes_after=after, seconds=round(seconds, 3))
    m.save(spec.root)
    return base | {"run_id": run.id, "status": "done", "merged": True, "batches_after": len(m.batches),
                   "tables_after": max(r["tables_after"] for r in shard_rep), "bytes_after": after,
                   "documents_rewritten": ndocs, "text_bytes_rewritten": text, "shards": shard_rep,
                   "fold_s": round(fold_s, 4), "mb_per_s": round(text / max(fold_s, 1e-9) / 1e6, 1),
                   "seconds": round(seconds, 4)}


def _sizes(spec: StoreSpec, k: int) -> list[int]:
    from ..maintain.compact import _shard_bytes

    return _shard_bytes(spec, k)


def _table_counts(spec: StoreSpec, k: int) -> list[int]:
    from ..maintain.compact import per_shard
    from .tables import doc_tables

    return per_shard(spec, k, lambda st: len(doc_tables(st)))
