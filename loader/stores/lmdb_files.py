"""The bytes and files of an LMDB shard, read without LMDB: what keeps damage a clean
error instead of a SIGBUS, and the OS hints the store gives about its data file.

- `data_file_problem`: before data.mdb is mapped, its two meta pages (LMDB 0.9, 64-bit)
  are read and the file must reach the last page in use: touching a page past the end
  of a truncated file through the map would be a SIGBUS. The one exception is sound: a
  page freed in the transaction that allocated it is never written, so after a delete
  the file may end before the meta's last page; pages past the end are accepted when
  every one of them is listed in LMDB's free-page B-tree (`_free_pages`), which no read
  touches.
- `Pages.node_problem`: py-lmdb touches every page of a value as it hands it out, so
  before a value is taken from a cursor its leaf node (found from the zero-copy key
  buffer, at `buffer_offset` in the map, `map_base`) is read, and a value said to lie
  past the pages in use is refused.
- `Pages.value_span` also says whether a value lies in overflow pages (one
  ``posix_fadvise`` for all of them when readahead is off); `release_pages` drops a
  zero-copy value's pages from the resident set; `writeback` starts the disk writes of committed pages early;
  `reserve_blocks` allocates, under a writable map, the file blocks a write will touch.
- `recover_compaction`: finishes or rolls back a compaction's directory swap that a
  crash interrupted (the swap itself is in lmdb_store.py: ``compact``).

Reads only (and hints to the OS), except `reserve_blocks` (allocates file blocks),
`trim_tail` (cuts off pages no meta page refers to: a failed write's) and
`recover_compaction`, which renames or removes the leftover directories of an interrupted
compaction.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import struct
import sys

from ..errors import DamagedDatasetError, StoreError
from ..infra.lmdb_meta import MAGIC as _MAGIC
from ..infra.lmdb_meta import META as _META
from ..infra.lmdb_meta import P_META as _P_META
from ..infra.lmdb_meta import VERSION as _VERSION
from ..infra.lmdb_meta import read_meta_pages, valid_page_size
from ..infra.regular import open_regular
from ._lmdbnode import buffer_offset
from ._lmdbnode import find_value as _find_value
from ._lmdbnode import value_span as _value_span
from .base import Value

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: the node checks read LMDB's little-endian layout: off on big-endian machines
BIG_ENDIAN = sys.byteorder != "little"

# --- the data file, checked before it is mapped (its meta pages: infra/lmdb_meta.py) ------


def data_file_problem(data: str) -> str | None:
    """Why an LMDB ``data.mdb`` cannot be mapped safely, or None: both meta pages must be
    LMDB meta pages, and the file must reach the last page in use - a truncated file is
    refused here rather than met as a SIGBUS when a read touches the missing pages."""
    for _attempt in range(2):  # a meta page being rewritten right now: look again once
        found = _meta_problem(data)
        if found is None:
            return None
    return found


def _meta_problem(data: str) -> str | None:
    try:
        with os.fdopen(open_regular(data), "rb", buffering=0) as f:
            head, second, size = read_meta_pages(f.fileno())
            if size == 0:
                return "data.mdb is empty (0 bytes)"
            if len(head) < _META.size or _META.unpack(head)[3] != _MAGIC:
                return "data.mdb does not start with an LMDB meta page"
            psize = _META.unpack(head)[5]
            if not valid_page_size(psize):
                return f"data.mdb's first meta page gives an impossible page size {psize}"
            metas = [_META.unpack(head), _META.unpack(second.ljust(_META.size, b"\0"))]
    except DamagedDatasetError as e:  # a FIFO, a device: never opened (infra/regular.py)
        return e.what
    except OSError as e:
        return f"data.mdb cannot be read ({e.strerror or e})"
    for i, (pgno, _pad, flags, magic, version, _psize, _last_pg, _txnid) in enumerate(metas):
        if size < (i + 1) * psize:
            return f"data.mdb is truncated ({size} bytes: not even its two meta pages of {psize} bytes)"
        if pgno != i or not flags & _P_META or magic != _MAGIC or version != _VERSION:
            return f"meta page {i} of data.mdb is not a valid LMDB meta page"
    last_pg = max(metas, key=lambda m: m[7])[6]
    need = (last_pg + 1) * psize
    if size < need and not _past_end_free(data, max(range(2), key=lambda i: metas[i][7]), psize, size, last_pg):
        return (
            f"data.mdb is truncated: {size} bytes, but its pages in use reach byte {need} "
            f"(page {last_pg} of {psize} bytes)"
        )
    return None


def trim_tail(data: str) -> int:
    """Cut ``data.mdb`` back to the pages its newest meta page says are in use (bytes freed).
    What lies beyond was written by a transaction that never committed (a write that ran
    out of space): no meta page refers to it. Only while no environment of the file is
    open for writing; a valid file only (else nothing is done)."""
    if _meta_problem(data) is not None:
        return 0
    with open(data, "rb+", buffering=0) as f:
        head, second, size = read_meta_pages(f.fileno())
        psize: int = _META.unpack(head)[5]
        metas = [_META.unpack(head), _META.unpack(second)]
        need: int = (max(metas, key=lambda m: m[7])[6] + 1) * psize
        if size <= need:
            return 0
        os.ftruncate(f.fileno(), need)
        return size - need


# the free-page B-tree's MDB_db record in a meta page (after the 16-byte page header, magic,
# version, address, mapsize): u32 pad, u16 flags, u16 depth, 4 x u64 counts, u64 root
_FREE_DB = struct.Struct("<4xHH32xQ")
_FREE_DB_AT = 16 + 24
_P_BRANCH, _P_LEAF, _F_BIGDATA = 0x01, 0x02, 0x01
_NODE_HEAD = struct.Struct("<HHHH")  # lo, hi, flags, key size
#: pages of the free-page tree read at most (the pages past the end are few)
_FREE_WALK_PAGES = 4096


def _past_end_free(data: str, meta: int, psize: int, size: int, last_pg: int) -> bool:
    """Are pages size // psize .. last_pg (those past the end of data.mdb) all free in the
    newest meta's free-page tree? Never touched by a read, they need not be in the file."""
    first = size // psize
    try:
        with os.fdopen(open_regular(data), "rb", buffering=0) as f:
            fd = f.fileno()
            _pad_flags, depth, root = _FREE_DB.unpack(os.pread(fd, _FREE_DB.size, meta * psize + _FREE_DB_AT))
            free = _free_pages(fd, psize, first, root, depth) if depth else set()
    except (OSError, ValueError, struct.error):
        return False
    return free is not None and all(p in free for p in range(first, last_pg + 1))


