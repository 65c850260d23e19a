"""Atomic filesystem steps shared by replace (whole datasets) and LMDB compaction (shards)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_AT_FDCWD, _RENAME_EXCHANGE = -100, 2
_renameat2 = None


def exchange(a: str, b: str) -> bool:
    """Swap two paths in one atomic step (renameat2 RENAME_EXCHANGE).

    Returns False when the kernel or filesystem cannot; callers then fall back to
    two renames.
    """
    global _renameat2
    if _renameat2 is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fn = libc.renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _renameat2 = fn
        except (OSError, AttributeError):
            _renameat2 = False
    if not _renameat2:
        return False
    return _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def fsync_dir(path: str) -> None:
    """Make a rename or a new entry in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
