"""The commit of a manifest: one durable LMDB write transaction of what changed.

`commit(m, root)` (``Manifest.save``; the caller holds the dataset's writer lock):

- ``m`` backed by this dataset's catalog (read from it): one write transaction with the
  appended batch rows (and their ``by_first`` keys), the runs whose JSON changed and the
  new ones, the new files, the header, the aggregates and the commit row - O(change). A
  table assigned whole (compaction's rows, pruned runs) is rewritten in that transaction;
  batch rows are streamed through it (the old ones retired by a walk in seq order beside
  the new ones, written in chunks of `ROWS_CHUNK`), so a commit holds no list of them.
- otherwise (a version-1 manifest, a new dataset, a fresh manifest over an emptied one):
  the whole manifest is written - into the dataset's catalog in one transaction when it
  has one; else a catalog is built beside (``catalog.tmp-PID``), synced, renamed into
  place (catalog.build), and then manifest.json is replaced by the pointer
  ``{"version": 2, "catalog": "catalog", "dataset_id": ...}``. A kill before the rename
  leaves the old manifest.json (and a leftover the next build removes); after it, the
  complete catalog beside a version-1 manifest.json, which readers take for the dataset
  (its generation is newer: manifest.read_manifest) and the next commit points at.

Afterwards ``m`` reads the new generation (a new read transaction); the Run objects
handed out stay the same objects, their JSON as written is the baseline of the next commit.
Fault points: ``catalog-built`` / ``catalog-renamed`` (catalog.py), ``pointer`` (before
manifest.json is replaced), ``catalog-commit`` (a delta written, not committed).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import lmdb

from ..errors import StoreError
from ..infra import faults
from ..infra.paths import MANIFEST
from . import catalog as cg
from .catalog_rows import BatchRows, FileMap, RunList, add_rows
from .runs import UNFINISHED, Run

if TYPE_CHECKING:
    from .manifest import BatchEntry, Manifest

T = TypeVar("T")
#: a run number -> (the run, its JSON as written)
Written = dict[int, tuple[Run, bytes]]
#: batch rows put per putmulti when a table is written whole
ROWS_CHUNK = 4096


def commit(m: Manifest, root: str) -> None:
    from .manifest import attach, write_json_atomic

    opened = None  # a catalog this commit opened (not m's own): its reference, given back at the end
    cat = _own_catalog(m, root)
    if cat is not None:
        while True:
            try:
                with cat.writing() as txn:
                    agg = _hit(_write_delta(m, txn, cat))
                break
            except cg.MapFull:
                cat.grow()  # closes m's read transaction: the same generation, read again
                _resnap(m, cat.snapshot())
    elif (read_from := _catalog_of(m)) is not None and getattr(m, "_as_of", None) is None:
        raise StoreError(
            f"the catalog {read_from.path} this job read is no longer the one of {root} (the "
            "dataset directory was moved or replaced meanwhile); nothing was committed"
        )
    else:
        path = os.path.join(root, cg.CATALOG)
        if os.path.isdir(path) and getattr(m, "_pointed", False) is False and _pointer_of(root) is None:
            cg.set_aside(root)  # a catalog no pointer names (stale): never the dataset
        if os.path.isdir(path):
            found = cat = cg.open_catalog(path)
            try:
                agg = cg.write(found, lambda txn: _hit(_write_all(m, txn, found, clear=True)))
            except BaseException:
                found.unref()
                raise
        else:
            out: dict[str, cg.Aggregates] = {}
            cat = cg.build(root, lambda txn, c: out.setdefault("agg", _write_all(m, txn, c, clear=False)))
            agg = out["agg"]
        opened = cat  # our reference, given up once m's new snapshot holds the catalog
    if _pointer_of(root) != m.dataset_id:
        faults.hit("pointer")
        write_json_atomic(
            Path(root) / MANIFEST, {"version": m.version, "catalog": cg.CATALOG, "dataset_id": m.dataset_id}
        )
        cg.remove_leftovers(root)
    held = {**m.runs.loaded} if m.runs.snap is not None and not m.runs.rewrite else {}
    attach(m, cat, cat.snapshot(), agg)  # the old snapshot ends when nothing holds it (a copy may)
    m.runs.loaded.update(held)
    for n, (run, _raw) in _written_runs.pop(id(m), {}).items():
        m.runs.loaded[n] = (run, _raw)
    object.__setattr__(m, "_pointed", True)
    if opened is not None:
        opened.unref()


def _hit(agg: T) -> T:
    faults.hit("catalog-commit")  # written, not committed
    return agg


#: the runs a commit wrote, by manifest: handed to the manifest's new RunList
_written_runs: dict[int, Written] = {}


def _catalog_of(m: Manifest) -> cg.Catalog | None:
    """The catalog ``m`` was read from (None: a version-1 manifest, a new dataset)."""
    cat: cg.Catalog | None = getattr(m, "_catalog", None)
    return cat


def _snap_of(m: Manifest) -> cg.Snap:
    """The snapshot of the catalog ``m`` was read from (a delta commit writes on it)."""
    snap: cg.Snap | None = getattr(m, "_snap", None)
    if snap is None:
        raise TypeError("the manifest was not read from a catalog")
    return snap


def _resnap(m: Manifest, snap: cg.Snap) -> None:
    """Point ``m`` and its tables at ``snap`` (the generation they were read from)."""
    for table in (m.batches, m.runs, m.files):
        if table.snap is getattr(m, "_snap", None):
            table.snap = snap
    object.__setattr__(m, "_snap", snap)


def _own_catalog(m: Manifest, root: str) -> cg.Catalog | None:
    """``m``'s catalog if it is the one at ``root`` now and ``m`` was read from it."""
    cat = _catalog_of(m)
    if cat is None or cat.pid != os.getpid():
        return None
    return cat if cg._same(cat, os.path.join(root, cg.CATALOG, "data.mdb")) else None


