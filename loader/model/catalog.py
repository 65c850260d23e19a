"""The catalog: a dataset's metadata in an LMDB environment, ``ROOT/catalog/``; one commit is
one write transaction of what changed. Why LMDB, the tables, commits, map growth, read-only
directories and damage: docs/design/catalog.md."""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import lmdb
import msgspec

from ..errors import DamagedDatasetError, NotReadableError, StoreError
from ..infra import faults
from ..infra.fsatomic import fsync_dir
from ..infra.lmdb_meta import MAGIC, META, P_META, read_meta_pages

CATALOG = "catalog"
DBS = ("meta", "batches", "by_first", "runs", "run_ids", "by_source", "files", "commits", "retired")
#: the map a catalog starts with (at least twice its file): sparse, never allocated; ~40 M
#: batch rows. A commit that fills it grows it (`Catalog.grow`). Not larger: a process may
#: hold many catalogs, and each map takes address space (128 TiB in all)
MIN_MAP = 8 << 30
KEY = struct.Struct(">Q")
_ENC = msgspec.json.Encoder()
PACK = msgspec.msgpack.Encoder()
_UNPACK = msgspec.msgpack.Decoder()
T = TypeVar("T")


def key(n: int) -> bytes:
    return KEY.pack(n)


def unkey(b: bytes | memoryview) -> int:
    n: int = KEY.unpack(b)[0]
    return n


def encode(obj: object) -> bytes:
    return _ENC.encode(obj)


def decode(b: bytes) -> object:
    return msgspec.json.decode(b)


def pack_row(row: Sequence[object]) -> bytes:
    return PACK.encode(row)


def unpack_row(b: bytes | memoryview) -> list[Any]:
    row: list[Any] = _UNPACK.decode(b)
    return row


class Aggregates(msgspec.Struct, kw_only=True):
    """What readers ask without reading every row, exact after every commit."""

    records: int = 0
    stored_bytes: int = 0
    text_bytes: int = 0
    batches: int = 0
    next_seq: int = 0
    next_record: int = 0
    last: list[Any] | None = None  # the last batch row
    shard_batches: dict[str, int] = {}  # shard -> batches holding records
    runs: int = 0  # runs in the table: numbers 0..runs-1 (creation order)
    runs_by_status: dict[str, int] = {}
    unfinished: list[int] = []  # run numbers of running / failed / interrupted runs
    last_replace: int = -1  # the number of the last run with `replace`
    last_compact: int = -1  # the number of the last done compaction


def damaged(path: str, what: str) -> DamagedDatasetError:
    root = os.path.dirname(path.rstrip("/"))
    return DamagedDatasetError(
        f"the catalog of dataset {root} ({path}) is damaged: {what}; nothing was written - "
        f"restore {path} from a backup, or move the dataset aside (mv {root} {root}.damaged) "
        "and load into a new path"
    )


# --- the data file, checked before it is mapped ------------------------------------------


def data_problem(data: str) -> str | None:
    """Why ``data.mdb`` cannot be mapped safely, or None (its meta pages read before its
    size: infra/lmdb_meta.py)."""
    try:
        with open(data, "rb", buffering=0) as f:
            head, second, size = read_meta_pages(f.fileno())
            if len(head) < META.size:
                return f"data.mdb is truncated ({size} bytes)"
            psize = META.unpack(head)[5]
            if len(second) < META.size or size < 2 * psize:  # (b"": no valid page size)
                return f"data.mdb is truncated or not an LMDB file ({size} bytes)"
            metas = [META.unpack(head), META.unpack(second)]
    except FileNotFoundError:
        return "data.mdb is missing"
    except OSError as e:
        return f"data.mdb cannot be read ({e.strerror or e})"
    for i, (pgno, _pad, flags, magic, _version, _psize, _last, _txn) in enumerate(metas):
        if pgno != i or not flags & P_META or magic != MAGIC:
            return f"meta page {i} of data.mdb is not a valid LMDB meta page"
    last_pg = max(metas, key=lambda m: m[7])[6]
    if size < (last_pg + 1) * psize:
        return f"data.mdb is truncated: {size} bytes, its pages in use reach byte {(last_pg + 1) * psize}"
    return None


# --- the environment of a catalog, one per process -----------------------------------------


