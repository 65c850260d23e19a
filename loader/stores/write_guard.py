"""One shard write whose OS-level failure is a one-line StoreError: `guard_write`.

A store write that fails for a reason of the machine - disk full (LMDB's ``DiskError:
mdb_txn_commit: No space left on device``), a file size limit, an I/O error - becomes
``shard S (PATH): write failed: REASON; the dataset is unchanged since its last commit -
free space (or raise the file size limit) and re-run the same command to resume`` (the
README's error table), whichever job writes: a load's or ingest's workers, finalize's
build workers, compact's merge. A StoreError of the store itself keeps its text and gets
the same advice; other bulkload errors pass unchanged.

`reclaim_space`: after such a run dropped what it wrote (finalize's new table, compact's
merged batches), the shards' files still hold those pages - a full disk stays full. Each
shard's file is cut back to its committed pages (`lmdb_files.trim_tail`) and then
compacted (a compacted copy swapped in: stores' ``compact``) where the room allows, so
the space comes back. Best effort: a shard that cannot be compacted keeps the pages for
the next writer to reuse; committed data is never touched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from ..errors import BulkloadError, NoSpaceError, StoreError, WorkerError
from ..infra.space import existing_ancestor, free_bytes, human, mount_point
from .lmdb_files import trim_tail
from .spec import StoreSpec

T = TypeVar("T")


def guard_write(spec: StoreSpec, s: int, fn: Callable[[], T]) -> T:
    """fn() - a write to shard ``s`` of ``spec`` - with its failures as above."""
    try:
        return fn()
    except BulkloadError as e:
        if isinstance(e, StoreError):
            text = e.strerror if e.strerror else str(e)
            raise StoreError(
                f"{text}; the dataset is unchanged since its last commit - "
                "fix the cause and re-run the same command to resume"
            ) from None
        raise
    except Exception as e:  # lmdb.Error, rocksdict exceptions, OSError
        text = (str(e).strip() or type(e).__name__) + _full(spec.shard_path(s))
        raise StoreError(
            f"shard {s} ({spec.shard_path(s)}): write failed: {text}; the dataset is "
            "unchanged since its last commit - free space (or raise the file size "
            "limit) and re-run the same command to resume"
        ) from None


def _full(path: str) -> str:
    """ " (No space left on device: ...)" when the filesystem of ``path`` is (nearly) full:
    LMDB reports a write cut short by a full disk as an Input/output error."""
    try:
        free = free_bytes(existing_ancestor(path))
    except OSError:
        return ""
    if free >= 1 << 20:
        return ""
    return f" (No space left on device: {human(free)} free on {mount_point(existing_ancestor(path))})"


def out_of_space(e: BaseException) -> bool:
    """Did a run stop on a failed write: its own StoreError / NoSpaceError, or a worker's?"""
    cause = e.error if isinstance(e, WorkerError) else e
    return isinstance(cause, (StoreError, NoSpaceError))


def trim_tails(spec: StoreSpec, nshards: int) -> None:
    """Cut each LMDB shard back to its committed pages: the space of the writes a full disk
    cut short, needed before anything else can be written (a table's drop, a copy)."""
    for s in range(nshards):
        path = spec.shard_path(s)
        if spec.scheme in ("lmdb", "mem") and os.path.isfile(os.path.join(path, "data.mdb")):
            try:
                trim_tail(os.path.join(path, "data.mdb"))
            except OSError:
                pass


def reclaim_space(spec: StoreSpec, nshards: int) -> None:
    """Give the space of a failed run's dropped writes back to the filesystem (above)."""
    trim_tails(spec, nshards)
    for s in range(nshards):
        if not os.path.exists(spec.shard_path(s)):
            continue
        try:
            st = spec.open_shard(s, write=True)
        except Exception:
            continue
        try:
            st.compact()
        except Exception:
            pass
        finally:
            st.close()