def _pointer_of(root: str) -> str | None:
    """The dataset id manifest.json points at (a version-2 pointer), else None."""
    from .manifest import read_pointer

    return read_pointer(root)


def _header(m: Manifest) -> bytes:
    return cg.encode(m.header())


def _commit_row(m: Manifest, agg: cg.Aggregates) -> bytes:
    last = m.runs[-1] if len(m.runs) else None
    return cg.encode(
        {
            "time": time.time(),
            "run": last.id if last else None,
            "kind": last.kind if last else None,
            "records": agg.records,
            "batches": agg.batches,
            "next_seq": agg.next_seq,
            "runs": agg.runs,
            "header": m.header(),
        }
    )


def _retire(m: Manifest, txn: lmdb.Transaction, cat: cg.Catalog, kept: Iterator[int]) -> None:
    """The rows of the table now that the new one does not keep (``kept``: its seqs in
    ascending order, walked beside the table's): kept in ``retired`` with the generation
    that removed them (time travel reads them while their data lives)."""
    db = cat.dbs["batches"]
    nxt = next(kept, None)
    with txn.cursor(db=db) as cur:
        for k, raw in cur:
            seq = cg.unkey(k)
            while nxt is not None and nxt < seq:
                nxt = next(kept, None)
            if nxt != seq:
                txn.put(k, cg.pack_row([*cg.unpack_row(raw), m.generation]), db=cat.dbs["retired"])