@dataclass(eq=False)
class Catalog:
    """One open catalog environment and its databases."""

    path: str
    env: lmdb.Environment
    dbs: dict[str, Any]  # name -> the LMDB database handle
    fd: int  # data.mdb, held open: its inode identifies this environment
    pid: int = field(default_factory=os.getpid)
    writable: bool = True
    refs: int = 0  # open snapshots (Snap) and callers of open_catalog: the last one gone closes it

    def unref(self) -> None:
        """The caller of `open_catalog` is done with it (its snapshots hold their own)."""
        with _LOCK:
            self.refs -= 1
            if self.refs == 0:
                self.release()

    def release(self) -> None:
        """Close the environment and its data file (no snapshot of it is open): a process
        keeps no catalog open that it no longer reads (a file system can be unmounted)."""
        with _LOCK:
            # a copy: a snapshot's __del__, run by a garbage collection in this thread (the lock
            # is re-entrant), may release another catalog while this loop runs
            for k, c in _CATALOGS.copy().items():
                if c is self:
                    _CATALOGS.pop(k, None)
            if self.pid == os.getpid():
                with contextlib.suppress(lmdb.Error, OSError):
                    self.env.close()
                with contextlib.suppress(OSError):
                    os.close(self.fd)

    def snapshot(self) -> Snap:
        for _ in range(8):
            try:
                return Snap(self, self.env.begin(buffers=False))
            except lmdb.MapResizedError:  # a writer grew the map: adopt its size
                self.env.set_mapsize(0)
            except lmdb.Error as e:
                raise damaged(self.path, f"LMDB: {e}") from None
        raise damaged(self.path, "its map kept changing size")

    def grow(self) -> None:
        """Double the map (the caller holds no transaction of this environment)."""
        self.env.set_mapsize(2 * self.env.info()["map_size"])

    @contextlib.contextmanager
    def writing(self) -> Iterator[lmdb.Transaction]:
        """One durable write transaction; lmdb errors become StoreError / DamagedDatasetError."""
        if not self.writable:
            raise NotReadableError(f"{self.path} cannot be written (a read-only directory); nothing was written")
        with _LOCK:
            self.refs += 1  # no snapshot closed meanwhile may close the environment under this write
        try:
            with self.env.begin(write=True) as txn:
                yield txn
        except lmdb.MapFullError:
            raise MapFull() from None
        except lmdb.MapResizedError:
            self.env.set_mapsize(0)
            raise MapFull() from None
        except lmdb.DiskError as e:
            raise StoreError(
                f"could not write catalog {self.path}: {e}; the previous commit is intact - free "
                "space or fix permissions and retry"
            ) from None
        except lmdb.Error as e:
            raise damaged(self.path, f"LMDB: {e}") from None
        finally:
            with _LOCK:
                self.refs -= 1  # the caller's next snapshot keeps it open (or it stays cached)


class MapFull(Exception):
    """A write transaction found the map full (aborted): grow it and write again."""


_CATALOGS: dict[str, Catalog] = {}
_LOCK = threading.RLock()


