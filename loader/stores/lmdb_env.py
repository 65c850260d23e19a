"""LMDB environments: one per shard path per process, its map, and the writer lock.

- One ``Environment`` per path per process: environments are cached by real path
  (`ENVS`) and shared, reference counted, by every store object of the process; a reader
  opened in a process that already writes the shard reuses the writer's environment. An
  entry inherited across ``fork`` is never touched (a child opens its own).
- The map starts modest (option ``map_size``, the writer's size hint; an existing
  data.mdb larger than it wins) and grows (`grow_map`) with no transaction open. Readers
  adopt a map grown by the writer (``MapResizedError`` -> ``set_mapsize(0)``,
  `adopting_growth`); every change of the map forgets the entry's `Pages` (its old view
  must not be read).
- LMDB lets a second writer *wait* on its write mutex; bulkload wants "busy" instead, so a
  writer first takes an exclusive non-blocking ``flock`` on ``PATH/writer.lock``
  (`take_writer_lock`): a held lock is DatasetBusyError naming the holder's pid.
- Readers open ``readonly`` with the lock table: they never block on a writer and see
  the last committed transaction. A reader whose open overlapped a compaction's
  directory swap (its lock file and data file could come from different directories)
  opens again.
- data.mdb is checked (lmdb_files.data_file_problem) before it is mapped; LMDB's errors
  on reading a damaged B-tree become one CorruptStoreError naming the shard (`reading`).

The writer opens with ``sync=False, metasync=False``: LmdbStore.sync is the durability
point. A crash leaves the environment as LMDB leaves it; nothing here writes data.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, TypeVar

import lmdb

from ..errors import DatasetBusyError, MissingPathError, StoreError
from ..infra.fsatomic import path_ident
from ..infra.regular import require_regular
from .base import corrupt_store
from .health import REBUILD
from .lmdb_files import BIG_ENDIAN, Pages, data_file_problem, file_size, map_base
from .options import LmdbOptions

T = TypeVar("T")

MIB = 1 << 20
#: a reader's open is tried this many times while its writer grows or compacts the shard
READER_OPEN_ATTEMPTS = 8


@dataclass
class EnvEntry:
    """One open environment of this process, shared by its store objects."""

    env: lmdb.Environment
    writable: bool
    pid: int
    refs: int = 0
    dbs: dict[str, lmdb._Database] = field(default_factory=dict)  # table name -> handle
    pages: Pages | None = None  # data.mdb's pages in use as mapped here (`mapped_pages`)


ENVS: dict[str, EnvEntry] = {}
ENVS_LOCK = threading.RLock()


def round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


# --- the cache ----------------------------------------------------------------------------


def acquire_env(path: str, *, write: bool, options: LmdbOptions) -> EnvEntry:
    """This process's environment of shard ``path`` (opened if need be), one more reference."""
    real = os.path.realpath(path)
    with ENVS_LOCK:
        entry = ENVS.get(real)
        if entry is not None and entry.pid != os.getpid():
            # inherited across fork: never touch the parent's handle
            ENVS.pop(real)
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
        entry = EnvEntry(env=open_env(path, write=write, options=options), writable=write, pid=os.getpid(), refs=1)
        ENVS[real] = entry
        return entry


def open_under(root: str) -> bool:
    """Whether this process holds an environment of a shard under directory ``root``."""
    prefix = os.path.join(os.path.realpath(root), "")
    with ENVS_LOCK:
        return any(real.startswith(prefix) and e.pid == os.getpid() for real, e in ENVS.items())


def release_env(real: str, entry: EnvEntry) -> None:
    """One reference fewer; the last one closes the environment (if this process opened it)."""
    with ENVS_LOCK:
        entry.refs -= 1
        if entry.refs <= 0:
            if ENVS.get(real) is entry:
                ENVS.pop(real)
            if entry.pid == os.getpid():
                entry.env.close()


def close_env(real: str, entry: EnvEntry) -> None:
    """Close the environment now, whatever its references (compaction swaps its files)."""
    with ENVS_LOCK:
        entry.env.close()
        ENVS.pop(real, None)


# --- opening ------------------------------------------------------------------------------


def open_env(path: str, *, write: bool, options: LmdbOptions) -> lmdb.Environment:
    """Open shard ``path``'s environment, once its data.mdb (if any) is safe to map."""
    data = os.path.join(path, "data.mdb")
    require_regular(os.path.join(path, "lock.mdb"), advice=REBUILD)  # LMDB opens and maps it
    found = require_regular(data, advice=REBUILD)  # a FIFO, a device: never opened
    existing = os.path.getsize(data) if found else 0
    if found and (existing or not write):  # an empty file is one a writer is about to initialise
        damage = data_file_problem(data)
        if damage is not None:
            raise corrupt_store(path, damage)
    if write:
        return _open_writer_env(path, existing, options)
    if not existing:
        raise MissingPathError(f"shard {path} has no data.mdb: it is not an LMDB shard (or was never written)")
    return _open_reader_env(path, existing, options)


