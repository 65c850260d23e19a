"""Snapshots: what keeps a reader's data on disk while compact / finalize move on.

A reader (`loader.open`) reads the manifest once. To keep the data that manifest names
until the reader closes, it *pins* the manifest's generation: a shared ``flock`` on the
pin file ``ROOT/.readers/GEN`` (created on demand). Writers never wait for pins: data a
writer makes unreachable is listed as garbage (loader/garbage.py) and deleted only when
no pin on an older generation is held (`oldest_pinned` probes each pin file with
``LOCK_EX|LOCK_NB``; a pin file it can lock is unused and is removed).

Pinning is race-free against a concurrent writer and collector:

1. read the dataset's metadata: a version-2 dataset, a read transaction of its catalog
   (model/catalog.py) - a consistent generation G that no later commit changes; a
   version-1 one, manifest.json read whole, the file kept open;
2. open or create ``.readers/G``, flock it shared, and check that the path still names
   the inode locked (a collector may have removed it as unused meanwhile: take a new one);
3. check that the dataset is still at G (`manifest_ident`: a new read transaction of the
   catalog gives its dataset id and generation; version 1: ``manifest.json`` still names
   the inode read in 1 - an open inode cannot be reused - and the generation is G). Then
   no commit happened before the pin was in place, so a collector that could delete data
   of generation G runs after that commit (it runs after the commit that listed the data
   as garbage) and sees the pin. Otherwise release the pin and start over.

The catalog's own pages of G are kept by the read transaction (LMDB's MVCC) as long as
the reader holds its manifest; the pin keeps the shards' data of G.

A reader that cannot create or open its pin file (a read-only directory), or is opened
with ``pin=False``, reads unpinned: a later compaction may remove data of its snapshot,
and reading that data raises SnapshotExpiredError ("open it again").

Crash behaviour: the kernel drops a dead reader's flock with its process; the pin file
left behind is removed by the next collector (or by the next reader of that generation
when it closes).
"""

from __future__ import annotations

import os
from typing import IO, TypeAlias

from ..errors import BulkloadError
from ..infra.pins import PIN_ATTEMPTS, Pin, file_ident
from ..model import catalog_history
from ..model import manifest as mf

#: what identifies a dataset's committed state (`manifest_ident`): (dataset id, generation), or
#: (device, inode, generation) of a version-1 manifest file
Ident: TypeAlias = tuple[str | int, ...]
#: (manifest, its `Ident` while it was current or None, the Pin holding it or None): `read_snapshot`
Snapshot: TypeAlias = tuple[mf.Manifest, Ident | None, Pin | None]


def manifest_ident(root: str) -> Ident | None:
    """What identifies the dataset's committed state now, or None when it cannot be read:
    (dataset id, generation) of a catalog (a new read transaction: every commit increments
    the generation, a --replace changes the id); of a version-1 manifest (device, inode,
    generation) - every write makes a new file, but the file system may give it the inode
    of one it freed (ext4 does, soon): the generation tells them apart."""
    try:
        with mf.open_manifest(root) as f:
            return _ident(f, mf.read_manifest(f))
    except BulkloadError:
        return None


def read_snapshot(root: str, uri: str | None = None, pin: bool = True, as_of: int | str | None = None) -> Snapshot:
    """(manifest, its `manifest_ident`, Pin or None) of the dataset at ``root`` now; or,
    ``as_of`` (a generation or a run id), of that earlier generation (catalog_history.py),
    pinned and then checked to be still readable."""
    if as_of is not None:
        return _read_as_of(root, uri, pin, as_of)
    for _ in range(PIN_ATTEMPTS):
        with mf.open_manifest(root, uri) as f:
            m = mf.check_store(mf.read_manifest(f), root, uri)
            ident = _ident(f, m)
        held = Pin.take(root, m.generation) if pin else None
        if held is None or manifest_ident(root) == ident:
            return m, ident, held
        held.release()  # a writer committed meanwhile: pin the newer generation
    return m, ident, None  # writers kept moving: read unpinned


def _read_as_of(root: str, uri: str | None, pin: bool, as_of: int | str) -> Snapshot:
    m, _ident_now, held = read_snapshot(root, uri, pin=False)
    old = catalog_history.manifest_at(m, as_of, uri or root)
    if old is m:
        return read_snapshot(root, uri, pin)
    held = Pin.take(root, old.generation) if pin else None
    try:
        catalog_history.manifest_at(mf.load_manifest(root, uri), old.generation, uri or root)  # after the pin
    except BaseException:
        if held is not None:
            held.release()
        raise
    return old, (old.dataset_id, old.generation), held


def _ident(f: IO[bytes], m: mf.Manifest) -> Ident:
    """(dataset id, generation) of a catalog; (device, inode, generation) of the version-1
    manifest file ``f`` that ``m`` was read from."""
    if getattr(m, "_catalog", None) is not None:
        return (m.dataset_id, m.generation)
    return (*file_ident(os.fstat(f.fileno())), m.generation)
