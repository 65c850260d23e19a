"""The one store interface every backend implements, and the helpers they share.

A dataset lives in one directory that holds ``manifest.json`` and K shard stores
``shard-000`` .. ``shard-{K-1}`` (see spec.py for the URIs that name it). A shard is one
LMDB environment or one RocksDB database, with exactly one writer at a time. Inside a
shard, named *tables* (LMDB named databases, RocksDB column families) keep separate key
spaces: ``batches`` for flat record batches, and one table per 2-D array for its chunks.

Invariants every backend keeps (tests/stores/test_conformance.py runs them all):
``put_sorted`` is atomic per call and refuses keys that do not strictly ascend
(`ascending`) with nothing written; a second writer on a shard is DatasetBusyError, never
a wait; readers never block and see the last committed state; damage read from a shard
is one CorruptStoreError naming the shard (`corrupt_store`), never a signal or a raw
library error. Nothing here writes except `make_shard_dir`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol, Self, TypeVar

from ..errors import CorruptStoreError, KeyOrderError, NotReadableError, NotWritableError, UsageError

if TYPE_CHECKING:
    from ..infra.bytes_like import BytesLike

#: a value handed to `ShardStore.put_sorted` (any bytes-like object, kept as it is)
V = TypeVar("V")
#: a value read: bytes (copied out) or a buffer into the store (zero-copy)
Value = bytes | memoryview


class ValueView(Protocol):
    """A backend's zero-copy view of one table (`ShardStore.value_view`; values.py reads
    through it): values are buffers into the store, valid until `close`."""

    def get(self, key: bytes, touch: bool = True) -> memoryview | None:
        """The value of ``key`` or None; ``touch=False``: none of its pages read yet."""
        ...

    def read_spans(self, value: Value, spans: list[tuple[int, int]], into: memoryview) -> bool:
        """Copy each (offset, length) span of ``value`` into ``into``; False: ``value``
        is not this view's (a copy), nothing was read."""
        ...

    def prefetch(self, value: Value, spans: list[tuple[int, int]]) -> None:
        """Have the disk start reading each span of ``value`` (advice, no wait)."""
        ...

    def release(self, value: Value | None) -> None:
        """Done with ``value``: drop its pages from this process's resident set."""
        ...

    def close(self) -> None:
        """End the view: its values are no longer valid."""
        ...


