"""What of a file is in the page cache, and dropping a file from it.

`page_cached` asks cachestat(2) (Linux >= 6.5; ~1 us) or else mincore(2) of a mapping
(~2.5 us) about one page: neither touches it nor starts a read. A one-byte RWF_NOWAIT
read can: on a miss the kernel starts reading the page, and on a fast disk that read may
finish before the call returns, so a cold page passes for cached (1-2 % of cold reads
here). `evict` drops a file (fsync, then POSIX_FADV_DONTNEED) and checks with mincore
that it went: a DONTNEED is advice, and a page in a per-CPU LRU batch or inside a large
folio can outlive one.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading
import time

PAGE = mmap.PAGESIZE


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if not all(hasattr(libc, f) for f in ("mmap", "munmap", "mincore")):
        return None
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    libc.mmap.restype = ctypes.c_void_p
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    libc.mincore.restype = ctypes.c_int
    return libc


_LIBC = _libc()
_CACHESTAT = 451  # the syscall's number: the same on every architecture (added after the unified table)
_has_cachestat = _LIBC is not None and hasattr(_LIBC, "syscall")
_ARGS = ctypes.c_uint64 * 7  # cachestat's range (offset, length), then its five counts (cached first)
_local = threading.local()


def page_cached(fd: int, offset: int, addr: int | None = None) -> bool:
    """Whether the page holding byte ``offset`` of the file ``fd`` is in the page cache.
    Where cachestat is missing, ``addr`` (that byte's address in a map of the file) is
    asked of mincore; without one, False: cannot tell."""
    global _has_cachestat
    if _has_cachestat:
        try:
            args, at_range, at_stat = _local.cachestat
        except AttributeError:
            args = _ARGS()
            at = ctypes.addressof(args)
            args, at_range, at_stat = _local.cachestat = args, ctypes.c_void_p(at), ctypes.c_void_p(at + 16)
        args[0], args[1] = offset, 1
        if _LIBC.syscall(_CACHESTAT, fd, at_range, at_stat, 0) == 0:
            return args[2] > 0
        if ctypes.get_errno() == errno.ENOSYS:
            _has_cachestat = False
    if addr is None:
        return False
    found = resident(addr, 1)
    return found is not None and bool(found[0] & 1)


def resident(addr: int, length: int) -> bytes | None:
    """One byte per page of the mapped bytes [addr, addr + length), bit 0 set where the
    page is in the page cache; None when that cannot be told (no mincore, not mapped)."""
    lo = addr - addr % PAGE
    pages = max(1, -(-(addr + length - lo) // PAGE))
    vec = (ctypes.c_ubyte * pages)()
    if _LIBC is None or _LIBC.mincore(lo, pages * PAGE, vec) != 0:
        return None
    return bytes(vec)


def cached_pages(path: str | os.PathLike, offset: int = 0, length: int = 0) -> tuple[int, int]:
    """(pages in the page cache, pages) of bytes [offset, offset + length) of the file
    ``path`` (length 0: to its end), from a map of it that is never touched."""
    size = os.path.getsize(path)
    end = size if length == 0 else min(size, offset + length)
    lo = offset - offset % PAGE
    if end <= lo:
        return 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _LIBC.mmap(None, end - lo, mmap.PROT_READ, mmap.MAP_SHARED, fd, lo) if _LIBC else None
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"cannot map {path} to see what of it is in the page cache")
        try:
            vec = resident(addr, end - lo)
        finally:
            _LIBC.munmap(addr, end - lo)
    finally:
        os.close(fd)
    if vec is None:
        raise OSError(f"cannot tell what of {path} is in the page cache (mincore)")
    return sum(b & 1 for b in vec), len(vec)


def evict(path: str | os.PathLike, offset: int = 0, length: int = 0, tries: int = 6) -> int:
    """Drop the file ``path`` from the page cache (fsync: only clean pages go; then
    DONTNEED of the whole file: only whole folios go) until none of bytes [offset,
    offset + length) (0: to its end) is left, or ``tries`` are spent; the pages left.
    Pages mapped by a process stay whatever is asked."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        left = 0
        for attempt in range(tries):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            left = cached_pages(path, offset, length)[0]
            if left == 0:
                break
            time.sleep(0.02 * (attempt + 1))
        return left
    finally:
        os.close(fd)
