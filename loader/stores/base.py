"""The one store interface, the dataset URI parser and the backend registry.

A dataset lives in one directory (``lmdb://PATH``, ``rocksdb://PATH``; ``mem://NAME`` is
``/dev/shm/bulkload/NAME``) that holds ``manifest.json`` and K shard stores
``shard-000`` .. ``shard-{K-1}``. A shard is one LMDB environment or one RocksDB database,
with exactly one writer at a time. Inside a shard, named *tables* (LMDB named databases,
RocksDB column families) keep separate key spaces: ``batches`` for flat record batches,
and one table per 2-D array for its chunks.

Only a `StoreSpec` (a small frozen, picklable description) ever crosses a process
boundary; each process opens its own handles from it.

URIs are strict: each backend declares the options it takes (`ShardStore.OPTIONS`, values
checked by `check_options`); an unknown or repeated option is a UsageError listing the
known ones, and a mem:// NAME is one plain path component (`MEM_NAME`).
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator
from urllib.parse import parse_qsl

from ..errors import KeyOrderError, NotWritableError, UnknownSchemeError, UsageError
from ..model.options import MAX_SHARDS

MEM_ROOT = "/dev/shm/bulkload"


class ShardStore(ABC):
    """One shard: an ordered key-value store with named tables.

    Keys are bytes compared bytewise (bulkload keys are big-endian integers, so byte
    order is numeric order). Values are bytes-like.
    """

    #: "lmdb" | "rocksdb" | "mem"
    scheme: str
    #: the options a dataset URI may give this backend (name -> what it takes); others are refused
    OPTIONS: dict[str, str] = {}

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise UsageError for an option value this backend cannot use (names are checked
        by parse_dataset_uri against OPTIONS)."""

    @classmethod
    @abstractmethod
    def open(cls, path: str, *, write: bool, options: dict | None = None) -> "ShardStore":
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

    @abstractmethod
    def put_sorted(self, items: Iterable[tuple[bytes, bytes]], table: str = "batches") -> int:
        """Write items (keys strictly ascending) atomically: all of them or none.

        Keys above every key already in the table take the fast in-order path (LMDB
        append, RocksDB SST ingestion); others overwrite. Returns the count written.
        """

    @abstractmethod
    def get(self, key: bytes, table: str = "batches") -> bytes | None:
        """The value (bytes or a buffer valid until the next call) or None."""

    @abstractmethod
    def range(self, lo: bytes | None = None, hi: bytes | None = None,
              table: str = "batches") -> Iterator[tuple[bytes, bytes]]:
        """Items with lo <= key < hi in key order (None = unbounded)."""

    @abstractmethod
    def seek(self, key: bytes, table: str = "batches") -> tuple[bytes, bytes] | None:
        """The first item whose key is >= key (copied out), or None."""

    @abstractmethod
    def delete_range(self, lo: bytes | None = None, hi: bytes | None = None,
                     table: str = "batches") -> int:
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclass(frozen=True)
class StoreSpec:
    """Picklable description of a dataset's storage: what workers receive."""

    scheme: str
    root: str
    shards: int | None = None  # None: not given in the URI
    options: tuple[tuple[str, str], ...] = field(default=())

    @property
    def uri(self) -> str:
        if self.scheme == "mem":
            return f"mem://{Path(self.root).name}"
        return f"{self.scheme}://{self.root}"

    def shard_path(self, i: int) -> str:
        return os.path.join(self.root, f"shard-{i:03d}")

    def with_shards(self, k: int) -> "StoreSpec":
        return StoreSpec(self.scheme, self.root, k, self.options)

    @property
    def backend(self) -> type[ShardStore]:
        return backend_for(self.scheme)

    def open_shard(self, i: int, *, write: bool) -> ShardStore:
        return self.backend.open(self.shard_path(i), write=write, options=dict(self.options))


def shard_label(path: str) -> str:
    """``shard 3 (/data/x/shard-003)`` for a shard directory, else the path."""
    name = os.path.basename(os.path.normpath(path))
    if name.startswith("shard-") and name[6:].isdigit():
        return f"shard {int(name[6:])} ({path})"
    return f"shard {path}"


def corrupt_store(path: str, what: str):
    """The CorruptStoreError of a damaged shard: which, what is wrong, what to do."""
    from ..errors import CorruptStoreError

    return CorruptStoreError(f"{shard_label(path)} is damaged: {what}; its data cannot be trusted - restore "
                             "the dataset from a backup, or rebuild it with `bulkload load SOURCE DATASET "
                             "--replace`")