def _note_collected(m: Manifest, txn: lmdb.Transaction, cat: cg.Catalog) -> None:
    """Garbage entries gone from the list were collected: the data of generations below
    theirs is gone - ``readable_from`` (the oldest generation time travel can read)."""
    old = _snap_of(m).header().get("garbage", [])
    now = [g.to_dict() for g in m.garbage]
    gone = [g.get("generation", 0) for g in old if g not in now]
    if gone:
        was = txn.get(b"readable_from", db=cat.dbs["meta"])
        oldest = max([int(was or 0), *gone])
        txn.put(b"readable_from", cg.encode(oldest), db=cat.dbs["meta"])
        with txn.cursor(db=cat.dbs["retired"]) as cur:  # rows no readable generation lists any more
            ok = cur.first()
            while ok and cur.key():  # deleted as walked (no list: a compaction retires every row)
                # (delete moves to the next item; b"" past the end, keys are never empty)
                ok = cur.delete() if cg.unpack_row(cur.value())[-1] <= oldest else cur.next()


def _put_rows(txn: lmdb.Transaction, cat: cg.Catalog, rows: list[BatchEntry]) -> None:
    """Batch rows (and ``by_first`` keys of fixed-size records) in seq order: appended
    at the end of the table (putmulti append: LMDB's fast path), or - a key that is not
    above every key there, which putmulti(append) would silently drop (DESIGN.md 5) -
    put one by one."""
    key, pack = cg.KEY.pack, cg.PACK.encode  # (cg.key / cg.pack_row without their calls: 200,000 rows)
    packed = [
        (key(b.seq), pack((b.seq, b.shard, b.first, b.count, b.checksum, b.nbytes) if b.table is None else b.row()))
        for b in rows
    ]  # (a fixed-size row's tuple packs as its row() list does: a msgpack array)
    firsts = [(key(b.first), k) for b, (k, _v) in zip(rows, packed, strict=True) if b.table is None]
    for db, items in ((cat.dbs["batches"], packed), (cat.dbs["by_first"], firsts)):
        if not items:
            continue
        with txn.cursor(db=db) as cur:
            _consumed, added = cur.putmulti(items, append=True)
        if added != len(items):  # out of order: every item the slow way (put overwrites)
            for k, v in items:
                txn.put(k, v, db=db)


def _put_all_rows(txn: lmdb.Transaction, cat: cg.Catalog, rows: Iterable[BatchEntry]) -> cg.Aggregates:
    """A whole table's rows (any number, in chunks) into the emptied tables; their aggregates."""
    agg = cg.Aggregates()
    it = iter(rows)
    while chunk := list(itertools.islice(it, ROWS_CHUNK)):
        _put_rows(txn, cat, chunk)
        add_rows(agg, chunk)
    return agg


def _write_all(m: Manifest, txn: lmdb.Transaction, cat: cg.Catalog, clear: bool) -> cg.Aggregates:
    """Every table of ``m`` (iterated: any backing) into the catalog."""
    if clear:
        for name in cg.DBS:
            txn.drop(cat.dbs[name], delete=False)
    agg = _put_all_rows(txn, cat, m.batches)
    runs = list(m.runs)
    _put_runs_all(m, txn, cat, runs, agg)
    for name, value in m.files.items():
        txn.put(name.encode(), cg.encode(value), db=cat.dbs["files"])
    _finish(m, txn, cat, agg)
    return agg


def _put_runs_all(m: Manifest, txn: lmdb.Transaction, cat: cg.Catalog, runs: list[Run], agg: cg.Aggregates) -> None:
    written: Written = {}
    for n, r in enumerate(runs):
        _put_new_run(txn, cat, agg, n, r, written)
    agg.runs = len(runs)
    _written_runs[id(m)] = written


def _put_new_run(
    txn: lmdb.Transaction, cat: cg.Catalog, agg: cg.Aggregates, n: int, run: Run, written: Written
) -> None:
    """Run ``run`` as number ``n``: its JSON, id and sources indexed, counted."""
    now = cg.encode(run.to_dict())
    txn.put(cg.key(n), now, db=cat.dbs["runs"])
    txn.put(run.id.encode(), cg.key(n), db=cat.dbs["run_ids"])
    _index_sources(txn, cat, n, run)
    _count_run(agg, n, run, +1)
    written[n] = (run, now)