def _free_pages(fd: int, psize: int, end: int, root: int, depth: int) -> set[int] | None:
    """The page numbers listed in the free-page tree rooted at ``root`` (keys: txn ids;
    values: u64 count then that many page numbers), read with ``pread``; None when the
    walk finds anything unexpected (a page at or past ``end``, a bad node)."""
    free: set[int] = set()
    todo, seen = [root], 0
    while todo:
        pgno = todo.pop()
        seen += 1
        if pgno < 2 or pgno >= end or seen > _FREE_WALK_PAGES:
            return None
        page = os.pread(fd, psize, pgno * psize)
        flags, lower = struct.unpack_from("<HH", page, 10)
        if len(page) < psize or lower < 16 or lower > psize:
            return None
        for ptr in struct.unpack_from(f"<{(lower - 16) // 2}H", page, 16):
            lo, hi, nflags, ksize = _NODE_HEAD.unpack_from(page, ptr)
            if flags & _P_BRANCH:
                todo.append(lo | hi << 16 | nflags << 32)
                continue
            if not flags & _P_LEAF:
                return None
            n = lo | hi << 16
            at = ptr + 8 + ksize
            if nflags & _F_BIGDATA:
                (ov,) = struct.unpack_from("<Q", page, at)
                if ov < 2 or (ov * psize + 16 + n) > end * psize:
                    return None
                value = os.pread(fd, n, ov * psize + 16)
            else:
                value = page[at : at + n]
            (count,) = struct.unpack_from("<Q", value, 0)
            if 8 + 8 * count > len(value):
                return None
            free.update(struct.unpack_from(f"<{count}Q", value, 8))
    return free


