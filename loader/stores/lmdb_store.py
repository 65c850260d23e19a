"""LMDB shards (``lmdb://PATH`` and ``mem://NAME``, which is LMDB on /dev/shm).

A shard is one LMDB environment directory (``data.mdb``, ``lock.mdb``, ``writer.lock``);
a table is an LMDB named database.

Rules this module keeps (DESIGN §5):

- ``putmulti(..., append=True)`` silently drops an out-of-order key, so keys are checked
  to be strictly ascending as they stream by, and ``added == consumed`` is asserted.
- The map starts modest (option ``map_size``, the writer's size hint) and grows on
  ``MapFullError``: the write transaction is aborted, the map grown with no transaction
  open, and the whole call retried. It never crashes on a full map.
- One ``Environment`` per path per process: environments are cached by real path and
  shared (reference counted) by every store object of the process. A reader opened in a
  process that already writes the shard reuses the writer's environment.
- LMDB lets a second writer *wait* on its write mutex; bulkload wants "busy" instead, so a
  writer takes an exclusive non-blocking ``flock`` on ``PATH/writer.lock`` first.
- Readers open ``readonly`` with the lock table, so they never block on a writer and see
  the last committed transaction; they pick up a map grown by the writer
  (``MapResizedError`` -> ``set_mapsize(0)``). ``readahead`` ("0"/"false") turns OS
  readahead off for random chunk reads. A reader whose open overlapped a compaction's
  directory swap (its lock file and data file could come from different directories)
  opens again. A table dropped by a writer after a reader opened its handle reads as
  absent (LMDB's ``MDB_BAD_DBI``), like a table that never existed.

Damage (a truncated file, flipped bytes) is an error naming the shard, never a signal:

- before an environment is opened, ``data_file_problem`` reads data.mdb's two meta pages
  (magic, version) and checks that the file reaches the last page in use: a truncated
  file is refused before it is mapped (touching a missing page would be a SIGBUS);
- LMDB's read errors (MDB_CORRUPTED, MDB_PAGE_NOTFOUND, ...) become CorruptStoreError;
- py-lmdb touches every page of a value as it hands it out, so before a value is taken
  from a cursor its leaf node is read (``_Pages.node_problem``) and a value said to lie
  past the pages in use is refused.

Durability: the writer commits with ``sync=False, metasync=False``; :meth:`sync` is the
durability point (``env.sync(True)``). Until it returns, an OS crash may lose (and, as
LMDB documents for MDB_NOSYNC, may damage) the transactions since the last sync; the
loader only commits its manifest after syncing the shards.

Options (strings, from the dataset URI, or Python values):

- ``map_size``: initial map size in bytes (default 64 MiB; suffixes k/m/g accepted). An
  existing ``data.mdb`` larger than it wins.
- ``writemap``: "0" (default) writes with ``pwrite``: ENOSPC is always a clean error and
  the writer's memory stays flat, whatever the shard size. "1" maps the file writable
  (MDB_WRITEMAP + MDB_MAPASYNC): ~1.2-2x the raw write throughput in store-only
  measurements, but every page written stays resident in the writer's RSS (a 20M-record
  load peaked at ~2 GB RSS vs ~0.3 GB), and a store into a hole of the sparse file on a
  full filesystem is a SIGBUS, so calls of known size first ``posix_fallocate`` the
  region. Durability is the same either way: ``sync()`` is the durability point.
- ``readahead``: "0" turns OS readahead off (readers and writer).
- ``max_dbs``: most tables per shard (default 1024; each document load adds one).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import struct
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from typing import Iterable, Iterator

import lmdb

from ..errors import (
    DatasetBusyError,
    MissingPathError,
    StoreError,
    UsageError,
)
from ..infra import faults
from ..infra.fsatomic import exchange, fsync_dir, path_ident
from .base import MEM_ROOT, ShardStore, ascending, corrupt_store, make_shard_dir

DEFAULT_MAP_SIZE = 64 << 20
DEFAULT_MAX_DBS = 1024
MIB = 1 << 20
# range() copies items out in slices of this many bytes (or items), each slice under its
# own short read transaction: no long-lived reader pins old pages or a stale map.
RANGE_SLICE_BYTES = 64 << 20
RANGE_SLICE_ITEMS = 4096
#: a writer starts the disk writes of its commits every this many bytes (_early_writeback)
WRITEBACK_BYTES = 32 << 20


def _sync_file_range():
    """libc's sync_file_range (Linux), or None."""
    try:
        import ctypes

        f = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    f.restype = ctypes.c_int
    return f