def _same(cat: Catalog, data: str) -> bool:
    try:
        st, mine = os.stat(data), os.fstat(cat.fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def open_catalog(path: str, create: bool = False) -> Catalog:
    """The catalog environment at ``path`` (a ``catalog/`` directory) of this process, with
    one reference for the caller (`Catalog.unref` when done: then no other thread's last
    snapshot closes it meanwhile); DamagedDatasetError when its data file is missing or
    damaged (``create``: made)."""
    real = os.path.realpath(path)
    data = os.path.join(real, "data.mdb")
    with _LOCK:
        if not create:  # every open, cached or not: a file truncated since is a SIGBUS when read
            if not os.path.isdir(real):
                raise damaged(path, "the directory is missing")
            found = data_problem(data)
            if found is not None:
                raise damaged(path, found)
        cat = _CATALOGS.get(real)
        if cat is not None and cat.pid == os.getpid() and _same(cat, data):
            cat.refs += 1
            return cat
        moved = next((c for c in _CATALOGS.copy().values() if c.pid == os.getpid() and _same(c, data)), None)
        if moved is not None:  # the same files under another path (a --replace swapped directories)
            moved.path = path
            _CATALOGS[real] = moved
            moved.refs += 1
            return moved
        writable = os.access(real, os.W_OK) if os.path.isdir(real) else True
        try:
            size = os.path.getsize(data) if os.path.exists(data) else 0
            env = lmdb.open(
                real,
                subdir=True,
                create=create,
                max_dbs=len(DBS) + 1,
                map_size=max(MIN_MAP, 2 * size),
                sync=True,
                metasync=True,
                readahead=False,
                lock=writable,
                readonly=not writable,
                max_readers=1024,
            )  # every open manifest holds a read transaction
            if writable:
                with env.begin(write=True) as txn:
                    dbs = {name: env.open_db(name.encode(), txn=txn) for name in DBS}
            else:
                with env.begin() as txn:
                    dbs = {name: env.open_db(name.encode(), txn=txn, create=False) for name in DBS}
            fd = os.open(data, os.O_RDONLY | os.O_CLOEXEC)
        except lmdb.Error as e:
            raise damaged(path, f"LMDB: {e}") from None
        except OSError as e:
            raise damaged(path, e.strerror or str(e)) from None
        cat = Catalog(path, env, dbs, fd, writable=writable, refs=1)
        _CATALOGS[real] = cat
        return cat


# --- reading: a snapshot ---------------------------------------------------------------------


class Snap:
    """A read transaction of a catalog: one consistent generation."""

    def __init__(self, cat: Catalog, txn: lmdb.Transaction):
        self.cat, self.txn = cat, txn
        self.closed = False
        with _LOCK:
            cat.refs += 1

    def get(self, db: str, k: bytes) -> bytes | None:
        try:
            # bytes, not buffers: the snapshot's transaction is begun with buffers=False
            raw: bytes | None = self.txn.get(k, db=self.cat.dbs[db])  # type: ignore[assignment]
            return raw
        except lmdb.Error as e:
            raise damaged(self.cat.path, f"LMDB: {e}") from None

    def json(self, db: str, k: bytes, what: str) -> object:
        raw = self.get(db, k)
        if raw is None:
            raise damaged(self.cat.path, f"{what} is missing")
        try:
            return decode(raw)
        except msgspec.DecodeError:
            raise damaged(self.cat.path, f"{what} is not valid JSON") from None

    def header(self) -> dict[str, Any]:
        h = self.json("meta", b"header", "the header")
        if not isinstance(h, dict):
            raise damaged(self.cat.path, "the header is not a JSON object")
        return h

    def aggregates(self) -> Aggregates:
        raw = self.get("meta", b"aggregates")
        try:
            if raw is None:
                raise TypeError
            return msgspec.json.decode(raw, type=Aggregates)
        except (msgspec.DecodeError, TypeError):
            raise damaged(self.cat.path, "the aggregates are missing or not valid") from None

    def items(self, db: str, start: bytes | None = None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of ``db`` in key order (``reverse``: descending), from ``start``."""
        try:
            with self.txn.cursor(db=self.cat.dbs[db]) as cur:
                if reverse:
                    ok = cur.set_range(start) if start is not None else cur.last()
                    if start is not None and (not ok or cur.key() != start):
                        ok = cur.prev() if ok else cur.last()
                    it = cur.iterprev(keys=True, values=True) if ok else iter(())
                else:
                    ok = cur.set_range(start) if start is not None else cur.first()
                    it = cur.iternext(keys=True, values=True) if ok else iter(())
                yield from it  # type: ignore[misc]  # bytes, not buffers: begun with buffers=False
        except lmdb.Error as e:
            raise damaged(self.cat.path, f"LMDB: {e}") from None

    def floor(self, db: str, k: bytes) -> tuple[bytes, bytes] | None:
        """The (key, value) with the largest key <= ``k``, or None."""
        return next(self.items(db, k, reverse=True), None)

    def close(self) -> None:
        """End the read transaction; the last snapshot of a catalog closes it."""
        with _LOCK:
            if self.closed:
                return
            self.closed = True
            with contextlib.suppress(lmdb.Error):
                self.txn.abort()
            self.cat.refs -= 1
            if self.cat.refs == 0:
                self.cat.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def source_key(source: str, n: int) -> bytes:
    return source.encode() + b"\0" + key(n)


def row_of(snap: Snap, raw: bytes) -> list[Any]:
    try:
        return unpack_row(raw)
    except msgspec.DecodeError:
        raise damaged(snap.cat.path, "a batch row is not valid") from None


# --- writing: building a catalog in place ---------------------------------------------------


def build(root: str, fill: Callable[[lmdb.Transaction, Catalog], object]) -> Catalog:
    """A new catalog at ``ROOT/catalog`` (with a reference for the caller, as
    `open_catalog`), made complete before it appears: written by
    ``fill(txn, cat)`` into ``catalog.tmp-PID``, synced, then renamed into place.
    Leftover ``catalog.tmp-*`` directories (a build killed) are removed first."""
    remove_leftovers(root)
    tmp = os.path.join(root, f"{CATALOG}.tmp-{os.getpid()}")
    try:
        os.mkdir(tmp)  # never the parents: a dataset directory moved away is not made again
    except OSError as e:
        raise StoreError(f"could not create {tmp}: {e.strerror or e}; nothing was written") from None
    cat = open_catalog(tmp, create=True)
    write(cat, lambda txn: fill(txn, cat))
    cat.env.sync(True)
    faults.hit("catalog-built")
    final = os.path.join(root, CATALOG)
    os.rename(tmp, final)
    fsync_dir(root)
    with _LOCK:  # the same environment, now under its final path
        _CATALOGS.pop(os.path.realpath(tmp), None)
        cat.path = final
        _CATALOGS[os.path.realpath(final)] = cat
    faults.hit("catalog-renamed")
    return cat


def write(cat: Catalog, fn: Callable[[lmdb.Transaction], T]) -> T:
    """``fn(txn)`` in one durable write transaction, again with a larger map while it fills it."""
    while True:
        try:
            with cat.writing() as txn:
                return fn(txn)
        except MapFull:
            cat.grow()


def remove_leftovers(root: str) -> None:
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if name.startswith(f"{CATALOG}.tmp-") or name.startswith(f"{CATALOG}.stale-"):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def set_aside(root: str) -> None:
    """A catalog that is not this dataset's (stale): moved aside, removed by `remove_leftovers`."""
    path = os.path.join(root, CATALOG)
    if os.path.isdir(path):
        os.rename(path, os.path.join(root, f"{CATALOG}.stale-{os.getpid()}-{time.monotonic_ns()}"))
        fsync_dir(root)