def _open_writer_env(path: str, existing: int, options: LmdbOptions) -> lmdb.Environment:
    map_size = round_up(max(options.map_size, existing), 64 * 1024)
    try:
        return lmdb.open(
            path,
            map_size=map_size,
            subdir=True,
            readonly=False,
            create=True,
            sync=False,
            metasync=False,
            writemap=options.writemap,
            map_async=options.writemap,
            meminit=False,
            readahead=options.readahead,
            max_dbs=options.max_dbs,
            lock=True,
        )
    except lmdb.Error as e:
        raise StoreError(errno.EIO, f"cannot open LMDB shard {path} for writing: {e}") from e


def _open_reader_env(path: str, existing: int, options: LmdbOptions) -> lmdb.Environment:
    data = os.path.join(path, "data.mdb")
    for _attempt in range(READER_OPEN_ATTEMPTS):
        where = path_ident(path)
        try:
            # the size stored in the file (or its current extent) is adopted by LMDB
            env = lmdb.open(
                path,
                map_size=round_up(existing, MIB),
                subdir=True,
                readonly=True,
                create=False,
                readahead=options.readahead,
                max_dbs=options.max_dbs,
                lock=True,
            )
        except lmdb.MapResizedError:
            # a writer grew the map between our stat and the open's first transaction
            existing = max(existing, file_size(data)) * 2
            continue
        except lmdb.Error as e:
            if path_ident(path) != where:
                continue  # a compaction swapped the directory during the open
            raise StoreError(errno.EIO, f"cannot open LMDB shard {path} for reading: {e}") from e
        if path_ident(path) == where:
            return env
        env.close()  # swapped mid-open: its lock and data files may not belong together
        existing = max(existing, file_size(data))
    raise StoreError(
        errno.EAGAIN, f"cannot open LMDB shard {path} for reading: its writer keeps growing or compacting it; try again"
    )


def take_writer_lock(path: str) -> int:
    """The fd of ``path/writer.lock``, held exclusively (it records our pid), or
    DatasetBusyError naming the pid of the job that holds it."""
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


def _busy_message(path: str, holder: str) -> str:
    who = f" (pid {holder})" if holder else ""
    return f"shard {path} is being written by another job{who}; wait for that job to finish or stop it, then retry"


# --- reading and the map ------------------------------------------------------------------


class reading:
    """``with reading(path):`` turns LMDB's errors on reading (MDB_CORRUPTED,
    MDB_PAGE_NOTFOUND, MDB_BAD_TXN, ...: a damaged B-tree) into one CorruptStoreError naming
    the shard (`damaged`). (A class, not a generator: ~0.3 us instead of ~1.2; a single
    get catches the error itself, for free.)"""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if kind is not None and isinstance(e, lmdb.Error):
            damaged(self.path, e)
        return False


def damaged(path: str, e: lmdb.Error) -> None:
    """Raise the CorruptStoreError of LMDB error ``e`` on reading shard ``path``; return for
    the errors of a healthy store (growth of the map, a table another process dropped:
    handled by the callers)."""
    if not isinstance(e, (lmdb.MapResizedError, lmdb.MapFullError, lmdb.BadDbiError)):
        raise corrupt_store(path, f"LMDB cannot read it ({type(e).__name__}: {e})") from None


def adopting_growth(entry: EnvEntry, fn: Callable[[], T]) -> T:
    """fn() (which begins a read transaction), again after adopting the map size when
    the writer (another process) grew the map meanwhile."""
    for _ in range(8):
        try:
            return fn()
        except lmdb.MapResizedError:
            with ENVS_LOCK:
                entry.pages = None  # the map moves: its old view must not be read
                entry.env.set_mapsize(0)
    return fn()


def used_bytes(env: lmdb.Environment) -> tuple[int, int]:
    """(map size, bytes of the pages in use)."""
    info = env.info()
    return info["map_size"], (info["last_pgno"] + 1) * env.stat()["psize"]


def grow_map(entry: EnvEntry, path: str, need: int) -> None:
    """Grow the map (no transaction may be open) to fit at least ``need`` more bytes."""
    cur, used = used_bytes(entry.env)
    new = round_up(max(cur * 2, used + 2 * need + 4 * MIB), MIB)
    try:
        with ENVS_LOCK:
            entry.pages = None  # the map moves: its old view must not be read
            entry.env.set_mapsize(new)
    except lmdb.Error as e:
        raise StoreError(
            errno.ENOMEM,
            f"shard {path}: cannot grow the LMDB map from {cur} to {new} bytes: {e}",
        ) from e


def mapped_pages(entry: EnvEntry, path: str, refresh: bool = False) -> Pages | None:
    """The pages in use of data.mdb as mapped in this process (kept in the entry until the
    map grows or a check fails), or None when the map cannot be found (no /proc) or the
    machine is big-endian: nothing is checked then."""
    if BIG_ENDIAN or (entry.pages is not None and not refresh):
        return entry.pages
    info = entry.env.info()
    old = entry.pages
    base = (
        old.base if old is not None and old.map_size == info["map_size"] else map_base(os.path.join(path, "data.mdb"))
    )
    entry.pages = (
        None if base is None else Pages(base, info["map_size"], info["last_pgno"] + 1, entry.env.stat()["psize"])
    )
    return entry.pages