_SYNC_FILE_RANGE = _sync_file_range()
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_BIG_ENDIAN = sys.byteorder != "little"


# --- options -----------------------------------------------------------------------


def _opt_bool(options: dict, name: str, default: bool) -> bool:
    v = options.get(name, default)
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off", ""):
        return False
    raise UsageError(f"store option {name}={v!r} is not a boolean; use 1/0, true/false")


def _opt_size(options: dict, name: str, default: int) -> int:
    v = options.get(name)
    if v is None:
        return default
    if isinstance(v, int):
        n = v
    else:
        s = str(v).strip().lower().removesuffix("b").removesuffix("i")
        mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(s[-1:], 1)
        if mult != 1:
            s = s[:-1]
        try:
            n = int(float(s) * mult)
        except (ValueError, OverflowError):
            raise UsageError(f"store option {name}={v!r} is not a size (e.g. 64m, 2g)") from None
    if n <= 0:
        raise UsageError(f"store option {name}={v!r} must be positive")
    return n


def _opt_count(options: dict, name: str, default: int) -> int:
    v = options.get(name, default)
    try:
        n = int(str(v).strip())
    except ValueError:
        raise UsageError(f"store option {name}={v!r} is not a whole number") from None
    if n < 1:
        raise UsageError(f"store option {name}={v!r} must be at least 1")
    return n


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# --- the data file, checked before it is mapped ------------------------------------------

# LMDB 0.9's meta pages (pages 0 and 1 of data.mdb; 64-bit): a 16-byte page header (pgno
# u64, pad u16, flags u16 with P_META = 0x08, lower, upper) then MDB_meta: magic u32,
# version u32, address, mapsize, two MDB_db of 48 bytes (the first one's leading u32 is
# the page size), last_pg u64 (the last page in use), txnid u64. LMDB uses the meta with
# the larger txnid; every page up to its last_pg must be in the file.
_META = struct.Struct("<QHH4xII16xI44x48xQQ")
_MAGIC, _VERSION, _P_META = 0xBEEFC0DE, 1, 0x08


def data_file_problem(data: str) -> str | None:
    """Why an LMDB ``data.mdb`` cannot be mapped safely, or None: both meta pages must be
    LMDB meta pages, and the file must reach the last page in use - a truncated file is
    refused here rather than met as a SIGBUS when a read touches the missing pages."""
    for attempt in range(2):  # a meta page being rewritten right now: look again once
        found = _meta_problem(data)
        if found is None:
            return None
    return found


