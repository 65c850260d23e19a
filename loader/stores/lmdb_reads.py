"""The read side of an LMDB shard (mixed into LmdbStore), and zero-copy views.

- `get`, `seek` and `range` copy values out; `range` copies slice by slice (up to 64 MiB
  or 4096 items), each slice under its own short read transaction, so a long iteration
  spans several committed states if a writer commits meanwhile (never a torn item) and
  never pins old pages or a stale map.
- `value_view` is the zero-copy path (values.ValueReader): one read transaction, values
  are buffers into the map, valid until the view is closed. Its ``get(key, touch=False)``
  hands out a value found from its leaf node alone, none of its pages read: a reader of a
  few records of a big value reads only their pages (`read_spans` preads them, one request a span,
  the GIL released while the disk works).
- Every value's leaf node is checked (lmdb_files.Pages) before py-lmdb touches the
  value's pages: a damaged node would point past the end of the file (a SIGBUS); it is a
  CorruptStoreError naming the shard instead, as are LMDB's own read errors.
- A table dropped by a writer after this process opened its handle (MDB_BAD_DBI) reads
  as absent, like a table that never existed.
- With readahead off (random reads), `get`, `seek` and a value view's `get` advise the
  kernel of a big value's overflow pages up front, found from the leaf node that is
  checked anyway (nothing for a value the page cache holds), in pieces a disk request can
  hold (else every page of it would be one disk read: MADV_RANDOM turns the kernel's
  read-around off; and one WILLNEED reads no more than the device's largest request).

Reads only: nothing here writes, and a crash leaves nothing behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import lmdb

from ..infra.pagecache import page_cached
from ..infra.regular import open_regular
from ._lmdbnode import buffer_offset, value_span
from ._preads import read_spans
from .base import corrupt_store
from .lmdb_env import EnvEntry, damaged, mapped_pages, reading
from .lmdb_files import OVERFLOW_HEAD, Pages, release_pages, table_tree
from .options import LmdbOptions

# range() copies items out in slices of this many bytes (or items), each slice under its
# own short read transaction: no long-lived reader pins old pages or a stale map.
RANGE_SLICE_BYTES = 64 << 20
RANGE_SLICE_ITEMS = 4096
#: readahead advice is given in pieces of this many bytes (see LmdbReads._advise)
ADVICE_BYTES = 512 << 10


class LmdbReads:
    """The reading methods of LmdbStore, which provides the attributes declared here and
    ``_db(table, create=)`` (a table's handle or None), ``_dropped(table)`` (forget a
    dropped table's handle) and ``_begin_read(buffers=)`` (a read transaction that adopts
    a map grown by the writer)."""

    path: str
    _entry: EnvEntry
    _opts: LmdbOptions
    _data_fd: int | None

    def has_table(self, table: str) -> bool:
        return self._db(table, create=False) is not None

    def get(self, key: bytes, table: str = "batches") -> bytes | None:
        return self._lookup(key, table, True)

    def seek(self, key: bytes, table: str = "batches") -> tuple[bytes, bytes] | None:
        return self._lookup(bytes(key), table, False)

    def _lookup(self, key: bytes, table: str, exact: bool):
        """The value of ``key`` (exact) or the first item at or after it, copied out, in a
        short read transaction; None when there is none or the table is absent (or was
        dropped by another process). Every document get is one: a value in its leaf page
        is copied straight from the span its node check found (the check's C call without
        `Pages.value_span`'s Python frame; each call saved is ~0.05-0.1 us of a ~3 us get)."""
        entry = self._entry
        db = entry.dbs.get(table)
        if db is None:
            db = self._db(table, create=False)
            if db is None:
                return None
        txn = self._begin_read(buffers=True)
        try:
            cur = txn.cursor(db)
            if not (cur.set_key(key) if exact else cur.set_range(key)):
                return None
            pages = entry.pages
            value = None
            if pages is not None:
                span = value_span(cur.key(), pages.base, pages.in_use, pages.psize)
                if type(span) is tuple and not span[2]:  # in its leaf page: nothing to advise
                    start = span[0]
                    value = pages.view[start : start + span[1]].tobytes()
            if value is None:  # the rest, and the errors
                value = bytes(self._value(cur, pages if pages is not None else self._pages()))
            return value if exact else (bytes(cur.key()), value)
        except lmdb.BadDbiError:
            self._dropped(table)
            return None
        except lmdb.Error as e:
            damaged(self.path, e)
            raise
        finally:
            txn.abort()

    def value_view(self, table: str) -> LmdbValueView | None:
        """A zero-copy view of ``table`` under one read transaction (values valid until it
        is closed), or None when the table does not exist."""
        db = self._db(table, create=False)
        if db is None:
            return None
        txn = self._begin_read(buffers=True)
        try:
            cursor = txn.cursor(db)
        except lmdb.BadDbiError:  # another process dropped the table: it reads as absent
            self._dropped(table)
            txn.abort()
            return None
        return LmdbValueView(self, txn, cursor, self._pages(), table)

    def _pages(self, refresh: bool = False) -> Pages | None:
        """The pages in use of data.mdb as mapped in this process (for `_value`), or None:
        nothing is checked then."""
        pages = self._entry.pages
        if pages is not None and not refresh:
            return pages
        return mapped_pages(self._entry, self.path, refresh)

    def _value(self, cur, pages: Pages | None, touch: bool = True):
        """The cursor's value (zero-copy), once its leaf node says it lies inside the pages
        in use: py-lmdb touches every page of a value as it hands it out, and a damaged
        node (a flipped size or overflow page number) would point it past the end of the
        file - a SIGBUS. About 0.5 us per value. ``touch=False``: the value as a slice of
        the map found from its node, none of its pages read yet (py-lmdb's value when the
        map cannot be located: then every page is). With readahead off, a value in overflow
        pages is asked of the kernel in one request first (`_advise`) - or, found in the
        page cache, handed out untouched: py-lmdb's walk over its pages would be waste
        (~14 us for a 9.6 MB chunk piece, paid by every warm box query)."""
        if pages is not None:
            span = pages.value_span(cur.key())
            if isinstance(span, str):  # the file may have grown, or the map moved, since: look again
                pages = self._pages(refresh=True)
                span = pages.value_span(cur.key()) if pages is not None else None
                if isinstance(span, str):
                    raise corrupt_store(self.path, span)
            if span is not None:
                start, size, big = span
                if touch and big and not self._opts.readahead:
                    touch = self._advise(start - OVERFLOW_HEAD, size + OVERFLOW_HEAD) != 0
                if not touch:
                    return pages.view[start : start + size]
        return cur.value()

    def _advise(self, offset: int, length: int) -> int | None:
        """With readahead off, have the kernel start reading bytes [offset, offset +
        length) of data.mdb (no wait); the number of pieces asked for (None: readahead
        is on, or the advice failed). One WILLNEED reads at most
        the device's largest request (``max_sectors_kb``, often 512 KiB - 4 MiB) and drops
        the rest, which the map would then fault in page by page: a big value (a chunk
        piece of several MiB) is asked for in ADVICE_BYTES pieces, all in flight at once.
        Nothing is asked for a value whose first and last bytes are in the page cache, nor
        for a piece whose are: the advice walks every page of its range, ~0.13 ms of a
        warm 9.6 MB chunk piece (a warm box query took 0.31 ms with it, 0.18 without); a
        check reads nothing (`page_cached`: a one-byte RWF_NOWAIT read starts reading a
        page it misses, and on a fast disk can finish in time to pass a cold page for
        cached)."""
        if self._opts.readahead:
            return None
        fd = self._data_file()
        pages = self._pages()  # the map: where the kernel lacks cachestat, mincore asks it

        def cached(at: int) -> bool:
            return page_cached(fd, at, None if pages is None else pages.base + at)

        if cached(offset) and cached(offset + length - 1):
            return 0  # warm (a value whose ends are cached; its middle, if not, faults page by page)
        asked = 0
        try:
            for at in range(offset, offset + length, ADVICE_BYTES):
                n = min(ADVICE_BYTES, offset + length - at)
                if not (cached(at) and cached(at + n - 1)):
                    os.posix_fadvise(fd, at, n, os.POSIX_FADV_WILLNEED)
                    asked += 1
        except OSError:
            return None
        return asked

    def _data_file(self) -> int:
        """This store's own descriptor of data.mdb (advice and `pread`s; with readahead
        off it reads only the pages asked for: POSIX_FADV_RANDOM)."""
        if self._data_fd is None:
            fd = open_regular(os.path.join(self.path, "data.mdb"))
            if not self._opts.readahead:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            if self._data_fd is None:  # another thread may have opened it meanwhile
                self._data_fd = fd
            else:
                os.close(fd)
        return self._data_fd

    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, table: str = "batches"
    ) -> Iterator[tuple[bytes, bytes]]:
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

    def _slice(
        self, txn, db, lo: bytes | None, hi_b: bytes | None, after: bytes | None, pages
    ) -> tuple[list[tuple[bytes, bytes]], bool]:
        """(items copied out, whether the range ended) of one range() slice."""
        out: list[tuple[bytes, bytes]] = []
        nbytes = 0
        with reading(self.path):
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

    def tables(self) -> list[str]:
        txn = self._begin_read()
        try:
            with reading(self.path):
                names = [bytes(k).decode(errors="replace") for k in txn.cursor().iternext(values=False)]
        finally:
            txn.abort()
        return sorted(names)