class ShardStore(ABC):
    """One shard: an ordered key-value store with named tables.

    Keys are bytes compared bytewise (bulkload keys are big-endian integers, so byte
    order is numeric order). Values are bytes-like.
    """

    #: "lmdb" | "rocksdb" | "mem"
    scheme: str
    #: files in the shard directory that even a reader writes (`require_access`)
    READER_WRITES: tuple[str, ...] = ()
    #: the shard directory (absolute)
    path: str
    #: opened for writing (the one writer) or read-only
    _write: bool

    @classmethod
    @abstractmethod
    def open(cls, path: str, *, write: bool, options: Mapping[str, object] | None = None) -> ShardStore:
        """Open (creating it when ``write``) the shard at ``path``.

        A second writer on the same shard raises DatasetBusyError. Readers never
        block and see the last committed state.
        """

    @classmethod
    @abstractmethod
    def check(cls, path: str) -> str | None:
        """Why ``path`` is not a usable shard of this backend ("missing", "no data.mdb",
        "data.mdb is truncated ...") or None; cheap (a stat and a few small reads), run
        before a shard the manifest relies on is opened or written."""

    @classmethod
    def interrupted_compaction(cls, path: str) -> bool:
        """Whether a compaction of the shard at ``path`` was cut short and left files that
        the next open for writing finishes or removes (a compaction that has nothing else to
        do opens such a shard all the same). None by default: compaction in place."""
        return False

    @abstractmethod
    def put_sorted(self, items: Iterable[tuple[BytesLike, BytesLike]], table: str = "batches") -> int:
        """Write items (keys strictly ascending) atomically: all of them or none.

        Keys above every key already in the table take the fast in-order path (LMDB
        append, RocksDB SST ingestion); others overwrite. Returns the count written.
        """

    @abstractmethod
    def get(self, key: bytes, table: str = "batches") -> bytes | None:
        """The value (bytes or a buffer valid until the next call) or None."""

    @abstractmethod
    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, table: str = "batches"
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items with lo <= key < hi in key order (None = unbounded)."""

    @abstractmethod
    def seek(self, key: bytes, table: str = "batches") -> tuple[bytes, bytes] | None:
        """The first item whose key is >= key (copied out), or None."""

    @abstractmethod
    def delete_range(self, lo: bytes | None = None, hi: bytes | None = None, table: str = "batches") -> int:
        """Delete lo <= key < hi atomically; returns the count deleted."""

    @abstractmethod
    def drop_table(self, table: str) -> None:
        """Delete a whole table (no error if it does not exist)."""

    @abstractmethod
    def tables(self) -> list[str]:
        """Names of the tables in this shard."""

    def has_table(self, table: str) -> bool:
        """Whether ``table`` exists in this shard (as this handle sees it)."""
        return table in self.tables()

    def value_view(self, table: str) -> ValueView | None:
        """A zero-copy view of ``table`` (``get(key)``, ``release(value)``, ``close()``)
        whose values stay valid until it is closed, or None when this backend copies
        values out (then `get` is the way to read); see values.py."""
        return None

    @abstractmethod
    def sync(self) -> None:
        """Make everything written so far durable (fsync)."""

    @abstractmethod
    def compact(self) -> tuple[int, int]:
        """Compact in place (or rewrite and swap); returns (bytes before, bytes after)."""

    @abstractmethod
    def nbytes(self) -> int:
        """Bytes the shard occupies on disk (or in RAM for mem://)."""

    @abstractmethod
    def close(self) -> None:
        """Release handles; the object is unusable afterwards."""

    def _require_write(self, what: str) -> None:
        if not self._write:
            raise UsageError(f"{what} on shard {self.path}: it was opened read-only")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def shard_label(path: str) -> str:
    """``shard 3 (/data/x/shard-003)`` for a shard directory, else the path."""
    name = os.path.basename(os.path.normpath(path))
    if name.startswith("shard-") and name[6:].isdigit():
        return f"shard {int(name[6:])} ({path})"
    return f"shard {path}"


def corrupt_store(path: str, what: str) -> CorruptStoreError:
    """The CorruptStoreError of a damaged shard: which, what is wrong, what to do."""
    return CorruptStoreError(
        f"{shard_label(path)} is damaged: {what}; its data cannot be trusted - restore "
        "the dataset from a backup, or rebuild it with `bulkload load SOURCE DATASET "
        "--replace`"
    )


def ascending(
    pairs: Iterable[tuple[BytesLike, V]], path: str, table: str, prev: bytes | None = None
) -> Iterator[tuple[bytes, V]]:
    """Yield (bytes key, value) pairs, raising KeyOrderError unless keys strictly ascend."""
    for k, v in pairs:
        if type(k) is not bytes:
            k = bytes(k)
        if prev is not None and k <= prev:
            raise KeyOrderError(
                f"put_sorted on {path} table {table!r}: key {k.hex()} is not above the "
                f"previous key {prev.hex()}; keys must be strictly ascending - nothing from "
                f"this call was written"
            )
        prev = k
        yield k, v


def make_shard_dir(path: str) -> None:
    """Create a shard directory (and parents) or say clearly why it cannot be."""
    try:
        os.makedirs(path, exist_ok=True)
    except PermissionError:
        parent = os.path.dirname(path)
        while parent and not os.path.exists(parent):
            parent = os.path.dirname(parent)
        raise NotWritableError(
            f"cannot create shard directory {path}: {parent or '/'} is not writable; "
            f"choose a writable location or fix its permissions"
        ) from None
    except (FileExistsError, NotADirectoryError):
        raise NotWritableError(
            f"cannot create shard directory {path}: a file is in the way; remove it or choose another dataset path"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise NotWritableError(
            f"shard directory {path} is not writable; fix its permissions or choose another dataset path"
        )


def require_access(path: str, write: bool = False, lock_files: tuple[str, ...] = ()) -> None:
    """Raise NotReadableError / NotWritableError (exit 2: a permission problem, never
    called damage) when this user may not read - or, with ``write``, write - the shard
    directory ``path`` or a file in it (``lock_files``: those even a reader writes, as
    LMDB's lock.mdb). Nothing at ``path`` is not this function's concern."""
    if not os.path.isdir(path):
        return
    need = os.R_OK | os.X_OK | (os.W_OK if write else 0)
    if not os.access(path, need):
        _denied(path, path, write)
    for name in os.listdir(path):
        f = os.path.join(path, name)
        want = os.R_OK | (os.W_OK if write or name in lock_files else 0)
        # (a file the store replaced meanwhile - RocksDB rotates its OPTIONS-N files as
        # another process opens the shard - fails os.access too: gone, it is no denial)
        if os.path.isfile(f) and not os.access(f, want) and os.path.exists(f):
            _denied(path, f, write or name in lock_files)


def _denied(shard: str, path: str, write: bool) -> None:
    what = "read and write" if write else "read"
    cls = NotWritableError if write else NotReadableError
    where = shard_label(shard) if path == shard else f"{path}, in {shard_label(shard)}"
    raise cls(
        f"permission denied: this user (uid {os.geteuid()}) may not {what} {where}; "
        "that is not damage - fix its permissions (chmod/chown) or run as the dataset's owner"
    )