def _meta_problem(data: str) -> str | None:
    try:
        with open(data, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            head = os.pread(f.fileno(), _META.size, 0)
            if size == 0:
                return "data.mdb is empty (0 bytes)"
            if len(head) < _META.size or _META.unpack(head)[3] != _MAGIC:
                return "data.mdb does not start with an LMDB meta page"
            psize = _META.unpack(head)[5]
            if psize < 512 or psize & (psize - 1):
                return f"data.mdb's first meta page gives an impossible page size {psize}"
            metas = [_META.unpack(head), _META.unpack(os.pread(f.fileno(), _META.size, psize).ljust(_META.size,
                                                                                                  b"\0"))]
    except OSError as e:
        return f"data.mdb cannot be read ({e.strerror or e})"
    for i, (pgno, _pad, flags, magic, version, _psize, last_pg, _txnid) in enumerate(metas):
        if size < (i + 1) * psize:
            return f"data.mdb is truncated ({size} bytes: not even its two meta pages of {psize} bytes)"
        if pgno != i or not flags & _P_META or magic != _MAGIC or version != _VERSION:
            return f"meta page {i} of data.mdb is not a valid LMDB meta page"
    last_pg = max(metas, key=lambda m: m[7])[6]
    need = (last_pg + 1) * psize
    if size < need:
        return (f"data.mdb is truncated: {size} bytes, but its pages in use reach byte {need} "
                f"(page {last_pg} of {psize} bytes)")
    return None


_NODE = struct.Struct("<HHHH")
_PGNO = struct.Struct("<Q")


class _Pages:
    """The pages in use of a data.mdb as this process maps it (base address, map size,
    bytes in use, page size), with a read-only memoryview of them to read nodes through."""

    __slots__ = ("base", "map_size", "in_use", "psize", "view")

    def __init__(self, base: int, map_size: int, npages: int, psize: int):
        self.base, self.map_size, self.in_use, self.psize = base, map_size, npages * psize, psize
        self.view = memoryview((ctypes.c_char * self.in_use).from_address(base)).cast("B").toreadonly()

    def node_problem(self, key) -> str | None:
        """Why the value of the leaf node whose key buffer (zero-copy) is given would lie
        outside the pages in use, or None. LMDB 0.9's node: lo, hi, flags, key size (u16
        each), the key, then the value, or (flag F_BIGDATA) the u64 number of its first
        overflow page, whose data starts after a 16-byte page header."""
        n = len(key)
        at = buffer_address(key) - self.base
        if not 8 <= at <= self.in_use - n - 8:
            return "a key lies outside the pages in use of data.mdb"
        lo, hi, flags, ksize = _NODE.unpack_from(self.view, at - 8)
        size = lo | hi << 16
        start = _PGNO.unpack_from(self.view, at + n)[0] * self.psize + 16 if flags & 1 else at + n
        if ksize != n or start + size > self.in_use:
            return f"the value of key {bytes(key).hex()} ({size} bytes) lies outside the pages in use of data.mdb"
        return None


def _buffer_offset() -> int | None:
    """Where CPython keeps a memoryview's data pointer inside the memoryview object (its
    Py_buffer's ``buf``), found by looking for known addresses; None if not found (then
    `buffer_address` asks numpy: ~1.4 us instead of ~0.15 us)."""
    if sys.implementation.name != "cpython":
        return None
    probes = [bytearray(64), bytearray(64)]
    for off in range(16, 168, 8):
        if all(ctypes.c_void_p.from_address(id(mv) + off).value == ctypes.addressof(ctypes.c_char.from_buffer(b))
               for b in probes for mv in [memoryview(b)]):
            return off
    return None


_BUF_OFFSET = _buffer_offset()


def buffer_address(mv: memoryview) -> int:
    """The address of a memoryview's first byte (read-only views included)."""
    if _BUF_OFFSET is not None:
        return ctypes.c_void_p.from_address(id(mv) + _BUF_OFFSET).value or 0
    import numpy as np

    return np.frombuffer(mv, np.uint8).ctypes.data


@contextmanager
def _reading(path: str):
    """Turn LMDB's errors on reading (MDB_CORRUPTED, MDB_PAGE_NOTFOUND, MDB_BAD_TXN, ...: a
    damaged B-tree) into one CorruptStoreError naming the shard."""
    try:
        yield
    except (lmdb.MapResizedError, lmdb.MapFullError, lmdb.BadDbiError):
        raise  # growth of a healthy map, a table another process dropped: handled by the callers
    except lmdb.Error as e:
        raise corrupt_store(path, f"LMDB cannot read it ({type(e).__name__}: {e})") from None


# --- one Environment per path per process --------------------------------------------


@dataclass
class _EnvEntry:
    env: lmdb.Environment
    writable: bool
    pid: int
    refs: int = 0
    dbs: dict = field(default_factory=dict)  # table name -> _Database handle
    pages: "_Pages | None" = None  # data.mdb's pages in use as mapped here (LmdbStore._pages)


def _map_base(data: str) -> int | None:
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


_ENVS: dict[str, _EnvEntry] = {}
_ENVS_LOCK = threading.RLock()


def _busy_message(path: str, holder: str) -> str:
    who = f" (pid {holder})" if holder else ""
    return (
        f"shard {path} is being written by another job{who}; "
        f"wait for that job to finish or stop it, then retry"
    )


def _take_writer_lock(path: str) -> int:
    lock_path = os.path.join(path, "writer.lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        except OSError:
            holder = ""
        os.close(fd)
        raise DatasetBusyError(_busy_message(path, holder)) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _recover_compaction(path: str) -> None:
    """Finish or roll back a compaction that a crash interrupted (see LmdbStore.compact)."""
    new, old = path + ".compacting", path + ".replaced"
    if not os.path.exists(path) and os.path.isdir(new) and os.path.isdir(old):
        # crashed between the two renames of the fallback: the copy is complete
        os.rename(new, path)
    if os.path.exists(path):
        for leftover in (new, old):
            if os.path.isdir(leftover):
                shutil.rmtree(leftover, ignore_errors=True)


class LmdbStore(ShardStore):
    scheme = "lmdb"
    OPTIONS = {
        "map_size": "initial map size, e.g. 64m",
        "writemap": "1 maps the file writable, 0 (default) writes with pwrite",
        "readahead": "0 turns OS readahead off",
        "max_dbs": f"most tables per shard, default {DEFAULT_MAX_DBS}",
    }

    @classmethod
    def check_options(cls, options: dict) -> None:
        _opt_size(options, "map_size", DEFAULT_MAP_SIZE)
        _opt_bool(options, "writemap", False)
        _opt_bool(options, "readahead", True)
        _opt_count(options, "max_dbs", DEFAULT_MAX_DBS)

    def __init__(self, path: str, entry: _EnvEntry, *, write: bool, options: dict,
                 lock_fd: int | None):
        self.path = path
        self._real = os.path.realpath(path)
        self._entry = entry
        self._write = write
        self._options = options
        self._lock_fd = lock_fd
        self._closed = False
        real_mem = os.path.realpath(MEM_ROOT)
        if self._real == real_mem or self._real.startswith(real_mem + os.sep):
            self.scheme = "mem"

    # --- opening -----------------------------------------------------------------

    @classmethod
    def open(cls, path: str, *, write: bool, options: dict | None = None,
             map_size: int | None = None, readahead: bool | None = None) -> "LmdbStore":
        """Open the shard directory ``path``.

        Extra keyword options (beyond the interface): ``map_size`` (the writer's size
        hint, bytes) and ``readahead`` override the same-named entries of ``options``.
        """
        options = dict(options or {})
        if map_size is not None:
            options["map_size"] = map_size
        if readahead is not None:
            options["readahead"] = readahead
        path = os.path.abspath(path)
        if write:
            make_shard_dir(path)
        elif not os.path.isdir(path):
            raise MissingPathError(
                f"shard {path} does not exist; check the dataset path (was it loaded?)"
            )
        if write:
            _recover_compaction(path)
        lock_fd = _take_writer_lock(path) if write else None
        try:
            entry = cls._acquire_env(path, write=write, options=options)
        except BaseException:
            if lock_fd is not None:
                os.close(lock_fd)
            raise
        return cls(path, entry, write=write, options=options, lock_fd=lock_fd)

    @classmethod
    def _acquire_env(cls, path: str, *, write: bool, options: dict) -> _EnvEntry:
        real = os.path.realpath(path)
        with _ENVS_LOCK:
            entry = _ENVS.get(real)
            if entry is not None and entry.pid != os.getpid():
                # inherited across fork: never touch the parent's handle
                _ENVS.pop(real)
                entry = None
            if entry is not None:
                if write and not entry.writable:
                    raise StoreError(
                        errno.EBUSY,
                        f"shard {path} is already open read-only in this process; "
                        f"close its readers before opening it for writing",
                    )
                entry.refs += 1
                return entry
            env = cls._open_env(path, write=write, options=options)
            entry = _EnvEntry(env=env, writable=write, pid=os.getpid(), refs=1)
            _ENVS[real] = entry
            return entry

    @classmethod
    def check(cls, path: str) -> str | None:
        if not os.path.isdir(path):
            return "missing"
        data = os.path.join(path, "data.mdb")
        if not os.path.exists(data):
            return "no data.mdb in it: not an LMDB store"
        return data_file_problem(data)

    @staticmethod
    def _open_env(path: str, *, write: bool, options: dict) -> lmdb.Environment:
        data = os.path.join(path, "data.mdb")
        found = os.path.exists(data)
        existing = os.path.getsize(data) if found else 0
        if found and (existing or not write):  # an empty file is one a writer is about to initialise
            damage = data_file_problem(data)
            if damage is not None:
                raise corrupt_store(path, damage)
        readahead = _opt_bool(options, "readahead", True)
        max_dbs = _opt_count(options, "max_dbs", DEFAULT_MAX_DBS)
        if write:
            hint = _opt_size(options, "map_size", DEFAULT_MAP_SIZE)
            writemap = _opt_bool(options, "writemap", False)
            map_size = _round_up(max(hint, existing), 64 * 1024)
            try:
                return lmdb.open(
                    path, map_size=map_size, subdir=True, readonly=False, create=True,
                    sync=False, metasync=False, writemap=writemap, map_async=writemap,
                    meminit=False, readahead=readahead, max_dbs=max_dbs, lock=True,
                )
            except lmdb.Error as e:
                raise StoreError(errno.EIO, f"cannot open LMDB shard {path} for writing: {e}") from e
        if not existing:
            raise MissingPathError(
                f"shard {path} has no data.mdb: it is not an LMDB shard (or was never written)"
            )
        for attempt in range(8):
            where = path_ident(path)
            try:
                # the size stored in the file (or its current extent) is adopted by LMDB
                env = lmdb.open(
                    path, map_size=_round_up(existing, MIB), subdir=True, readonly=True,
                    create=False, readahead=readahead, max_dbs=max_dbs, lock=True,
                )
            except lmdb.MapResizedError:
                # a writer grew the map between our stat and the open's first transaction
                existing = max(existing, _file_size(data)) * 2
                continue
            except lmdb.Error as e:
                if path_ident(path) != where:
                    continue  # a compaction swapped the directory during the open
                raise StoreError(errno.EIO, f"cannot open LMDB shard {path} for reading: {e}") from e
            if path_ident(path) == where:
                return env
            env.close()  # swapped mid-open: its lock and data files may not belong together
            existing = max(existing, _file_size(data))
        raise StoreError(errno.EAGAIN, f"cannot open LMDB shard {path} for reading: its writer keeps "
                                       "growing or compacting it; try again")

    # --- helpers -------------------------------------------------------------------

    @property
    def env(self) -> lmdb.Environment:
        if self._closed:
            raise StoreError(errno.EBADF, f"shard {self.path} is closed")
        return self._entry.env

    def _require_write(self, what: str) -> None:
        if not self._write:
            raise UsageError(f"{what} on shard {self.path}: it was opened read-only")

    def _adopting_growth(self, fn):
        """fn() (which begins a read transaction), again after adopting the map size when
        the writer (another process) grew the map meanwhile."""
        env = self.env
        for _ in range(8):
            try:
                return fn()
            except lmdb.MapResizedError:
                with _ENVS_LOCK:
                    self._entry.pages = None  # the map moves: its old view must not be read
                    env.set_mapsize(0)
        return fn()

    def _begin_read(self, buffers: bool = False) -> lmdb.Transaction:
        return self._adopting_growth(lambda: self.env.begin(write=False, buffers=buffers))

    def _db(self, table: str, *, create: bool):
        """The named database handle, or None when it does not exist (and not create)."""
        dbs = self._entry.dbs
        db = dbs.get(table)
        if db is not None:
            return db
        name = table.encode()
        env = self.env
        if create:
            db = self._with_growth(lambda: env.open_db(name, create=True))
        else:
            try:
                # no txn given: py-lmdb opens the handle in a temporary transaction whose
                # end keeps it (a handle opened in our own read txn dies with its abort);
                # that transaction too may find the map grown by the writer
                db = self._adopting_growth(lambda: env.open_db(name, create=False))
            except (lmdb.NotFoundError, lmdb.ReadonlyError):
                return None
            except (lmdb.MapResizedError, lmdb.MapFullError):
                raise
            except lmdb.Error as e:  # e.g. MDB_INCOMPATIBLE: the main B-tree is damaged
                raise corrupt_store(self.path, f"LMDB cannot open table {table!r} ({type(e).__name__}: {e})") \
                    from None
        dbs[table] = db
        return db

    def _used_bytes(self) -> tuple[int, int]:
        info = self.env.info()
        psize = self.env.stat()["psize"]
        return info["map_size"], (info["last_pgno"] + 1) * psize

    def _grow(self, need: int) -> None:
        """Grow the map (no transaction may be open) to fit at least ``need`` more bytes."""
        cur, used = self._used_bytes()
        new = _round_up(max(cur * 2, used + 2 * need + 4 * MIB), MIB)
        try:
            with _ENVS_LOCK:
                self._entry.pages = None  # the map moves: its old view must not be read
                self.env.set_mapsize(new)
        except lmdb.Error as e:
            raise StoreError(
                errno.ENOMEM,
                f"shard {self.path}: cannot grow the LMDB map from {cur} to {new} bytes: {e}",
            ) from e
        self.grows += 1

    grows = 0  # map growths done by this object (for tests and reports)

    @property
    def _writemap(self) -> bool:
        return self._write and bool(self.env.flags().get("writemap"))

    def _reserve(self, offset: int, length: int) -> None:
        """Allocate the file blocks a call is about to write through the writable map.

        Under MDB_WRITEMAP the file is sparse; a store into a hole on a full disk (or a
        full /dev/shm) is a SIGBUS, not an error. Allocating the region first turns that
        into a clean StoreError. Only the region about to be written is allocated, so
        nbytes() stays honest.
        """
        try:
            fd = os.open(os.path.join(self.path, "data.mdb"), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return
        try:
            os.posix_fallocate(fd, offset, length)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise StoreError(
                    e.errno,
                    f"shard {self.path}: no room for {length} more bytes ({os.strerror(e.errno)}); "
                    f"free space on that filesystem (or use fewer/larger shards) and retry",
                ) from None
            # EOPNOTSUPP etc.: nothing reserved, the write proceeds as before
        finally:
            os.close(fd)

    def _with_growth(self, fn):
        for _ in range(64):
            try:
                return fn()
            except lmdb.MapFullError:
                self._grow(0)
        raise StoreError(errno.ENOSPC, f"shard {self.path}: LMDB map still full after growing")

    # --- the interface ------------------------------------------------------------

    def put_sorted(self, items: Iterable[tuple[bytes, bytes]], table: str = "batches") -> int:
        self._require_write("put_sorted")
        if isinstance(items, (list, tuple)):
            # known size: grow once up front instead of failing a big transaction
            need = sum(len(k) + len(v) for k, v in items)
            need += need // 8 + 64 * 1024 + 4096 * len(items)
            cur, used = self._used_bytes()
            if cur - used < need:
                self._grow(need)
            if self._writemap:
                self._reserve(used, need)
        source = iter(items)
        try:
            first = next(source)
        except StopIteration:
            return 0
        db = self._db(table, create=True)
        seen: list[tuple[bytes, object]] = []  # kept to retry the call after growing

        def checked(pairs):
            prev = seen[-1][0] if seen else None
            for k, v in ascending(pairs, self.path, table, prev):
                seen.append((k, v))
                yield k, v

        pending = chain([first], source)
        for _attempt in range(64):
            try:
                with self.env.begin(write=True, db=db) as txn:
                    cur = txn.cursor(db)
                    last = cur.key() if cur.last() else None
                    stream = chain(list(seen), checked(pending))
                    head = seen[0][0] if seen else bytes(first[0])
                    append = last is None or head > bytes(last)
                    consumed, added = cur.putmulti(
                        stream, dupdata=False, overwrite=True, append=append
                    )
                    if consumed != added:
                        raise StoreError(
                            errno.EIO,
                            f"put_sorted on {self.path} table {table!r}: LMDB wrote {added} "
                            f"of {consumed} items (append={append}); nothing was written",
                        )
                self._early_writeback(sum(len(k) + len(v) for k, v in seen) if seen else 0)
                return consumed
            except lmdb.MapFullError:
                # what was read so far is in `seen`; `pending` holds the rest
                self._grow(sum(len(k) + len(v) for k, v in seen))
        raise StoreError(errno.ENOSPC, f"shard {self.path}: LMDB map still full after growing")

    def _dropped(self, table: str) -> None:
        """A writer dropped ``table`` after this process opened its handle (MDB_BAD_DBI):
        forget the handle; reads see the table as absent."""
        self._entry.dbs.pop(table, None)

    def has_table(self, table: str) -> bool:
        return self._db(table, create=False) is not None

    def get(self, key: bytes, table: str = "batches") -> bytes | None:
        db = self._db(table, create=False)
        if db is None:
            return None
        txn = self._begin_read(buffers=True)
        try:
            with _reading(self.path):
                cur = txn.cursor(db)
                if not cur.set_key(bytes(key)):
                    return None
                return bytes(self._value(cur, self._pages()))
        except lmdb.BadDbiError:
            self._dropped(table)
            return None
        finally:
            txn.abort()

    def seek(self, key: bytes, table: str = "batches") -> tuple[bytes, bytes] | None:
        db = self._db(table, create=False)
        if db is None:
            return None
        txn = self._begin_read(buffers=True)
        try:
            with _reading(self.path):
                cur = txn.cursor(db)
                if not cur.set_range(bytes(key)):
                    return None
                k = cur.key()  # in the leaf page; the value is not touched yet
                self._prefetch_overflow(k)
                return bytes(k), bytes(self._value(cur, self._pages()))
        except lmdb.BadDbiError:
            self._dropped(table)
            return None
        finally:
            txn.abort()

    def _pages(self, refresh: bool = False) -> "_Pages | None":
        """The pages in use of data.mdb as mapped in this process (for `_value`; kept until
        the map grows or a check fails), or None when the map cannot be found (no /proc):
        nothing is checked then."""
        entry = self._entry
        if _BIG_ENDIAN or (entry.pages is not None and not refresh):
            return entry.pages
        info = self.env.info()
        old = entry.pages
        base = old.base if old is not None and old.map_size == info["map_size"] else \
            _map_base(os.path.join(self.path, "data.mdb"))
        entry.pages = None if base is None else _Pages(base, info["map_size"], info["last_pgno"] + 1,
                                                       self.env.stat()["psize"])
        return entry.pages

    def _value(self, cur, pages: "_Pages | None"):
        """The cursor's value (zero-copy), once its leaf node says it lies inside the pages
        in use: py-lmdb touches every page of a value as it hands it out, and a damaged
        node (a flipped size or overflow page number) would point it past the end of the
        file - a SIGBUS. About 0.5 us per value."""
        if pages is not None:
            problem = pages.node_problem(cur.key())
            if problem is not None:  # the file may have grown, or the map moved, since: look again
                pages = self._pages(refresh=True)
                problem = pages.node_problem(cur.key()) if pages is not None else None
                if problem is not None:
                    raise corrupt_store(self.path, problem)
        return cur.value()

    def _prefetch_overflow(self, key_buf) -> tuple[int, int] | None:
        """Start reading, in one request, the overflow pages of the value whose key buffer
        (inside its leaf node) is given: py-lmdb touches a value's pages one after the
        other, which with readahead off (documents' random reads) costs one disk read per
        page. A hint only: nothing happens unless the node is what LMDB 0.9's format says
        (node header: lo, hi, flags, ksize as u16; F_BIGDATA = 1; the overflow page number
        after the key). Returns the (file offset, length) advised, or None."""
        if _BIG_ENDIAN or self._options.get("readahead") not in ("0", 0, False, "false"):
            return None
        n = len(key_buf)
        addr = buffer_address(key_buf)
        if addr % PAGE < 16 + 8 or addr % PAGE + n + 8 > PAGE:  # the node must lie in its page
            return None
        node = ctypes.string_at(addr - 8, 8 + n + 8)
        lo, hi, flags, ksize = struct.unpack_from("<HHHH", node)
        if not flags & 1 or ksize != n:
            return None
        pgno = int.from_bytes(node[8 + n:], "little")
        fd = getattr(self, "_data_fd", None)
        if fd is None:
            fd = self._data_fd = os.open(os.path.join(self.path, "data.mdb"), os.O_RDONLY | os.O_CLOEXEC)
        span = (pgno * PAGE, (lo | hi << 16) + 16)
        try:
            os.posix_fadvise(fd, *span, os.POSIX_FADV_WILLNEED)
        except OSError:
            return None
        return span

    def range(self, lo: bytes | None = None, hi: bytes | None = None,
              table: str = "batches") -> Iterator[tuple[bytes, bytes]]:
        """Items lo <= key < hi, copied out slice by slice.

        Each slice (up to 64 MiB or 4096 items) is read under its own read transaction,
        so an iteration that lasts spans several committed states if a writer commits
        meanwhile (never a torn item), and never pins the map.
        """
        db = self._db(table, create=False)
        if db is None:
            return
        hi_b = None if hi is None else bytes(hi)
        after: bytes | None = None  # last key yielded
        while True:
            txn = self._begin_read(buffers=True)
            try:
                out, done = self._slice(txn, db, lo, hi_b, after, self._pages())
            except lmdb.BadDbiError:  # another process dropped the table: it reads as absent
                self._dropped(table)
                return
            finally:
                txn.abort()
            yield from out
            if done or not out:
                return
            after = out[-1][0]

    def _slice(self, txn, db, lo: bytes | None, hi_b: bytes | None, after: bytes | None,
               pages) -> tuple[list[tuple[bytes, bytes]], bool]:
        """(items copied out, whether the range ended) of one range() slice."""
        out: list[tuple[bytes, bytes]] = []
        nbytes = 0
        with _reading(self.path):
            cur = txn.cursor(db)
            if after is not None:
                ok = cur.set_range(after)
                if ok and bytes(cur.key()) == after:
                    ok = cur.next()
            elif lo is not None:
                ok = cur.set_range(bytes(lo))
            else:
                ok = cur.first()
            while ok:
                k = bytes(cur.key())
                if hi_b is not None and k >= hi_b:
                    return out, True
                v = bytes(self._value(cur, pages))
                out.append((k, v))
                nbytes += len(v)
                if nbytes >= RANGE_SLICE_BYTES or len(out) >= RANGE_SLICE_ITEMS:
                    return out, False
                ok = cur.next()
        return out, True

    def delete_range(self, lo: bytes | None = None, hi: bytes | None = None,
                     table: str = "batches") -> int:
        self._require_write("delete_range")
        db = self._db(table, create=False)
        if db is None:
            return 0
        hi_b = None if hi is None else bytes(hi)

        def run() -> int:
            n = 0
            with self.env.begin(write=True, db=db) as txn:
                cur = txn.cursor(db)
                ok = cur.set_range(bytes(lo)) if lo is not None else cur.first()
                while ok:
                    k = cur.key()  # b"" once the cursor ran off the end (keys are never empty)
                    if not k or (hi_b is not None and k >= hi_b):
                        break
                    ok = cur.delete()  # moves to the next item
                    n += 1
            return n

        return self._with_growth(run)

    def drop_table(self, table: str) -> None:
        self._require_write("drop_table")
        if self._db(table, create=False) is None:
            return

        def run():
            # mdb_drop(delete=1) closes the handle even when the commit then fails (map
            # full, freeing a big table's pages): take a fresh handle on every attempt
            db = self._db(table, create=False)
            self._entry.dbs.pop(table, None)
            if db is None:
                return
            with self.env.begin(write=True) as txn:
                txn.drop(db, delete=True)

        self._with_growth(run)
        self._entry.dbs.pop(table, None)

    def tables(self) -> list[str]:
        txn = self._begin_read()
        try:
            with _reading(self.path):
                names = [bytes(k).decode(errors="replace") for k in txn.cursor().iternext(values=False)]
        finally:
            txn.abort()
        return sorted(names)

    def sync(self) -> None:
        if self._write:
            try:
                self.env.sync(True)
            except lmdb.Error as e:
                raise StoreError(errno.EIO, f"cannot sync shard {self.path}: {e}") from e

    def nbytes(self) -> int:
        """Bytes allocated to ``data.mdb`` (``st_blocks * 512``).

        With a writable map the file is as large as the map but sparse; its allocated
        blocks are the honest figure (on disk and on tmpfs alike).
        """
        try:
            st = os.stat(os.path.join(self.path, "data.mdb"))
        except FileNotFoundError:
            return 0
        return st.st_blocks * 512

    def compact(self) -> tuple[int, int]:
        """Write a compacted copy beside the shard and swap it in; returns (before, after).

        Needs this store to be the only handle on the shard in this process (and, being
        the writer, the only writer anywhere). Readers of other processes keep reading
        the old files until they reopen. The swap is an atomic ``renameat2`` exchange
        where available; otherwise two renames that ``open(write=True)`` completes after
        a crash.
        """
        self._require_write("compact")
        entry = self._entry
        if entry.refs != 1:
            raise StoreError(
                errno.EBUSY,
                f"cannot compact shard {self.path}: {entry.refs - 1} other handle(s) on it are "
                f"open in this process; close them first",
            )
        before = self.nbytes()
        new, old = self.path + ".compacting", self.path + ".replaced"
        for leftover in (new, old):
            shutil.rmtree(leftover, ignore_errors=True)
        os.mkdir(new)
        try:
            self.env.copy(new, compact=True)
            with open(os.path.join(new, "data.mdb"), "rb+") as f:
                os.fsync(f.fileno())
            new_lock = _take_writer_lock(new)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
        # close our environment, then swap directories
        with _ENVS_LOCK:
            entry.env.close()
            _ENVS.pop(self._real, None)
        faults.hit("compact-copied")
        parent = os.path.dirname(self.path)
        if exchange(new, self.path):  # one atomic step; `new` now holds the old shard
            faults.hit("compact-swapped")
            os.rename(new, old)
        else:
            os.rename(self.path, old)
            faults.hit("compact-swapped")
            os.rename(new, self.path)
        fsync_dir(parent)
        shutil.rmtree(old, ignore_errors=True)
        os.close(self._lock_fd)
        self._lock_fd = new_lock
        self._entry = self._acquire_env(self.path, write=True, options=self._options)
        self._real = os.path.realpath(self.path)
        return before, self.nbytes()

    def _early_writeback(self, nbytes: int) -> None:
        """Start the disk writes of what was committed, without waiting for them
        (sync_file_range(SYNC_FILE_RANGE_WRITE) every WRITEBACK_BYTES), so that the
        durability point, `sync`, finds little left to write: the disk works while the
        loader computes. Durability itself is unchanged (only `sync` promises it)."""
        self._unflushed = getattr(self, "_unflushed", 0) + nbytes
        if self._unflushed < WRITEBACK_BYTES or self.scheme == "mem" or _SYNC_FILE_RANGE is None:
            return
        self._unflushed = 0
        if getattr(self, "_wb_fd", None) is None:
            try:
                self._wb_fd = os.open(os.path.join(self.path, "data.mdb"), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return
        _SYNC_FILE_RANGE(self._wb_fd, 0, 0, 2)  # SYNC_FILE_RANGE_WRITE; errors: just no head start

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name in ("_wb_fd", "_data_fd"):
            if getattr(self, name, None) is not None:
                os.close(getattr(self, name))
                setattr(self, name, None)
        entry = self._entry
        with _ENVS_LOCK:
            entry.refs -= 1
            if entry.refs <= 0:
                if _ENVS.get(self._real) is entry:
                    _ENVS.pop(self._real)
                if entry.pid == os.getpid():
                    entry.env.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __del__(self):
        try:
            if not self._closed and self._entry.pid == os.getpid():
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        mode = "write" if self._write else "read"
        return f"<LmdbStore {self.scheme}:{self.path} ({mode})>"
