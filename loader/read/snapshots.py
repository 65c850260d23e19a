"""Reader pins: what keeps a reader's snapshot on disk while compact / finalize move on.

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

import fcntl
import os

from ..model import manifest as mf
from ..infra.fsatomic import path_ident

READERS = ".readers"
#: pin attempts before a reader gives up and reads unpinned (each retry follows a manifest write)
PIN_ATTEMPTS = 50


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _names(path: str, st: os.stat_result) -> bool:
    """Whether ``path`` still names the file of ``st``."""
    return path_ident(path) == _ident(st)


def manifest_ident(root: str) -> tuple[int, int] | None:
    """(device, inode) of the manifest file now: every manifest write changes it."""
    return path_ident(os.path.join(root, mf.MANIFEST))


def _open_pin_file(path: str) -> int | None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:  # a read-only dataset directory: an existing pin file still works
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None


class Pin:
    """A reader's shared flock on ``ROOT/.readers/GEN``; `release` (or garbage
    collection of the object, or the process's end) gives it up."""

    def __init__(self, fd: int, path: str, generation: int):
        self.fd: int | None = fd
        self.path = path
        self.generation = generation

    @classmethod
    def take(cls, root: str, generation: int) -> "Pin | None":
        path = os.path.join(root, READERS, str(generation))
        for _ in range(PIN_ATTEMPTS):
            fd = _open_pin_file(path)
            if fd is None:
                return None
            fcntl.flock(fd, fcntl.LOCK_SH)  # a collector holds LOCK_EX only to unlink
            if _names(path, os.fstat(fd)):
                return cls(fd, path, generation)
            os.close(fd)  # removed as unused between open and lock: take a fresh one
        return None

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is None:
            return
        try:  # the last reader of this generation removes its pin file
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _names(self.path, os.fstat(fd)):
                os.unlink(self.path)
        except OSError:
            pass  # another reader holds it (or the directory is read-only): it stays
        finally:
            os.close(fd)

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


def read_snapshot(root: str, uri: str | None = None, pin: bool = True):
    """(manifest, (device, inode) of its file, Pin or None) of the dataset at ``root`` now."""
    path = os.path.join(root, mf.MANIFEST)
    for _ in range(PIN_ATTEMPTS):
        with mf.open_manifest(root, uri) as f:
            m = mf.read_manifest(f)
            ident = os.fstat(f.fileno())
            held = Pin.take(root, m.generation) if pin else None
            if held is None or _names(path, ident):
                return m, _ident(ident), held
            held.release()  # a writer saved a newer manifest meanwhile: pin that one
    return m, _ident(ident), None  # writers kept moving: read unpinned


def oldest_pinned(root: str) -> int | None:
    """The oldest generation a live reader pins (None: no reader); removes the pin files
    of generations no reader holds any more. For writers holding the dataset lock."""
    d = os.path.join(root, READERS)
    try:
        names = os.listdir(d)
    except OSError:
        return None
    oldest = None
    for name in names:
        if not name.isdigit():
            continue
        path = os.path.join(d, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _names(path, os.fstat(fd)):
                os.unlink(path)
        except BlockingIOError:
            oldest = int(name) if oldest is None else min(oldest, int(name))
        except OSError:
            pass
        finally:
            os.close(fd)
    return oldest
