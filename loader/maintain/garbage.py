"""Deferred garbage: committed data that a manifest write made unreachable, deleted once
no reader can still need it.

compact (the old batch keys after a merge), finalize (a rebuilt array's old table and
chunk index file) and the documents compaction (a folded shard's old tables) do not
delete what they replace. They list it in ``manifest.garbage`` in the same manifest
write as the switch (`retire_*`); that write stamps each entry with its generation G, so
the data is referenced by generations below G only. `collect_garbage` deletes the
entries no pinned reader can need (no pin on a generation below G, see
loader/snapshots.py) and writes the manifest without them. What is still pinned stays
listed and is collected by a later writer: every writing command calls `start_writing`
once it holds the dataset lock.

Entries (model/garbage_entry.py's `GarbageEntry`, JSON objects in the manifest):

- ``{"kind": "batches", "below": SEQ}``: every batch key below SEQ, in every shard;
- ``{"kind": "array", "table": T, "index": PATH}``: table T in every shard, and the chunk
  index file ROOT/PATH;
- ``{"kind": "doc-tables", "shard": S, "tables": [T, ...]}``: document tables (with their
  zstd dictionaries) of shard S.

An entry of a kind this version does not know (a newer one wrote it) stays listed and is
never collected: its data stays until a version that knows it deletes it.

Sweeps that remove *uncommitted* leftovers (tables of failed or killed runs, index files
of crashed builds - `collect_index_garbage` -, keys at or above ``next_seq``) run at once
as before, but keep what the garbage list holds (`held_tables`, `held_files`,
`holds_batches`).

Crash behaviour: deletion is idempotent and an entry leaves the manifest only after its
data is gone, so a kill anywhere leaves entries that the next writer collects again.
Fault points: ``collect`` (before the first deletion), ``collected`` (all deleted, the
manifest not yet written), and between shards ``deleting`` (batches), ``dropping``
(arrays), ``docs-dropping`` (document tables).
"""

from __future__ import annotations

import itertools
import os

from ..infra import faults
from ..infra.pins import oldest_pinned
from ..kinds import kind_for
from ..model import manifest as mf
from ..model import runs
from ..model.chunk_index import INDEX_DIR, TABLE_PREFIX
from ..model.garbage_entry import (
    ARRAY,
    BATCHES,
    DOC_TABLES,
    KINDS,
    ArrayGarbage,
    BatchesGarbage,
    DocTablesGarbage,
    GarbageEntry,
)
from ..model.options import check_count
from ..model.placement import batch_key
from ..stores.registry import open_writer
from .builds import discard_dead_build
from .merge import remove_rows_files

_FAULT_BETWEEN_SHARDS: dict[str, str] = {BATCHES: "deleting", ARRAY: "dropping", DOC_TABLES: "docs-dropping"}


# --- recording (in the switch's manifest write) ---------------------------------------------


def retire_batches(m: mf.Manifest, below: int) -> None:
    """Every batch key below ``below`` (the first seq of a merge) is unreferenced."""
    m.garbage.append(GarbageEntry.batches(below))


def retire_array(m: mf.Manifest, summary: dict) -> None:
    """The build an array summary names (its table and index file) is unreferenced."""
    m.garbage.append(GarbageEntry.array(summary["table"], summary["index"]))


def retire_doc_tables(m: mf.Manifest, shard: int, tables) -> None:
    """These document tables of ``shard`` are unreferenced."""
    m.garbage.append(GarbageEntry.doc_tables(shard, tables))


# --- what sweeps of uncommitted leftovers must keep -------------------------------------------


def held_tables(m: mf.Manifest | None) -> set[str]:
    out: set[str] = set()
    for e in m.garbage if m is not None else ():
        if isinstance(e, ArrayGarbage):
            out.add(e.table)
        elif isinstance(e, DocTablesGarbage):
            out.update(e.tables)
    return out


def held_files(m: mf.Manifest) -> set[str]:
    """Base names of the index files the garbage list holds."""
    return {os.path.basename(e.index) for e in m.garbage if isinstance(e, ArrayGarbage)}


def holds_batches(m: mf.Manifest) -> bool:
    return any(e.kind == BATCHES for e in m.garbage)


def collect_index_garbage(root: str, m: mf.Manifest) -> None:
    """Remove index files (and their temporaries) that neither an array of the manifest
    nor its garbage list (replaced builds readers may still use) refers to: left by a
    finalize that crashed before its manifest switch. Call with the dataset lock held."""
    d = os.path.join(root, INDEX_DIR)
    if not os.path.isdir(d):
        return
    live = {os.path.basename(a["index"]) for a in m.arrays.values()} | held_files(m)
    for name in os.listdir(d):
        if name.startswith(TABLE_PREFIX) and name not in live:
            try:
                os.unlink(os.path.join(d, name))
            except OSError:
                pass


