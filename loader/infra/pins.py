"""Reader pins: shared flocks on ``ROOT/.readers/GEN`` that keep a reader's snapshot on disk.

A reader pins the manifest generation it read (loader/read/snapshots.py says how, race
free); writers never wait for pins: data a writer makes unreachable is listed as garbage
(loader/maintain/garbage.py) and deleted only when no pin on an older generation is held
(`oldest_pinned` probes each pin file with ``LOCK_EX|LOCK_NB``; a pin file it can lock
is unused and is removed).

Crash behaviour: the kernel drops a dead reader's flock with its process; the pin file
left behind is removed by the next collector (or by the next reader of that generation
when it closes).
"""

from __future__ import annotations

import fcntl
import os

from .fsatomic import mkdir_inside, path_ident

READERS = ".readers"
#: pin attempts before a reader gives up and reads unpinned (each retry follows a manifest write)
PIN_ATTEMPTS = 50


def file_ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def same_file(path: str, st: os.stat_result) -> bool:
    """Whether ``path`` still names the file of ``st``."""
    return path_ident(path) == file_ident(st)


def _open_pin_file(path: str) -> int | None:
    try:
        mkdir_inside(os.path.dirname(path))
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:  # a read-only dataset directory: an existing pin file still works
        try:
            return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: no wait
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
    def take(cls, root: str, generation: int) -> Pin | None:
        path = os.path.join(root, READERS, str(generation))
        for _ in range(PIN_ATTEMPTS):
            fd = _open_pin_file(path)
            if fd is None:
                return None
            fcntl.flock(fd, fcntl.LOCK_SH)  # a collector holds LOCK_EX only to unlink
            if same_file(path, os.fstat(fd)):
                return cls(fd, path, generation)
            os.close(fd)  # removed as unused between open and lock: take a fresh one
        return None

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is None:
            return
        try:  # the last reader of this generation removes its pin file
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if same_file(self.path, os.fstat(fd)):
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
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: no wait
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if same_file(path, os.fstat(fd)):
                os.unlink(path)
        except BlockingIOError:
            oldest = int(name) if oldest is None else min(oldest, int(name))
        except OSError:
            pass
        finally:
            os.close(fd)
    return oldest
