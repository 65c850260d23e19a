"""Reading many values of one table of one shard, zero-copy where the backend can.

``with ValueReader(store, table) as rd: v = rd.get(key)``: under LMDB (and mem://) ``v``
is a buffer into the shard's map, valid until the block ends (one read transaction,
``buffers=True``; the store's `value_view`); other backends copy (`ShardStore.get`). A
missing table reads as absent (None), as does one another process drops meanwhile.
``rd.release(v)`` says a zero-copy value is done with: its pages leave this process's
resident set (the data stays in the page cache), so a pass over a store larger than RAM
stays flat in RSS; for copies it does nothing. ``rd.get(key, touch=False)`` (LMDB) reads
none of the value's pages until its bytes are read: a reader of a small part of a big value
reads only that part's pages from the disk (``rd.read`` copies them out). `read_batch` reads a flat batch and checks
it against its manifest row.

Every value read is checked as the store's own reads are (a damaged shard is one
CorruptStoreError naming it). Reads only; the transaction ends with the block (or
`__exit__`), whatever happens in it.
"""

from __future__ import annotations

from ..errors import CorruptBatchError
from ..model.placement import batch_key
from .base import ShardStore, Value, ValueView
from .health import BatchRow, batch_message, check_value
from .spec import StoreSpec


class ValueReader:
    """Values of ``table`` in ``store``, zero-copy while the block is open (see module)."""

    __slots__ = ("store", "table", "view")

    def __init__(self, store: ShardStore, table: str) -> None:
        self.store = store
        self.table = table
        self.view: ValueView | None = None  # the backend's zero-copy view while open, or None: values are copied

    def __enter__(self) -> ValueReader:
        self.view = self.store.value_view(self.table)
        return self

    def get(self, key: bytes, touch: bool = True) -> Value | None:
        """The value of ``key`` (zero-copy under LMDB) or None. ``touch=False`` (LMDB): none
        of its pages is read from the disk until its bytes are, and then only those pages."""
        if self.view is not None:
            return self.view.get(key, touch)
        return self.store.get(key, table=self.table)

    def read_parts(self, value: Value, spans: list[tuple[int, int]]) -> list[memoryview]:
        """A copy of each (offset, length) span of ``value``. Of an untouched LMDB value
        only their pages are read, all of them asked of the disk before the first is waited
        for (`read_spans`): a record's read and its value's header reach the disk together."""
        buf = memoryview(bytearray(sum(n for _, n in spans)))
        self.read_spans(value, spans, buf)
        parts: list[memoryview] = []
        pos = 0
        for _, n in spans:
            parts.append(buf[pos : pos + n])
            pos += n
        return parts

    def read_spans(self, value: Value, spans: list[tuple[int, int]], into: memoryview) -> None:
        """The bytes of each (offset, length) span of ``value``, one after another into
        ``into`` (of an untouched LMDB value: only their pages are read from the disk)."""
        if self.view is not None and self.view.read_spans(value, spans, into):
            return
        # a copied value (or one outside the map): every span checked before any is copied,
        # as _preads.c does
        for offset, length in spans:
            if offset < 0 or length < 0 or offset + length > len(value):
                raise ValueError(f"bytes {offset}..{offset + length} are outside a value of {len(value)}")
        pos = 0
        for offset, length in spans:
            into[pos : pos + length] = memoryview(value)[offset : offset + length]
            pos += length

    def prefetch(self, value: Value, spans: list[tuple[int, int]]) -> None:
        """Have the disk start reading each (offset, length) span of an untouched LMDB
        value, without waiting: the `read_spans` of parts asked for first are served
        together instead of one after another (nothing for copied values)."""
        if self.view is not None:
            self.view.prefetch(value, spans)

    def release(self, value: Value | None) -> None:
        """Done with a zero-copy value: drop its pages from this process's resident set."""
        if self.view is not None:
            self.view.release(value)

    def __exit__(self, *exc: object) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None


def read_batch(rd: ValueReader, store: StoreSpec, b: BatchRow) -> Value:
    """The value of flat batch ``b`` (a `BatchEntry`; through ``rd``, a reader of its
    shard's ``batches``), checked against its size and xxh3: a changed batch must not be
    rebuilt into arrays or merged batches with a new checksum (CorruptBatchError)."""
    v = rd.get(batch_key(b.seq))
    if v is None:
        raise CorruptBatchError(batch_message(store.uri, b, "missing from the store"))
    check_value(store.uri, b, v)
    return v