def _index_sources(txn: lmdb.Transaction, cat: cg.Catalog, n: int, r: Run) -> None:
    """``by_source``: run ``n`` loaded its source, and each of its inputs' (catalog.py)."""
    for source in r.sources():
        txn.put(cg.source_key(source, n), b"", db=cat.dbs["by_source"])


def _count_run(agg: cg.Aggregates, n: int, r: Run, sign: int) -> None:
    agg.runs_by_status[r.status] = agg.runs_by_status.get(r.status, 0) + sign
    if not agg.runs_by_status[r.status]:
        del agg.runs_by_status[r.status]
    if sign > 0:
        if r.status in UNFINISHED and n not in agg.unfinished:
            agg.unfinished.append(n)
        if r.replaces_dataset():
            agg.last_replace = max(agg.last_replace, n)
        if r.kind == "compact" and r.status == "done":
            agg.last_compact = max(agg.last_compact, n)
    elif n in agg.unfinished and r.status in UNFINISHED:
        agg.unfinished.remove(n)


def _write_delta(m: Manifest, txn: lmdb.Transaction, cat: cg.Catalog) -> cg.Aggregates:
    rows: BatchRows = m.batches
    _note_collected(m, txn, cat)
    if rows.rewrite or rows.snap is not getattr(m, "_snap", None):
        _retire(m, txn, cat, rows.seqs())
        txn.drop(cat.dbs["batches"], delete=False)
        txn.drop(cat.dbs["by_first"], delete=False)
        agg = _put_all_rows(txn, cat, rows)
        runs_agg = _snap_of(m).aggregates()
        for f in ("runs", "runs_by_status", "unfinished", "last_replace", "last_compact"):
            setattr(agg, f, getattr(runs_agg, f))
    else:
        _put_rows(txn, cat, rows.new)
        agg = _snap_of(m).aggregates()
        add_rows(agg, rows.new)
    runs: RunList = m.runs
    if runs.rewrite or runs.snap is not getattr(m, "_snap", None):
        for name in ("runs", "run_ids", "by_source"):
            txn.drop(cat.dbs[name], delete=False)
        agg.runs, agg.runs_by_status, agg.unfinished, agg.last_replace, agg.last_compact = 0, {}, [], -1, -1
        _put_runs_all(m, txn, cat, list(runs), agg)
    else:
        written: Written = {}
        for n, (run, raw) in list(runs.loaded.items()):
            now = cg.encode(run.to_dict())
            if now != raw:
                before = cg.decode(raw)  # read as a run (catalog_rows.RunList._run): an object
                assert isinstance(before, dict)
                _count_run(agg, n, Run.from_dict(before), -1)
                _count_run(agg, n, run, +1)
                txn.put(cg.key(n), now, db=cat.dbs["runs"])
                _index_sources(txn, cat, n, run)
                written[n] = (run, now)
        for i, run in enumerate(runs.new):
            _put_new_run(txn, cat, agg, agg.runs + i, run, written)
        agg.runs += len(runs.new)
        _written_runs[id(m)] = written
    files: FileMap = m.files
    if files.rewrite or files.snap is not getattr(m, "_snap", None):
        txn.drop(cat.dbs["files"], delete=False)
        for name, value in files.items():
            txn.put(name.encode(), cg.encode(value), db=cat.dbs["files"])
    else:
        for name, value in files.new.items():
            txn.put(name.encode(), cg.encode(value), db=cat.dbs["files"])
    agg.unfinished.sort()
    _finish(m, txn, cat, agg)
    return agg


def _finish(m: Manifest, txn: lmdb.Transaction, cat: cg.Catalog, agg: cg.Aggregates) -> None:
    agg.unfinished.sort()
    meta = cat.dbs["meta"]
    txn.put(b"header", _header(m), db=meta)
    txn.put(b"aggregates", cg.encode(agg), db=meta)
    txn.put(cg.key(m.generation), _commit_row(m, agg), db=cat.dbs["commits"])
