"""The fold workers of `bulkload compact` on documents: rewrite shards' documents into one table.

A fold worker (`fold_worker`, one process per worker) owns whole shards (shard mod W, as
in a load) and folds each in turn (`fold_shard`): it opens the shard for writing, drops
the leftovers of failed runs or of a killed compaction (`clear_leftovers`), then rewrites
every committed document of the shard, id-sorted, into the compaction's new table
``docs-<compact run id>``, re-packed into fresh batches of about ``target`` documents by
the load worker's own encoder (`DocsWriter.encode`).

**Rows.** A worker reads its shards' batch rows from the catalog at the generation its
coordinator planned from (one streaming pass) into numpy columns (`ShardRows`, ~250
bytes a row at the peak, no Python object per row), and writes each shard's new rows to
a rows file (merge.RowsFile, seqs ``first_seq + j * shards + s``) that the coordinator's
switch streams: memory is flat in the number of batches.

**Windows.** Memory stays bounded: the shard's batches whose id ranges [lo, hi] overlap
form connected components (`component_bounds`; consecutive components of fewer than
``target`` documents are folded together, so many small batches of disjoint ids become
batches of about the target); a component is cut into id windows holding
about ``target`` documents each (`windows`: estimated from every batch's count and range,
as if its ids were spread uniformly), and each window is read from every overlapping
batch (`DocReader.batch_docs`), concatenated and sorted by id. A window that turns out
larger than ``SPLIT x target`` is split at the median id read so far and read again in
halves. Each window is written with one ``put_sorted`` (keys ascend across windows: LMDB
append, RocksDB SST ingestion).

Crash behaviour: a worker writes only the new table, which no committed batch names
until the coordinator's manifest switch (compact.py): a killed worker leaves an
unreferenced table that the next writer or compaction drops. Fault point ``fold`` (a
window was put, not yet synced). Nothing here touches the manifest.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..errors import VerifyError
from ..infra import faults
from ..infra.proc import peak_rss, start_worker
from ..kinds import kind_for
from ..maintain.merge import RowsFile, manifest_at
from ..model import manifest as mf
from ..stores import registry
from ..stores.options import DEFAULT_MAX_DBS
from ..stores.spec import StoreSpec
from .access import DocReader
from .batch import DocBatch, duplicate_ids, key_of, sort_by_id
from .layout import DOCS
from .tables import doc_tables, drop_doc_table

#: a window holding more than this many times the target is split
SPLIT = 4


# --- windows ---------------------------------------------------------------------------------


def component_bounds(lo: np.ndarray, hi: np.ndarray, docs: np.ndarray, target: int = 0) -> tuple[list, int]:
    """Over rows sorted by (lo, hi): ([(a, z)] index ranges of the fold groups, the number
    of components). A component is a run of rows whose id ranges overlap (transitively);
    consecutive components of fewer than ``target`` documents together are grouped (so
    that many small batches of disjoint ids become batches of about the target)."""
    n = len(lo)
    if not n:
        return [], 0
    top = np.maximum.accumulate(hi)
    starts = (np.flatnonzero(lo[1:] > top[:-1]) + 1).tolist()
    ends = np.concatenate([[0], np.cumsum(docs, dtype=np.uint64)]).tolist()
    out, a = [], 0
    for z in [*starts, n]:
        if ends[z] - ends[a] >= target or z == n:
            out.append((a, z))
            a = z
    return out, len(starts) + 1


def components(batches: list, target: int = 0) -> list[list]:
    """Groups of batches whose id ranges overlap (transitively), in id order; with a
    ``target``, consecutive small ones together (`component_bounds`)."""
    bs = sorted(batches, key=lambda b: (b.lo, b.hi))

    def col(f: str) -> np.ndarray:
        return np.array([getattr(b, f) for b in bs], dtype=np.uint64)

    bounds, _n = component_bounds(col("lo"), col("hi"), col("docs"), target)
    return [bs[a:z] for a, z in bounds]


class ShardRows:
    """One shard's committed document batch rows (keyed, with documents) as columns sorted
    by (lo, hi): ~90 bytes a row, no Python object per row (a fold worker holds the rows
    of its shards while it folds them), and the tables they name."""

    FIELDS = ("seq", "shard", "first", "count", "checksum", "nbytes", "lo", "hi", "docs", "text_bytes", "table")
    CHUNK = 512

    def __init__(self, cols: np.ndarray, names: list[str]):
        self.cols, self.names = cols, names  # names: the tables, by the index in column "table"

    @property
    def tables(self) -> list[str]:
        return sorted(self.names[t] for t in np.unique(self.cols[:, 10]).tolist())

    @classmethod
    def of(cls, batches: Iterable[mf.BatchEntry], shards: Iterable[int]) -> dict[int, ShardRows]:
        """{shard: its rows} of ``shards``, in one pass over ``batches`` (streamed)."""
        want = set(shards)
        tables: dict[str, int] = {}
        chunks: dict[int, list] = {s: [] for s in want}
        pending: dict[int, list] = {s: [] for s in want}
        for b in batches:
            if b.shard in want and b.keyed and b.docs:
                t = tables.setdefault(b.table or "", len(tables))
                rows = pending[b.shard]
                rows.append(
                    (b.seq, b.shard, b.first, b.count, b.checksum, b.nbytes, b.lo, b.hi, b.docs, b.text_bytes or 0, t)
                )
                if len(rows) >= cls.CHUNK:
                    chunks[b.shard].append(np.array(rows, dtype=np.uint64))
                    rows.clear()
        names = list(tables)
        out = {}
        for s in want:
            parts = [*chunks[s], np.array(pending[s], dtype=np.uint64).reshape(-1, len(cls.FIELDS))]
            cols = np.concatenate(parts)
            out[s] = cls(cols[np.lexsort((cols[:, 7], cols[:, 6]))], names)
        return out

    def __len__(self) -> int:
        return len(self.cols)

    def entry(self, i: int) -> mf.BatchEntry:
        seq, shard, first, count, checksum, nbytes, lo, hi, docs, text, table = self.cols[i].tolist()
        return mf.BatchEntry(seq, shard, first, count, checksum, nbytes, lo, hi, docs, self.names[table], text)

    def tops(self) -> dict[str, int]:
        """{table: the highest id a row of it holds}."""
        out: dict[str, int] = {}
        for t in np.unique(self.cols[:, 10]).tolist():
            out[self.names[t]] = int(self.cols[self.cols[:, 10] == t, 7].max())
        return out

    def groups(self, target: int) -> tuple[list, int]:
        """`component_bounds` of these rows."""
        return component_bounds(self.cols[:, 6], self.cols[:, 7], self.cols[:, 8], target)


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
    cuts: list[int] = []
    j, est, dens = 1, 0.0, 0.0
    for p, q in itertools.pairwise(points):
        dens += delta[p]
        seg = dens * (q - p)
        while j < n and est + seg >= j * total / n:
            x = p + int((j * total / n - est) / dens) if dens > 0 else p
            x = min(max(x, p), q - 1)
            if x > (cuts[-1] if cuts else lo):
                cuts.append(x)
            j += 1
        est += seg
    bounds = [lo, *cuts, hi + 1]
    return [(a, z - 1) for a, z in itertools.pairwise(bounds)]


# --- shards -----------------------------------------------------------------------------------


def open_writer(spec: StoreSpec, s: int, store_options: tuple, want_tables: int = 0):
    """Open shard s for writing with the run's store options and, on LMDB, room for every
    table it holds plus the new one (a dataset at its max_dbs limit must still fold)."""
    opts = dict(spec.options) | dict(store_options)
    if spec.scheme == "rocksdb":
        return registry.open_writer(spec, s, opts)
    limit = max(int(opts.get("max_dbs", DEFAULT_MAX_DBS)), want_tables + 64)
    st = registry.open_writer(spec, s, opts | {"max_dbs": str(limit)})
    n = len(doc_tables(st)) + 4
    if n > limit:
        st.close()
        st = registry.open_writer(spec, s, opts | {"max_dbs": str(n)})
    return st


def table_tops(batches: Iterable[mf.BatchEntry]) -> dict[int, dict[str, int]]:
    """{shard: {doc table: the highest id a committed batch of it holds}} (one pass)."""
    out: dict[int, dict[str, int]] = {}
    for b in batches:
        if b.keyed and b.docs and b.table is not None and b.hi is not None:
            top = out.setdefault(b.shard, {})
            top[b.table] = max(top.get(b.table, -1), b.hi)
    return out


def clear_leftovers(st, top: dict[str, int], keep=()) -> int:
    """Drop the doc tables of shard ``st`` that no committed batch names (``top``: {table:
    its highest committed id}, `table_tops`), except ``keep`` (tables the garbage list
    holds for readers), and the keys above each named table's highest committed id;
    returns tables dropped."""
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
    generation: int  # of the catalog the coordinator planned from (the worker reads its rows there)
    rows_files: tuple  # per shard of ``shards``: the path of its new rows (merge.RowsFile)
    first_seq: int  # of the new batches: shard s's j-th is first_seq + j * shards + s
    table: str  # the new table
    target: int
    keep_tables: tuple = ()  # tables the garbage list holds (not leftovers)
    store_options: tuple = ()
    main_pid: int = 0
    fault: str = ""


@dataclass(frozen=True)
class ShardFold:
    """What folding one shard wrote (its new batch rows: in its rows file) and figures
    for the report."""

    batches: int  # new batches (rows in the rows file)
    documents: int
    text_bytes: int
    windows: int
    components: int
    splits: int  # windows read again in halves
    leftovers_dropped: int
    seconds: float
    max_rss: int = 0  # the worker's peak resident set after this shard


@dataclass(frozen=True)
class FoldReceipt:
    """A fold worker's result: its shards' folds."""

    worker: int
    shards: dict  # {shard: ShardFold}


class _View:
    """What DocReader reads through: one shard, opened by this worker for writing."""

    def __init__(self, m: mf.Manifest, st, uri: str):
        self.manifest, self.layout, self._st, self.uri = m, DOCS, st, uri

    def shard(self, i: int):
        return self._st

    def moved_on(self):
        return None  # the dataset lock is held: nothing moves

    def missing(self, problem: str):
        return VerifyError(problem)


def fold_worker(task: FoldTask, progress_q) -> FoldReceipt:
    """One worker process: read its shards' rows from the catalog at the coordinator's
    generation (one pass), then fold each shard in turn (one writer per shard)."""
    start_worker(task)
    rows = ShardRows.of(manifest_at(task.store, task.generation).batches, task.shards)
    out = {}
    for s, path in zip(task.shards, task.rows_files):
        out[s] = dataclasses.replace(fold_shard(task, s, rows.pop(s), path, progress_q.put), max_rss=peak_rss())
    return FoldReceipt(task.worker, out)


def fold_shard(task: FoldTask, s: int, rows: ShardRows, rows_file: str, report=lambda n: None) -> ShardFold:
    """Rewrite shard s's committed documents (``rows``) into task.table, their new batch
    rows into ``rows_file`` (see the module docstring)."""
    t0 = time.perf_counter()
    m = mf.Manifest(**task.manifest)  # (DocReader reads the format; the rows are ``rows``)
    st = open_writer(task.store, s, task.store_options, len(rows.tables))
    out = RowsFile(rows_file, keyed=True)
    try:
        dropped = clear_leftovers(st, rows.tops(), task.keep_tables)  # includes a killed compaction's table
        folder = _ShardFolder(task, s, st, m, report, out)
        groups, folder.components = rows.groups(task.target)
        for a, z in groups:
            folder.fold_component([rows.entry(i) for i in range(a, z)])
        st.sync()
    finally:
        out.close()
        st.close()
    return ShardFold(
        out.rows,
        folder.documents,
        folder.text_bytes,
        folder.windows,
        folder.components,
        folder.splits,
        dropped,
        round(time.perf_counter() - t0, 4),
    )


class _ShardFolder:
    """Folds the components of one shard, window by window, into the new table; counts."""

    def __init__(self, task: FoldTask, s: int, st, m: mf.Manifest, report, out: RowsFile):
        self.task, self.s, self.st, self.report, self.out = task, s, st, report, out
        self.reader = DocReader(_View(m, st, task.store.uri))
        kind = kind_for(DOCS, m.format, m.compression)
        self.writer = kind.writer(SimpleNamespace(table=task.table, store=task.store))
        self.documents = self.text_bytes = self.windows = self.components = self.splits = 0

    def fold_component(self, comp: list) -> None:
        todo = list(reversed(windows(comp, self.task.target)))
        while todo:
            a, z = todo.pop()
            batch, split = self._read(comp, a, z)
            if split is not None:  # the estimate was far off: read it again in halves
                self.splits += 1
                todo += [(split, z), (a, split - 1)]
            elif batch is not None and len(batch):  # not split: read
                self._write(batch)

    def _read(self, comp: list, a: int, z: int) -> tuple[DocBatch | None, int | None]:
        """(the documents of ids a..z, sorted, None), or (None, the id to split the window
        at) once more than SPLIT x target of them were read."""
        parts, n = [], 0
        for b in comp:
            if b.hi < a or b.lo > z:
                continue
            d = self.reader.batch_docs(b, max(a, b.lo), min(z, b.hi))
            parts.append(d)
            n += len(d)
            if n > SPLIT * self.task.target and z > a:
                ids = np.sort(np.concatenate([p.ids for p in parts]))
                return None, min(max(int(ids[len(ids) // 2]), a + 1), z)
        batch = sort_by_id(DocBatch.concat(parts).compact())
        dup = duplicate_ids(batch.ids)
        if len(dup):
            raise VerifyError(
                f"shard {self.s} of {self.task.store.uri}: id {int(dup[0])} is stored by two batches; nothing "
                "was changed - run `bulkload verify` and reload the affected documents"
            )
        return batch, None

    def _write(self, batch: DocBatch) -> None:
        """One window: batches of about ``target`` documents, put with one ``put_sorted``."""
        self.windows += 1
        pieces = max(1, round(len(batch) / self.task.target))
        cuts = [len(batch) * i // pieces for i in range(pieces + 1)]
        items = []
        for i, j in itertools.pairwise(cuts):
            got, row, nb, _ = self.writer.encode(0, 0, j - i, (batch.slice(i, j), []), self.s, self.st)
            items += got
            row[0] = self.task.first_seq + self.out.rows * self.task.manifest["shards"] + self.s
            self.out.write(mf.BatchEntry(*row))
            self.text_bytes += nb
        self.st.put_sorted(items, table=self.task.table)
        faults.hit("fold")
        self.documents += len(batch)
        self.report(len(batch))