class LmdbValueView:
    """Zero-copy reads of one table under one read transaction (see values.ValueReader):
    a value stays valid until `close`; each one's leaf node is checked first."""

    __slots__ = ("cursor", "pages", "store", "table", "tree", "txn")

    def __init__(self, store: LmdbReads, txn: lmdb.Transaction, cursor: lmdb.Cursor, pages: Pages | None, table: str):
        self.store, self.txn, self.cursor, self.pages, self.table = store, txn, cursor, pages, table
        self.tree = False  # the table's (root page, depth) in this transaction: looked up at the first untouched get

    def get(self, key: bytes, touch: bool = True):
        """The value of ``key`` (a buffer into the map) or None. ``touch=False``: none of
        its pages is read until the caller reads its bytes (and only the pages it reads:
        `read_spans`); its node is found by walking the table's pages (`Pages.find`),
        because LMDB's lookup reads the first page of the value - with the page cache
        cold, a disk read the caller would wait for before it could ask for the pages it
        needs. Anything the walk does not expect is asked of LMDB, which names damage."""
        if not touch:
            found = self.find(key)
            if found is not None:
                start, size, _ = found
                return self.pages.view[start : start + size]
        try:
            with reading(self.store.path):  # a damaged store: one error naming the shard
                if not self.cursor.set_key(key):
                    return None
                return self.store._value(self.cursor, self.pages, touch)
        except lmdb.BadDbiError:  # the table was dropped after this process opened it
            return None

    def find(self, key: bytes) -> tuple[int, int, bool] | None:
        """(offset in data.mdb, size, whether in overflow pages) of the value of ``key``,
        found by walking this table's pages in this transaction (`Pages.find`), or None:
        not found, or the walk met something it does not expect."""
        if self.pages is None:
            return None
        if self.tree is False:
            with reading(self.store.path):
                self.tree = table_tree(self.txn.get(self.table.encode()))
        return None if self.tree is None else self.pages.find(key, self.tree)

    def read_spans(self, value, spans: list[tuple[int, int]], into: memoryview) -> bool:
        """Bytes [offset, offset + length) of ``value`` for each span (inside it), one after
        another into ``into`` (as many bytes as the spans hold), read from data.mdb - only
        their pages, several spans asked of the disk together - with the GIL released once
        while the disk works (_preads.c; a page fault through the map would hold it).
        False: ``value`` is not in the map (a copy), nothing was read; copy its bytes
        (values.ValueReader.read_spans does)."""
        at0 = self._file_offset(value, 0, len(value))
        if at0 is None:
            return False
        fd = self.store._data_file()
        if read_spans(fd, at0, len(value), spans, into, len(spans) > 1) != sum(n for _, n in spans):
            # the file is shorter than its pages in use (damaged meanwhile)
            raise corrupt_store(
                self.store.path,
                f"data.mdb ended at byte {os.fstat(fd).st_size} inside a value (bytes {at0}..{at0 + len(value)})",
            )
        return True

    def prefetch(self, value, spans: list[tuple[int, int]]) -> None:
        """Have the kernel start reading bytes [offset, offset + length) of ``value`` from
        data.mdb for each span (posix_fadvise WILLNEED, no wait), so that the `read_spans`
        of several parts asked for first reach the disk together; advice that fails is only
        advice."""
        at0 = self._file_offset(value, 0, len(value))
        if at0 is None:
            return
        fd = self.store._data_file()
        try:
            for offset, length in spans:
                os.posix_fadvise(fd, at0 + offset, length, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass

    def _file_offset(self, value, offset: int, length: int) -> int | None:
        """Where bytes [offset, offset + length) of a value in the map lie in data.mdb, or
        None when the value is not in the map as `pages` know it (a copy)."""
        if self.pages is None or length <= 0 or offset < 0 or offset + length > len(value):
            return None
        at = buffer_offset(value, self.pages.base)
        return at + offset if at >= 0 and at + len(value) <= self.pages.in_use else None

    def release(self, value) -> None:
        """Done with a value: drop its pages from this process's resident set."""
        if value is not None:
            release_pages(value)

    def close(self) -> None:
        self.cursor = None
        self.txn.abort()