def file_size(path: str) -> int:
    """Size of ``path`` in bytes, 0 when it cannot be read."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# --- leaf nodes, read through the map ---------------------------------------------------

# LMDB 0.9's leaf node: lo, hi, flags, key size (u16 each), the key, then the value, or
# (flag F_BIGDATA = 1) the u64 number of its first overflow page, whose data starts after
# a 16-byte page header (read by _lmdbnode.c)
_NODE = struct.Struct("<HHHH")
#: an overflow page's header: its value starts this many bytes into its first page
OVERFLOW_HEAD = 16


class Pages:
    """The pages in use of a data.mdb as this process maps it (base address, map size,
    bytes in use, page size), with a read-only memoryview of them to read nodes through."""

    __slots__ = ("base", "in_use", "map_size", "psize", "view")

    def __init__(self, base: int, map_size: int, npages: int, psize: int) -> None:
        self.base, self.map_size, self.in_use, self.psize = base, map_size, npages * psize, psize
        self.view = memoryview((ctypes.c_char * self.in_use).from_address(base)).cast("B").toreadonly()

    def node_problem(self, key: memoryview) -> str | None:
        """Why the value of the leaf node whose key buffer (zero-copy) is given would lie
        outside the pages in use, or None."""
        found = self.value_span(key)
        return found if isinstance(found, str) else None

    def value_span(self, key: memoryview) -> tuple[int, int, bool] | str:
        """(offset in data.mdb, size, whether it fills overflow pages - which then start
        `OVERFLOW_HEAD` bytes before it) of the value of the leaf node whose key buffer
        (zero-copy) is given, read from the node alone (none of the value's pages is
        touched), or why it would lie outside the pages in use. In C (_lmdbnode.c, ~0.15
        us): every get pays it."""
        found: tuple[int, int, bool] | int = _value_span(key, self.base, self.in_use, self.psize)
        if type(found) is tuple:
            return found
        if found == 1:
            return "a key lies outside the pages in use of data.mdb"
        lo, hi = _NODE.unpack_from(self.view, buffer_offset(key, self.base) - 8)[:2]
        return f"the value of key {bytes(key).hex()} ({lo | hi << 16} bytes) lies outside the pages in use of data.mdb"

    def find(self, key: bytes, tree: tuple[int, int]) -> tuple[int, int, bool] | None:
        """`value_span` of ``key`` in the B-tree ``tree`` ((root page, depth): `table_tree`),
        found by walking its pages in the map, or None: not found, or anything unexpected
        on the way (ask LMDB then; it names damage). Unlike LMDB's lookup, this does not
        read the first page of a value in overflow pages (_lmdbnode.c)."""
        found: tuple[int, int, bool] | None = _find_value(key, self.base, self.in_use, self.psize, tree[0], tree[1])
        return found


# A table's MDB_db record, the value of its name in the main B-tree: u32 pad, u16 flags,
# u16 depth, four u64 page and entry counts, u64 root page.
_TABLE = struct.Struct("<4xHH32xQ")


def table_tree(record: bytes | memoryview | None) -> tuple[int, int] | None:
    """(root page, depth) of a table from its MDB_db record, or None when `Pages.find`
    cannot walk it: empty, or keys not in LMDB's default order (any flag set)."""
    if record is None or len(record) != _TABLE.size:
        return None
    flags: int
    depth: int
    root: int
    flags, depth, root = _TABLE.unpack(record)
    return (root, depth) if flags == 0 and depth > 0 else None


