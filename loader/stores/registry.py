"""Which backend serves which URI scheme, and opening a shard's one writer.

``lmdb`` and ``mem`` are `LmdbStore` (mem:// is LMDB on /dev/shm), ``rocksdb`` is
`RocksdbStore`. A backend module is imported only when a store of its scheme is opened:
an lmdb-only command never loads rocksdict (and a URI is checked with the backend's
declared options, options.py, without loading it either).

`open_writer` is how every job opens a shard for writing: a shard still held by a job
that was just stopped is waited for a moment (its workers notice and exit), then it is
DatasetBusyError. Nothing here writes by itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import DatasetBusyError, MissingPathError, UnknownSchemeError
from .base import ShardStore
from .options import LmdbOptions, RocksdbOptions

if TYPE_CHECKING:
    from .spec import StoreSpec

SCHEMES = ("lmdb", "rocksdb", "mem")
#: scheme -> the options its backend takes (read without importing the backend)
OPTIONS = {"lmdb": LmdbOptions, "mem": LmdbOptions, "rocksdb": RocksdbOptions}
#: seconds a writer waits for a shard that a stopped job's workers still hold
WRITER_WAIT = 10.0


def backend_for(scheme: str) -> type[ShardStore]:
    """The store class of ``scheme`` (its module imported on first use)."""
    if scheme in ("lmdb", "mem"):
        from .lmdb_store import LmdbStore  # lazy: only commands that open LMDB shards load lmdb

        return LmdbStore
    if scheme == "rocksdb":
        from .rocksdb_store import RocksdbStore  # lazy: rocksdict is heavy, lmdb-only commands skip it

        return RocksdbStore
    raise UnknownSchemeError(f"unknown store scheme {scheme!r}")


def open_in_this_process(spec: StoreSpec) -> bool:
    """Whether this process holds a shard of ``spec`` open: an LMDB shard has one
    environment per process (lmdb_env.py), so a writer opened here next to a reader fails."""
    if spec.scheme not in ("lmdb", "mem"):
        return False
    from .lmdb_env import open_under  # lazy: as backend_for

    return open_under(spec.root)


def options_for(scheme: str) -> type[LmdbOptions] | type[RocksdbOptions]:
    """The options class (``DECLARED`` names, ``parse``) of ``scheme``'s backend."""
    try:
        return OPTIONS[scheme]
    except KeyError:
        raise UnknownSchemeError(f"unknown store scheme {scheme!r}") from None


def open_writer(spec: StoreSpec, shard: int, options: Mapping[str, object], wait: float = WRITER_WAIT) -> ShardStore:
    """Open shard ``shard`` of ``spec`` for writing with ``options``. Workers of a job that
    was just killed may hold it for a moment while they notice and exit; give them
    ``wait`` seconds before raising DatasetBusyError."""
    if not os.path.isdir(spec.root):  # never re-create, empty, a dataset moved away while its job runs
        raise MissingPathError(
            f"cannot open shard {shard} of {spec.uri}: the dataset directory {spec.root} does "
            "not exist (was it moved or removed?); check the dataset path"
        )
    deadline = time.monotonic() + wait
    while True:
        try:
            return spec.backend.open(spec.shard_path(shard), write=True, options=options)
        except DatasetBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
