"""Atomic filesystem steps shared by replace (whole datasets) and LMDB compaction (shards),
and `path_ident`, which tells whether a path was swapped or replaced since it was read."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

_AT_FDCWD, _RENAME_EXCHANGE = -100, 2
#: libc's renameat2 (a ctypes function), once looked up; False: the libc has none
_renameat2: Callable[..., int] | Literal[False] | None = None


def exchange(a: str, b: str) -> bool:
    """Swap two paths in one atomic step (renameat2 RENAME_EXCHANGE).

    Returns False when the kernel or filesystem cannot; callers then fall back to
    two renames.
    """
    global _renameat2
    if _renameat2 is None:
        import ctypes  # start-up: only a swap needs libc (ctypes.util imports tempfile, subprocess)
        import ctypes.util

        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fn = libc.renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _renameat2 = fn
        except (OSError, AttributeError):
            _renameat2 = False
    if _renameat2 is False or _renameat2 is None:
        return False
    return _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def fsync_dir(path: str) -> None:
    """Make a rename or a new entry in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def path_ident(path: str) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` names now, or None when nothing: an atomic rename
    or exchange onto the path changes it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def mkdir_inside(path: str) -> None:
    """Create the directory ``path`` (if missing) inside an existing one - never its
    parents: a dataset directory moved or removed while a job uses it must not be
    re-created, empty, at its old path (FileNotFoundError instead)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