def ascending(pairs, path: str, table: str, prev: bytes | None = None):
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
            f"cannot create shard directory {path}: a file is in the way; "
            f"remove it or choose another dataset path"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise NotWritableError(
            f"shard directory {path} is not writable; fix its permissions or "
            f"choose another dataset path"
        )


SCHEMES = ("lmdb", "rocksdb", "mem")
#: a mem:// name: one plain path component under MEM_ROOT (a leading dot is refused: it
#: would hide the dataset and could collide with a --replace build, ``.NAME.replacing``)
MEM_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def parse_dataset_uri(uri: str) -> StoreSpec:
    """``lmdb://PATH``, ``rocksdb://PATH`` or ``mem://NAME``, each with ``?shards=K&opt=v``.

    Relative paths are relative to the working directory. An option the backend does not
    take (`ShardStore.OPTIONS`), an option given twice, or a value it cannot use is a
    UsageError, as is a mem:// NAME that is not one plain name (`MEM_NAME`).
    """
    if "://" not in uri:
        raise UnknownSchemeError(
            f"dataset {uri!r} has no scheme; use lmdb://PATH, rocksdb://PATH or mem://NAME"
        )
    scheme, rest = uri.split("://", 1)
    if scheme not in SCHEMES:
        raise UnknownSchemeError(
            f"unknown dataset scheme {scheme!r} in {uri!r}; use lmdb://, rocksdb:// or mem://"
        )
    path, _, query = rest.partition("?")
    if not path:
        raise UsageError(f"dataset {uri!r} has no path after {scheme}://")
    if "\0" in path or not path.isprintable() or not _utf8(path):
        raise UsageError(f"dataset {uri!r}: the path must be printable UTF-8 (the stores take UTF-8 paths)")
    opts = query_options(query, f"dataset {uri!r}")
    backend = backend_for(scheme)
    unknown = sorted(set(opts) - {"shards"} - set(backend.OPTIONS))
    if unknown:
        known = "; ".join(f"{k} ({v})" for k, v in {"shards": f"1..{MAX_SHARDS}", **backend.OPTIONS}.items())
        raise UsageError(f"dataset {uri!r}: unknown option(s) {', '.join(unknown)}; {scheme}:// takes {known}")
    shards = None
    if "shards" in opts:
        try:
            shards = int(opts.pop("shards"))
        except ValueError:
            raise UsageError(f"dataset {uri!r}: shards must be an integer") from None
        if not 1 <= shards <= MAX_SHARDS:
            raise UsageError(f"dataset {uri!r}: shards must be between 1 and {MAX_SHARDS}")
    try:
        backend.check_options(opts)
    except UsageError as e:
        raise UsageError(f"dataset {uri!r}: {e}") from None
    if scheme == "mem":
        if not MEM_NAME.fullmatch(path):
            raise UsageError(
                f"dataset {uri!r}: mem://NAME takes one plain name of 1 to 128 letters, digits, '.', '_' "
                f"or '-', not starting with '.' (it becomes {MEM_ROOT}/NAME), e.g. mem://scratch-1")
        root = os.path.join(MEM_ROOT, path)
    else:
        root = os.path.abspath(os.path.expanduser(path))
    return StoreSpec(scheme, root, shards, tuple(sorted(opts.items())))


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # surrogate-escaped bytes of a non-UTF-8 argument
        return False
    return True


def query_options(query: str, what: str, noun: str = "option") -> dict[str, str]:
    """The ``k=v&...`` of a URI as a dict; a key given twice is a UsageError."""
    pairs = parse_qsl(query, keep_blank_values=True)
    seen: set[str] = set()
    for k, _ in pairs:
        if k in seen:
            raise UsageError(f"{what}: {noun} {k} is given more than once; give each {noun} once")
        seen.add(k)
    return dict(pairs)


def backend_for(scheme: str) -> type[ShardStore]:
    if scheme in ("lmdb", "mem"):
        from .lmdb_store import LmdbStore

        return LmdbStore
    if scheme == "rocksdb":
        from .rocksdb_store import RocksdbStore

        return RocksdbStore
    raise UnknownSchemeError(f"unknown store scheme {scheme!r}")
