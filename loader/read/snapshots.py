"""Snapshots: what keeps a reader's data on disk while compact / finalize move on.

A reader (`loader.open`) reads the manifest once. To keep the data that manifest names
until the reader closes, it *pins* the manifest's generation: a shared ``flock`` on the
pin file ``ROOT/.readers/GEN`` (created on demand). Writers never wait for pins: data a
writer makes unreachable is listed as garbage (loader/garbage.py) and deleted only when
no pin on an older generation is held (`oldest_pinned` probes each pin file with
``LOCK_EX|LOCK_NB``; a pin file it can lock is unused and is removed).

Pinning is race-free against a concurrent writer and collector:

1. open the manifest and read it (generation G), keeping the file open;
2. open or create ``.readers/G``, flock it shared, and check that the path still names
   the inode locked (a collector may have removed it as unused meanwhile: take a new one);
3. check that ``manifest.json`` still names the inode read in 1 (an open inode cannot be
   reused). Then no manifest write happened before the pin was in place, so a collector
   that could delete data of generation G runs after that write and sees the pin.
   Otherwise release the pin and start over with the newer manifest.

A reader that cannot create or open its pin file (a read-only directory), or is opened
with ``pin=False``, reads unpinned: a later compaction may remove data of its snapshot,
and reading that data raises SnapshotExpiredError ("open it again").

Crash behaviour: the kernel drops a dead reader's flock with its process; the pin file
left behind is removed by the next collector (or by the next reader of that generation
when it closes).
"""

from __future__ import annotations

import os

from ..errors import BulkloadError
from ..infra.pins import PIN_ATTEMPTS, Pin, file_ident, same_file
from ..model import manifest as mf


def manifest_ident(root: str) -> tuple[int, int, int] | None:
    """(device, inode, generation) of the manifest now, or None when it cannot be read.
    Every manifest write makes a new file, but the file system may give it the inode of
    one it freed (ext4 does, soon): the generation, which every write increments, tells
    them apart (a reader took a manifest rewritten twice for its own, and named data
    that compact had deleted a damaged batch instead of "open it again")."""
    try:
        with mf.open_manifest(root) as f:
            return _ident(os.fstat(f.fileno()), mf.read_manifest(f))
    except BulkloadError:
        return None


def read_snapshot(root: str, uri: str | None = None, pin: bool = True):
    """(manifest, its `manifest_ident`, Pin or None) of the dataset at ``root`` now."""
    path = os.path.join(root, mf.MANIFEST)
    for _ in range(PIN_ATTEMPTS):
        with mf.open_manifest(root, uri) as f:
            m = mf.check_store(mf.read_manifest(f), root, uri)
            st = os.fstat(f.fileno())
            held = Pin.take(root, m.generation) if pin else None
            if held is None or same_file(path, st):
                return m, _ident(st, m), held
            held.release()  # a writer saved a newer manifest meanwhile: pin that one
    return m, _ident(st, m), None  # writers kept moving: read unpinned


def _ident(st: os.stat_result, m: mf.Manifest) -> tuple[int, int, int]:
    return file_ident(st) + (m.generation,)