def map_base(data: str) -> int | None:
    """The address at which this process maps ``data`` (from /proc/self/maps), or None."""
    try:
        st = os.stat(data)
        with open("/proc/self/maps", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    want = os.fsencode(os.path.realpath(data))
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5] == want and int(parts[2], 16) == 0:
            dev_major, dev_minor = (int(x, 16) for x in parts[3].split(b":"))
            if int(parts[4]) == st.st_ino and os.makedev(dev_major, dev_minor) == st.st_dev:
                return int(parts[0].split(b"-")[0], 16)
    return None


# --- hints to the OS ----------------------------------------------------------------------


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
_MADV_DONTNEED = 4
_SYNC_FILE_RANGE_WRITE = 2


def _sync_file_range() -> ctypes._NamedFuncPointer | None:
    """libc's sync_file_range (Linux), or None."""
    f: ctypes._NamedFuncPointer | None = getattr(_LIBC, "sync_file_range", None)
    if f is not None:
        f.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        f.restype = ctypes.c_int
    return f


def _madvise() -> ctypes._NamedFuncPointer | None:
    f: ctypes._NamedFuncPointer | None = getattr(_LIBC, "madvise", None)
    if f is not None:
        f.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return f


_SYNC_FILE_RANGE = _sync_file_range()
_MADVISE = _madvise()


def can_write_back() -> bool:
    return _SYNC_FILE_RANGE is not None


def writeback(fd: int) -> None:
    """Start the disk writes of the file's dirty pages without waiting for them
    (``sync_file_range(SYNC_FILE_RANGE_WRITE)``); errors: just no head start."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def release_pages(value: Value) -> None:
    """Drop the whole pages of a zero-copy value (a buffer into a read-only file mapping)
    from this process's resident set (``madvise(MADV_DONTNEED)``; the data stays in the
    page cache). Keeps the RSS of a pass over a store larger than RAM flat."""
    if _MADVISE is None:
        return
    try:
        addr = buffer_offset(value)
    except (TypeError, ValueError):
        return
    lo = -(-addr // PAGE) * PAGE
    hi = (addr + len(value)) // PAGE * PAGE
    if hi - lo >= PAGE:
        _MADVISE(lo, hi - lo, _MADV_DONTNEED)


def reserve_blocks(path: str, offset: int, length: int) -> None:
    """Allocate the blocks of shard ``path``'s data.mdb that a call is about to write
    through a writable map (MDB_WRITEMAP): the file is sparse, and a store into a hole on a
    full disk (or a full /dev/shm) is a SIGBUS, not an error. Allocating the region first
    turns that into a clean StoreError; only that region is allocated, so the shard's
    size on disk stays honest."""
    try:
        fd = os.open(os.path.join(path, "data.mdb"), os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise StoreError(
                e.errno,
                f"shard {path}: no room for {length} more bytes ({os.strerror(e.errno)}); "
                f"free space on that filesystem (or use fewer/larger shards) and retry",
            ) from None
        # EOPNOTSUPP etc.: nothing reserved, the write proceeds as before
    finally:
        os.close(fd)


# --- compaction's directory swap -------------------------------------------------------


def compaction_leftovers(path: str) -> bool:
    """Whether an interrupted compaction left directories that `recover_compaction` handles."""
    return any(os.path.isdir(path + suffix) for suffix in (".compacting", ".replaced"))


def recover_compaction(path: str) -> None:
    """Finish or roll back a compaction that a crash interrupted (see LmdbStore.compact)."""
    new, old = path + ".compacting", path + ".replaced"
    if not os.path.exists(path) and os.path.isdir(new) and os.path.isdir(old):
        # crashed between the two renames of the fallback: the copy is complete
        os.rename(new, path)
    if os.path.exists(path):
        for leftover in (new, old):
            if os.path.isdir(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
