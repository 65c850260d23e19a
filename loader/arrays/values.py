"""Zero-copy reads of stored values: `ValueReader` and the checked read of a flat batch.

``with ValueReader(store, table) as rd: v = rd.get(key)``: under LMDB ``v`` is a buffer
into the memory map, valid until the block ends (a read transaction with
``buffers=True``); other backends copy. ``rd.release(v)`` drops the value's pages from
this process's resident set after use, so a pass over a store larger than RAM stays flat
in RSS. `read_batch` reads one flat batch and checks it against its manifest row (size and
xxh3): a changed batch must never be rebuilt into arrays or merged batches with a new
checksum.

Interim home: ValueReader is moving to loader/stores/values.py (branch split-stores),
with a public store API instead of LmdbStore's private names it uses here; its code is
unchanged from arrays/finalize.py. maintain/merge.py reads through it too (an upward
import until then). Reads only: a crash leaves nothing behind.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import CorruptBatchError
from ..model.manifest import BatchEntry
from ..model.placement import batch_key
from ..stores.base import StoreSpec
from ..stores.health import batch_message, check_value


class ValueReader:
    """Reads values of one table of one shard; zero-copy under LMDB while open.

    ``with ValueReader(store, table) as rd: v = rd.get(key)``: ``v`` is valid until the
    block ends (an LMDB read transaction with ``buffers=True``); other backends copy.
    """

    def __init__(self, store, table: str):
        self.store = store
        self.table = table
        self.txn = None
        self.db = None
        self.cursor = None
        self.pages = None

    def __enter__(self):
        st = self.store
        if getattr(st, "scheme", "") in ("lmdb", "mem") and hasattr(st, "_db"):
            self.db = st._db(self.table, create=False)
            if self.db is not None:
                import lmdb  # optional: only LMDB shards are read zero-copy

                env = st.env
                try:
                    self.txn = env.begin(write=False, buffers=True)
                except lmdb.MapResizedError:
                    st._entry.pages = None  # the map moves: its old view must not be read
                    env.set_mapsize(0)
                    self.txn = env.begin(write=False, buffers=True)
                try:
                    self.cursor = self.txn.cursor(self.db)
                except lmdb.BadDbiError:  # another process dropped the table: it reads as absent
                    st._dropped(self.table)
                    self.txn.abort()
                    self.txn = self.db = None
                    return self
                self.pages = st._pages()
        return self

    def get(self, key: bytes):
        if self.txn is not None:
            import lmdb  # optional: only LMDB shards have a read transaction

            from ..stores.lmdb_store import _reading  # imports lmdb: only for LMDB shards

            try:
                with _reading(self.store.path):  # a damaged store: one error naming the shard
                    if not self.cursor.set_key(key):
                        return None
                    return self.store._value(self.cursor, self.pages)
            except lmdb.BadDbiError:  # the table was dropped after this process opened it
                return None
        if self.db is None and getattr(self.store, "scheme", "") in ("lmdb", "mem"):
            return None
        return self.store.get(key, table=self.table)

    def release(self, value) -> None:
        """Done with a zero-copy value: drop its pages from this process's resident set
        (``madvise(MADV_DONTNEED)`` on the read-only file mapping; the data stays in the
        page cache). Keeps the RSS of a pass over a large store flat. No-op for copies."""
        if self.txn is None or value is None:
            return
        _madvise_dontneed(value)

    def __exit__(self, *exc):
        if self.txn is not None:
            self.cursor = None
            self.txn.abort()
            self.txn = None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_libc = None


def _madvise_dontneed(value) -> None:
    global _libc
    try:
        if _libc is None:
            import ctypes  # once, on the first release of a zero-copy value

            _libc = ctypes.CDLL("libc.so.6", use_errno=True)
            _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        a = np.frombuffer(value, np.uint8)
        lo = -(-a.ctypes.data // _PAGE) * _PAGE
        hi = (a.ctypes.data + len(a)) // _PAGE * _PAGE
        if hi - lo >= _PAGE:
            _libc.madvise(lo, hi - lo, 4)  # MADV_DONTNEED
    except (OSError, AttributeError, ValueError, TypeError):
        _libc = False if _libc is None else _libc


def read_batch(rd: ValueReader, store: StoreSpec, b: BatchEntry):
    """The value of batch ``b`` (through ``rd``, a reader of its shard's ``batches``),
    checked against its size and xxh3 (a changed batch must not be rebuilt into arrays or
    merged batches with a new checksum)."""
    v = rd.get(batch_key(b.seq))
    if v is None:
        raise CorruptBatchError(batch_message(store.uri, b, "missing from the store"))
    check_value(store.uri, b, v)
    return v