# --- collecting -------------------------------------------------------------------------------


def collect_garbage(spec, m: mf.Manifest) -> int:
    """Delete every entry no live reader can need (dataset lock held, ``m`` the current
    manifest); writes the manifest when entries went. Returns the entries collected."""
    if not m.garbage:
        return 0
    oldest = oldest_pinned(spec.root)
    kept = m.generation - m.keep_snapshots  # the last K generations stay readable (`keep_snapshots`)
    due = [
        e
        for e in m.garbage
        if e.kind in KINDS
        and e.generation is not None
        and e.generation <= kept
        and (oldest is None or oldest >= e.generation)
    ]
    if not due:
        return 0
    spec = spec.with_shards(m.shards)
    record_kind = kind_for(m.layout_obj, m.format, m.compression)
    faults.hit("collect")
    steps = itertools.count()  # shards done so far, over all entries (for the fault points)
    done = [e for e in due if _delete(spec, record_kind, e, steps)]
    if not done:
        return 0
    faults.hit("collected")
    m.garbage = [e for e in m.garbage if all(e is not d for d in done)]
    m.save(spec.root)
    return len(done)


#: the most generations `keep_snapshots` may keep
MAX_KEEP_SNAPSHOTS = 1_000_000


def check_keep_snapshots(keep: int | None) -> None:
    """UsageError (exit 2) unless ``keep`` is None or a count of generations."""
    check_count("--keep-snapshots", keep, 0, MAX_KEEP_SNAPSHOTS)


def set_keep_snapshots(spec, m: mf.Manifest, keep: int | None) -> None:
    """Make ``keep`` the dataset's retention of old snapshots (lock held, before
    `start_writing` collects): the data of the last ``keep`` generations before the
    current one is not collected, so `as_of` reads them; it is kept in the catalog for every
    later writer until changed. None: leave it as it is."""
    if keep is None or keep == m.keep_snapshots:
        return
    m.extra["keep_snapshots"] = int(keep)
    m.save(spec.root)


def start_writing(spec, m: mf.Manifest | None, *, progress: str = "none", replacing: bool = False) -> None:
    """What every writing command does first, holding the dataset lock: the build of a
    --replace whose job died is deleted (builds.py; not by --replace, which may resume
    it), so are the rows files of a compaction that died (merge.py; only a compaction
    holding the lock writes them), runs still ``running`` belong to a job that died
    (they become ``interrupted``), and garbage no reader needs any more is deleted."""
    if not replacing:
        discard_dead_build(spec.root, progress)
    remove_rows_files(spec.root)
    if m is None:
        return
    if runs.mark_interrupted(m):
        m.save(spec.root)
    collect_garbage(spec, m)


def _delete(spec, record_kind, e: GarbageEntry, steps) -> bool:
    """Delete one entry's data; False when some shard could not be done (kept for later)."""
    kind = e.kind
    shards = [e.shard] if isinstance(e, DocTablesGarbage) else range(spec.shards)
    ok = True
    for s in shards:
        if next(steps):
            faults.hit(_FAULT_BETWEEN_SHARDS[kind])
        ok &= _in_shard(spec, s, lambda st: _delete_in(st, record_kind, e))
    if isinstance(e, ArrayGarbage):
        try:
            os.unlink(os.path.join(spec.root, e.index))
        except FileNotFoundError:
            pass
        except OSError:
            ok = False
    return ok


def _delete_in(st, record_kind, e: GarbageEntry) -> None:
    if isinstance(e, BatchesGarbage):
        st.delete_range(None, batch_key(e.below))
    elif isinstance(e, ArrayGarbage):
        st.drop_table(e.table)
    elif isinstance(e, DocTablesGarbage):  # tables of the record kind (documents: with their zstd dictionaries)
        for t in e.tables:
            record_kind.drop_table(st, t)
    st.sync()


def _in_shard(spec, s: int, fn) -> bool:
    """fn(store) on shard s opened for writing; False when it failed (best effort: the
    entry stays listed and a later writer tries again)."""
    if not os.path.exists(spec.shard_path(s)):
        return True
    try:
        st = open_writer(spec, s, dict(spec.options))
    except Exception:
        return False
    try:
        fn(st)
        return True
    except Exception:
        return False
    finally:
        st.close()
