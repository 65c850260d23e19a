"""RocksDB shards (``rocksdb://PATH``) through rocksdict: one database per shard, a column family
per table, writes as ingested SST files. The rules it keeps, read errors, crash behaviour and
the URI options: docs/design/stores.md."""

from __future__ import annotations

import errno
import itertools
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    BottommostLevelCompaction,
    CompactOptions,
    DBCompressionType,
    IngestExternalFileOptions,
    Options,
    Rdict,
    SstFileWriter,
)

from ..errors import (
    BulkloadError,
    DamagedDatasetError,
    DatasetBusyError,
    KeyOrderError,
    MissingPathError,
    StoreError,
    UsageError,
)
from ..infra.regular import open_regular_file, require_regular_entries
from .base import ShardStore, ascending, corrupt_store, make_shard_dir, require_access
from .health import REBUILD
from .options import RocksdbOptions

_COMPRESSION = {
    "none": DBCompressionType.none,
    "lz4": DBCompressionType.lz4,
    "zstd": DBCompressionType.zstd,
}
_counter = itertools.count()
ZSTD_DICT_BYTES = 16 * 1024
#: read-only opens tried before giving up (a writer may delete files while one opens)
READ_OPEN_ATTEMPTS = 5


def _options(options: RocksdbOptions, *, write: bool) -> Options:
    """RocksDB's Options for a shard opened with ``options``."""
    opts = Options(raw_mode=True)
    if options.compression == "zstd-dict":
        level = options.zstd_level
        z = DBCompressionType.zstd
        opts.set_compression_type(z())
        opts.set_bottommost_compression_type(z())
        # (window bits, level, strategy, max_dict_bytes); -14 is RocksDB's default window
        opts.set_compression_options(-14, level, 0, ZSTD_DICT_BYTES)
        opts.set_bottommost_compression_options(-14, level, 0, ZSTD_DICT_BYTES, True)
        opts.set_zstd_max_train_bytes(ZSTD_DICT_BYTES * 100)
        opts.set_bottommost_zstd_max_train_bytes(ZSTD_DICT_BYTES * 100, True)
    else:
        opts.set_compression_type(_COMPRESSION[options.compression]())
    if options.block_size is not None:
        bb = BlockBasedOptions()
        bb.set_block_size(options.block_size)
        opts.set_block_based_table_factory(bb)
    if write:
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
    return opts


def _is_lock_error(e: Exception) -> bool:
    msg = str(e)
    return "LOCK" in msg and ("lock" in msg.lower() or "Resource temporarily" in msg)


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


