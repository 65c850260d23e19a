"""LMDB shards (``lmdb://PATH`` and ``mem://NAME``, LMDB on /dev/shm): the store and its writes
(reads: lmdb_reads.py; environments, map, writer lock: lmdb_env.py). The rules it keeps,
durability and the URI options: docs/design/stores.md."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import chain, pairwise
from typing import TYPE_CHECKING, Literal, TypeVar, overload

import lmdb

from ..errors import DamagedDatasetError, MissingPathError, StoreError
from ..infra import faults
from ..infra.fsatomic import exchange, fsync_dir
from ..infra.regular import open_regular
from .base import ShardStore, ascending, corrupt_store, make_shard_dir, require_access
from .lmdb_env import (
    EnvEntry,
    acquire_env,
    adopting_growth,
    close_env,
    grow_map,
    release_env,
    take_writer_lock,
    used_bytes,
)
from .lmdb_files import (
    can_write_back,
    compaction_leftovers,
    data_file_problem,
    recover_compaction,
    reserve_blocks,
    writeback,
)
from .lmdb_reads import LmdbReads
from .options import LmdbOptions
from .spec import is_mem_path

if TYPE_CHECKING:
    from ..infra.bytes_like import BytesLike

#: a writer starts the disk writes of its commits every this many bytes (_early_writeback)
WRITEBACK_BYTES = 32 << 20
#: attempts of a write call that keeps finding the map full after growing it
GROWTH_ATTEMPTS = 64

T = TypeVar("T")


class LmdbStore(LmdbReads, ShardStore):
    scheme = "lmdb"

    def __init__(self, path: str, entry: EnvEntry, *, write: bool, options: LmdbOptions, lock_fd: int | None) -> None:
        self.path = path
        self._real = os.path.realpath(path)
        self._entry = entry
        self._write = write
        self._opts = options
        self._lock_fd = lock_fd
        self._closed = False
        self._unflushed = 0  # bytes committed since the last early writeback
        self._wb_fd: int | None = None  # data.mdb, for early writeback
        self._data_fd: int | None = None  # data.mdb, for readahead advice
        if is_mem_path(path):
            self.scheme = "mem"

    # --- opening -----------------------------------------------------------------

    #: files a reader writes too (LMDB's reader table)
    READER_WRITES = ("lock.mdb",)

    @classmethod
    def open(
        cls,
        path: str,
        *,
        write: bool,
        options: Mapping[str, object] | None = None,
        map_size: int | None = None,
        readahead: bool | None = None,
    ) -> LmdbStore:
        """Open the shard directory ``path``.

        Extra keyword options (beyond the interface): ``map_size`` (the writer's size
        hint, bytes) and ``readahead`` override the same-named entries of ``options``.
        """
        given = dict(options or {})
        if map_size is not None:
            given["map_size"] = map_size
        if readahead is not None:
            given["readahead"] = readahead
        opts = LmdbOptions.parse(given)
        path = os.path.abspath(path)
        require_access(path, write, cls.READER_WRITES)  # a permission problem is not damage
        if write:
            recover_compaction(path)  # before the directory is (re)created: it may be the copy's
            make_shard_dir(path)
        elif not os.path.isdir(path):
            raise MissingPathError(f"shard {path} does not exist; check the dataset path (was it loaded?)")
        lock_fd = take_writer_lock(path) if write else None
        try:
            entry = acquire_env(path, write=write, options=opts)
        except BaseException:
            if lock_fd is not None:
                os.close(lock_fd)
            raise
        return cls(path, entry, write=write, options=opts, lock_fd=lock_fd)

    @classmethod
    def interrupted_compaction(cls, path: str) -> bool:
        return compaction_leftovers(os.path.abspath(path))

    @classmethod
    def check(cls, path: str) -> str | None:
        if not os.path.isdir(path):
            return "missing"
        data = os.path.join(path, "data.mdb")
        if not os.path.exists(data):
            return "no data.mdb in it: not an LMDB store"
        return data_file_problem(data)

    # --- helpers -------------------------------------------------------------------

    @property
    def env(self) -> lmdb.Environment:
        if self._closed:
            raise StoreError(errno.EBADF, f"shard {self.path} is closed")
        return self._entry.env

    def _begin_read(self) -> lmdb.Transaction[memoryview]:
        """A read transaction whose values are buffers into the map."""
        env = self.env
        try:  # the common case first: every single get begins one
            return env.begin(write=False, buffers=True)
        except lmdb.MapResizedError:
            return adopting_growth(self._entry, lambda: env.begin(write=False, buffers=True))

    @overload
    def _db(self, table: str, *, create: Literal[True]) -> lmdb._Database: ...

    @overload
    def _db(self, table: str, *, create: bool) -> lmdb._Database | None: ...

    def _db(self, table: str, *, create: bool) -> lmdb._Database | None:
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
                db = adopting_growth(self._entry, lambda: env.open_db(name, create=False))
            except (lmdb.NotFoundError, lmdb.ReadonlyError):
                return None
            except (lmdb.MapResizedError, lmdb.MapFullError):
                raise
            except lmdb.Error as e:  # e.g. MDB_INCOMPATIBLE: the main B-tree is damaged
                raise corrupt_store(self.path, f"LMDB cannot open table {table!r} ({type(e).__name__}: {e})") from None
        dbs[table] = db
        return db

    def _dropped(self, table: str) -> None:
        """A writer dropped ``table`` after this process opened its handle (MDB_BAD_DBI):
        forget the handle; reads see the table as absent."""
        self._entry.dbs.pop(table, None)

    grows = 0  # map growths done by this object (for tests and reports)

    def _grow(self, need: int) -> None:
        """Grow the map (no transaction may be open) to fit at least ``need`` more bytes."""
        grow_map(self._entry, self.path, need)
        self.grows += 1

    def _with_growth(self, fn: Callable[[], T]) -> T:
        for _ in range(GROWTH_ATTEMPTS):
            try:
                return fn()
            except lmdb.MapFullError:
                self._grow(0)
        raise StoreError(errno.ENOSPC, f"shard {self.path}: LMDB map still full after growing")

    # --- writing ------------------------------------------------------------------

    def put_sorted(self, items: Iterable[tuple[BytesLike, BytesLike]], table: str = "batches") -> int:
        self._require_write("put_sorted")
        if isinstance(items, (list, tuple)):
            nbytes = self._make_room(items)
            if items and {type(k) for k, _v in items} == {bytes}:
                return self._put_list(items, table, nbytes)
        source = iter(items)
        try:
            first = next(source)
        except StopIteration:
            return 0
        db = self._db(table, create=True)
        seen: list[tuple[bytes, BytesLike]] = []  # kept to retry the call after growing

        def checked(pairs: Iterable[tuple[BytesLike, BytesLike]]) -> Iterator[tuple[bytes, BytesLike]]:
            prev = seen[-1][0] if seen else None
            for k, v in ascending(pairs, self.path, table, prev):
                seen.append((k, v))
                yield k, v

        pending = chain([first], source)
        for _attempt in range(GROWTH_ATTEMPTS):
            try:
                consumed = self._put_stream(
                    db, table, chain(list(seen), checked(pending)), seen[0][0] if seen else bytes(first[0])
                )
                self._early_writeback(sum(len(k) + len(v) for k, v in seen) if seen else 0)
                return consumed
            except lmdb.MapFullError:
                # what was read so far is in `seen`; `pending` holds the rest
                self._grow(sum(len(k) + len(v) for k, v in seen))
        raise StoreError(errno.ENOSPC, f"shard {self.path}: LMDB map still full after growing")

    def _put_list(
        self, items: list[tuple[bytes, BytesLike]] | tuple[tuple[bytes, BytesLike], ...], table: str, nbytes: int
    ) -> int:
        """`put_sorted` of a list of bytes keys (``nbytes``: of keys and values): checked
        ascending up front (KeyOrderError, as `ascending` says it) and written as it is,
        without a generator per item - a load's groups of small batches (100-record batches:
        1-2 us an item less, ad hoc)."""
        keys = [k for k, _v in items]
        if any(a >= b for a, b in pairwise(keys)):
            list(ascending(items, self.path, table))  # raises, naming the keys
        db = self._db(table, create=True)
        for _attempt in range(GROWTH_ATTEMPTS):
            try:
                consumed = self._put_stream(db, table, items, keys[0])
                self._early_writeback(nbytes)
                return consumed
            except lmdb.MapFullError:
                self._grow(nbytes)
        raise StoreError(errno.ENOSPC, f"shard {self.path}: LMDB map still full after growing")

    def _make_room(self, items: list[tuple[BytesLike, BytesLike]] | tuple[tuple[BytesLike, BytesLike], ...]) -> int:
        """A call of known size: grow once up front instead of failing a big transaction
        (and, under a writable map, allocate the file blocks it will write); the bytes of its
        keys and values."""
        nbytes = sum(len(k) + len(v) for k, v in items)
        need = nbytes + nbytes // 8 + 64 * 1024 + 4096 * len(items)
        cur, used = used_bytes(self.env)
        if cur - used < need:
            self._grow(need)
        if self._write and self.env.flags().get("writemap"):
            reserve_blocks(self.path, used, need)
        return nbytes

    def _put_stream(
        self, db: lmdb._Database, table: str, stream: Iterable[tuple[bytes, BytesLike]], head: bytes
    ) -> int:
        """Write ``stream`` (keys ascending, the first one ``head``) in one transaction:
        LMDB's append path when it starts above the table's last key, else overwrites."""
        with self.env.begin(write=True, db=db) as txn:
            cur = txn.cursor(db)
            last = cur.key() if cur.last() else None
            append = last is None or head > bytes(last)
            consumed, added = cur.putmulti(stream, dupdata=False, overwrite=True, append=append)
            if consumed != added:
                raise StoreError(
                    errno.EIO,
                    f"put_sorted on {self.path} table {table!r}: LMDB wrote {added} "
                    f"of {consumed} items (append={append}); nothing was written",
                )
        return consumed

    def delete_range(self, lo: bytes | None = None, hi: bytes | None = None, table: str = "batches") -> int:
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

        def run() -> None:
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

    def sync(self) -> None:
        if self._write:
            try:
                self.env.sync(True)
            except lmdb.Error as e:
                raise StoreError(errno.EIO, f"cannot sync shard {self.path}: {e}") from e

    def _early_writeback(self, nbytes: int) -> None:
        """Start the disk writes of what was committed, without waiting for them (every
        WRITEBACK_BYTES), so that the durability point, `sync`, finds little left to
        write: the disk works while the loader computes. Durability itself is unchanged
        (only `sync` promises it)."""
        self._unflushed += nbytes
        if self._unflushed < WRITEBACK_BYTES or self.scheme == "mem" or not can_write_back():
            return
        self._unflushed = 0
        if self._wb_fd is None:
            try:
                self._wb_fd = open_regular(os.path.join(self.path, "data.mdb"))
            except (OSError, DamagedDatasetError):
                return
        writeback(self._wb_fd)

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

    # --- compaction ---------------------------------------------------------------

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
        new_lock = self._compacted_copy(new, old)
        close_env(self._real, entry)  # close our environment, then swap directories
        faults.hit("compact-copied")
        self._swap_in(new, old)
        if self._lock_fd is not None:  # a writer's (compact requires one)
            os.close(self._lock_fd)
        self._lock_fd = new_lock
        self._entry = acquire_env(self.path, write=True, options=self._opts)
        self._real = os.path.realpath(self.path)
        return before, self.nbytes()

    def _compacted_copy(self, new: str, old: str) -> int:
        """Write the compacted copy to ``new`` (durable), holding its writer lock (returned)."""
        for leftover in (new, old):
            shutil.rmtree(leftover, ignore_errors=True)
        os.mkdir(new)
        try:
            self.env.copy(new, compact=True)
            with open(os.path.join(new, "data.mdb"), "rb+") as f:
                os.fsync(f.fileno())
            return take_writer_lock(new)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise

    def _swap_in(self, new: str, old: str) -> None:
        """Put the copy at ``new`` where the shard is (durably), then remove the old files."""
        if exchange(new, self.path):  # one atomic step; `new` now holds the old shard
            faults.hit("compact-swapped")
            os.rename(new, old)
        else:
            os.rename(self.path, old)
            faults.hit("compact-swapped")
            os.rename(new, self.path)
        fsync_dir(os.path.dirname(self.path))
        shutil.rmtree(old, ignore_errors=True)

    # --- closing ------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name in ("_wb_fd", "_data_fd"):
            fd: int | None = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)
        release_env(self._real, self._entry)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __del__(self) -> None:
        try:
            if not self._closed and self._entry.pid == os.getpid():
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        mode = "write" if self._write else "read"
        return f"<LmdbStore {self.scheme}:{self.path} ({mode})>"