class RocksdbStore(ShardStore):
    scheme = "rocksdb"

    def __init__(self, path: str, db: Rdict, opts: Options, *, write: bool):
        self.path = path
        self._db: Rdict | None = db
        self._opts = opts
        self._write = write
        self._cfs: dict[str, Rdict] = {}

    # --- opening -----------------------------------------------------------------

    @classmethod
    def open(cls, path: str, *, write: bool, options: dict | None = None) -> RocksdbStore:
        options = RocksdbOptions.parse(options or {})
        path = os.path.abspath(path)
        opts = _options(options, write=write)
        require_access(path, write)  # a permission problem is not damage
        if os.path.isdir(path):  # RocksDB opens every file it finds there: no FIFO, no device
            require_regular_entries(path, advice=REBUILD)
        exists = os.path.exists(os.path.join(path, "CURRENT"))
        if write:
            make_shard_dir(path)
            access = AccessType.read_write()
        else:
            if not exists:
                raise MissingPathError(
                    f"shard {path} is not a RocksDB database (no CURRENT file); check the dataset path (was it loaded?)"
                )
            access = AccessType.read_only(False)
        for attempt in range(1 if write else READ_OPEN_ATTEMPTS):
            try:
                cfs = cls._families(path, options, write) if exists else None
                db = Rdict(path, opts, column_families=cfs, access_type=access)
                break
            except Exception as e:
                if write and _is_lock_error(e):
                    raise DatasetBusyError(
                        f"dataset shard {path} is being written by another job (its LOCK is "
                        f"held); wait for that job to finish or stop it, then retry"
                    ) from None
                err = e
                time.sleep(0.02 * attempt)  # a reader racing a writer's compaction: again
        else:
            raise StoreError(
                errno.EIO, f"cannot open RocksDB shard {path} ({'write' if write else 'read'}): {err}"
            ) from err
        store = cls(path, db, opts, write=write)
        store._known = set(cfs or ())
        return store

    @staticmethod
    def _families(path: str, options: RocksdbOptions, write: bool) -> dict:
        try:
            names = Rdict.list_cf(path, Options(raw_mode=True))
        except Exception as e:
            raise StoreError(errno.EIO, f"cannot list the tables of shard {path}: {e}") from e
        return {n: _options(options, write=write) for n in names if n != "default"}

    @classmethod
    def check(cls, path: str) -> str | None:
        if not os.path.isdir(path):
            return "missing"
        try:
            require_regular_entries(path)  # RocksDB opens what it finds: no FIFO, no device
            with open_regular_file(os.path.join(path, "CURRENT")) as f:
                current = f.read(256).decode(errors="replace").strip()
        except FileNotFoundError:
            return "no CURRENT file in it: not a RocksDB database"
        except DamagedDatasetError as e:
            return e.what
        except OSError as e:
            return f"its CURRENT file cannot be read ({e.strerror or e})"
        if not current.startswith("MANIFEST-") or "/" in current:
            return f"its CURRENT file does not name a MANIFEST ({current[:40]!r})"
        if not os.path.isfile(os.path.join(path, current)):
            return f"its CURRENT file names {current}, which is missing"
        return None

    # --- helpers -------------------------------------------------------------------

    @property
    def db(self) -> Rdict:
        if self._db is None:
            raise StoreError(errno.EBADF, f"shard {self.path} is closed")
        return self._db

    def _cf(self, table: str, *, create: bool) -> Rdict | None:
        cf = self._cfs.get(table)
        if cf is not None:
            return cf
        if table == "default":
            raise UsageError("'default' is reserved by RocksDB; choose another table name")
        if table in self._known:
            cf = self.db.get_column_family(table)
        elif create:
            cf = self.db.create_column_family(table, self._opts)
            self._known.add(table)
        else:
            return None
        self._cfs[table] = cf
        return cf

    # --- the interface ------------------------------------------------------------

    def put_sorted(self, items: Iterable[tuple[bytes, bytes]], table: str = "batches") -> int:
        self._require_write("put_sorted")
        source = iter(items)
        try:
            first = next(source)
        except StopIteration:
            return 0
        cf = self._cf(table, create=True)
        tmp = os.path.join(self.path, f"ingest-{os.getpid()}-{next(_counter)}.sst")
        writer = SstFileWriter(self._opts)
        writer.open(tmp)
        n = 0
        try:
            for k, v in ascending(itertools.chain([first], source), self.path, table):
                writer[k] = v if type(v) is bytes else bytes(v)
                n += 1
            writer.finish()
            ingest = IngestExternalFileOptions()
            ingest.set_move_files(True)
            cf.ingest_external_file([tmp], ingest)
        except KeyOrderError:
            raise
        except Exception as e:
            raise StoreError(
                errno.EIO, f"put_sorted on {self.path} table {table!r} failed: {e}; nothing from this call was written"
            ) from e
        finally:
            del writer
            try:
                os.unlink(tmp)  # still there unless ingestion moved it
            except FileNotFoundError:
                pass
        return n

    def get(self, key: bytes, table: str = "batches") -> bytes | None:
        cf = self._cf(table, create=False)
        if cf is None:
            return None
        with self._reading():
            return cf.get(bytes(key))

    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, table: str = "batches"
    ) -> Iterator[tuple[bytes, bytes]]:
        cf = self._cf(table, create=False)
        if cf is None:
            return
        hi_b = None if hi is None else bytes(hi)
        with self._reading():
            it = cf.iter()
            if lo is None:
                it.seek_to_first()
            else:
                it.seek(bytes(lo))
        while True:
            with self._reading():
                if not it.valid():
                    it.status()  # an iterator stopped by an error (a damaged block) raises here
                    return
                k = it.key()
                if hi_b is not None and k >= hi_b:
                    return
                v = it.value()
            yield k, v
            with self._reading():
                it.next()

    def seek(self, key: bytes, table: str = "batches") -> tuple[bytes, bytes] | None:
        cf = self._cf(table, create=False)
        if cf is None:
            return None
        with self._reading():
            it = cf.iter()
            it.seek(bytes(key))
            if not it.valid():
                it.status()
                return None
            return it.key(), it.value()

    @contextmanager
    def _reading(self):
        """RocksDB's errors on reading (Corruption: block checksum mismatch, a missing SST
        file, ...) become one CorruptStoreError naming the shard."""
        try:
            yield
        except BulkloadError:
            raise
        except Exception as e:
            raise corrupt_store(self.path, f"RocksDB cannot read it ({str(e).strip() or type(e).__name__})") from None

    def delete_range(self, lo: bytes | None = None, hi: bytes | None = None, table: str = "batches") -> int:
        self._require_write("delete_range")
        cf = self._cf(table, create=False)
        if cf is None:
            return 0
        n, first, last = 0, None, None
        for k, _v in self.range(lo, hi, table):
            if first is None:
                first = k
            last = k
            n += 1
        if n:
            # one range tombstone: atomic; [first, last + 0x00) covers exactly those keys
            cf.delete_range(first if lo is None else bytes(lo), last + b"\x00" if hi is None else bytes(hi))
        return n

    def drop_table(self, table: str) -> None:
        self._require_write("drop_table")
        if table not in self._known:
            return
        self._cfs.pop(table, None)
        self.db.drop_column_family(table)
        self._known.discard(table)

    def has_table(self, table: str) -> bool:
        return table in self._known

    def tables(self) -> list[str]:
        if self._write:
            return sorted(self._known)
        return sorted(n for n in Rdict.list_cf(self.path, Options(raw_mode=True)) if n != "default")

    def sync(self) -> None:
        if not self._write:
            return
        try:
            self.db.flush(True)
            for cf in self._cfs.values():
                cf.flush(True)
            self.db.flush_wal(True)
        except Exception as e:
            raise StoreError(errno.EIO, f"cannot sync shard {self.path}: {e}") from e

    def nbytes(self) -> int:
        """Bytes allocated to the database directory's files (``st_blocks * 512``)."""
        return _dir_bytes(self.path)

    def compact(self) -> tuple[int, int]:
        """``compact_range`` over every column family (bottommost level rewritten too)."""
        self._require_write("compact")
        before = self.nbytes()
        copts = CompactOptions()
        copts.set_exclusive_manual_compaction(True)
        copts.set_bottommost_level_compaction(BottommostLevelCompaction.force())
        try:
            self.sync()
            for table in sorted(self._known):
                self._cf(table, create=False).compact_range(None, None, copts)
            self.db.compact_range(None, None, copts)
        except Exception as e:
            raise StoreError(errno.EIO, f"cannot compact shard {self.path}: {e}") from e
        return before, self.nbytes()

    def close(self) -> None:
        if self._db is None:
            return
        db, self._db = self._db, None
        self._cfs.clear()  # a column-family handle would keep the database (and LOCK) open
        try:
            db.close()
        finally:
            del db

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        mode = "write" if self._write else "read"
        return f"<RocksdbStore {self.path} ({mode})>"
