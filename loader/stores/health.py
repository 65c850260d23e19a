"""Damage a dataset can have that its manifest cannot hide: missing or broken shards, and
batches whose stored bytes no longer have the checksum the manifest lists.

- `shard_problems(spec, m)`: every shard the manifest lists committed records in is
  checked with its backend's cheap `check(path)` (the directory exists; LMDB: data.mdb
  with two valid meta pages, long enough for its pages in use; RocksDB: CURRENT naming
  an existing MANIFEST). `info` reports what it finds ("DAMAGED: ..."); writers call
  `require_shards` after taking the lock and before any write, so that a load never
  re-creates a missing shard empty (which would make the manifest's batches in it
  silently unreadable) - workers, too, are told which shards must already exist.
- `check_value(uri, b, value)`: a batch value read back is compared with the size and
  checksum of its manifest row before it is decoded (memory speed; a BLZ3 value's blocks
  by their own hashes, infra/checksums.py); a mismatch raises CorruptBatchError naming the
  shard and the batch.

The manifest and its batch rows are read through the small protocols below (what these
checks need of model.manifest's Manifest and BatchEntry), so that the stores stage does
not import the model of a dataset. Pure checks: nothing here writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Protocol

from ..errors import CorruptBatchError, CorruptStoreError, MissingShardError
from ..infra.checksums import value_ok
from .base import require_access
from .spec import StoreSpec


class BatchRow(Protocol):
    """What the checks read of a committed batch (model.manifest.BatchEntry)."""

    @property
    def seq(self) -> int: ...

    @property
    def shard(self) -> int: ...

    @property
    def first(self) -> int: ...

    @property
    def checksum(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def lo(self) -> int | None: ...

    @property
    def hi(self) -> int | None: ...

    @property
    def keyed(self) -> bool: ...

    @property
    def records(self) -> int: ...


class BatchList(Protocol):
    """What the checks read of a manifest (model.manifest.Manifest)."""

    @property
    def batches(self) -> Iterable[BatchRow]: ...


REBUILD = "restore the shard from a backup, or rebuild the dataset with `bulkload load SOURCE DATASET --replace`"


@dataclass(frozen=True)
class ShardProblem:
    """A shard the manifest relies on that is missing or is not a sound store."""

    shard: int
    path: str
    batches: int | None  # committed batches (with records) the manifest lists in the shard
    problem: str  # "missing", "no data.mdb in it ...", "data.mdb is truncated ..."

    @property
    def missing(self) -> bool:
        return self.problem == "missing" or self.problem.startswith("no ")

    def message(self, writing: bool = False) -> str:
        what = "is missing" if self.problem == "missing" else f"is damaged ({self.problem})"
        listed = "" if self.batches is None else f"{self.batches} "
        done = ", nothing was written" if writing else ""
        return (
            f"shard {self.shard} ({self.path}) {what}, but the manifest lists {listed}committed batches in "
            f"it; the dataset is damaged{done} - {REBUILD}"
        )

    def line(self) -> str:
        """One line for `bulkload info`."""
        return f"DAMAGED: shard {self.shard} ({self.path}) {self.problem} ({self.batches} committed batches)"

    def error(self, writing: bool = False) -> MissingShardError | CorruptStoreError:
        cls = MissingShardError if self.missing else CorruptStoreError
        return cls(self.message(writing))

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def committed_shards(m: BatchList) -> Counter[int]:
    """shard -> number of committed batches holding records in it."""
    agg = getattr(m.batches, "agg", None)  # a manifest: its aggregates (O(1) in a catalog)
    if agg is not None:
        return Counter({int(k): v for k, v in agg.shard_batches.items()})
    return Counter(b.shard for b in m.batches if b.records)


def check_shard(spec: StoreSpec, shard: int, batches: int | None = None) -> ShardProblem | None:
    """What is wrong with a shard that must exist, or None."""
    path = spec.shard_path(shard)
    require_access(path, lock_files=spec.backend.READER_WRITES)  # exit 2: a permission problem is not damage
    found = spec.backend.check(path)
    return None if found is None else ShardProblem(shard, path, batches, found)


def shard_problems(spec: StoreSpec, m: BatchList) -> list[ShardProblem]:
    """The shards with committed batches that are missing or are not sound stores."""
    found = (check_shard(spec, s, n) for s, n in sorted(committed_shards(m).items()))
    return [p for p in found if p is not None]


def require_shards(spec: StoreSpec, m: BatchList | None) -> None:
    """Raise (MissingShardError / CorruptStoreError) unless every shard the manifest lists
    committed batches in is there and sound: a writer calls this before writing."""
    problems = shard_problems(spec, m) if m is not None else []
    if problems:
        err = problems[0].error(writing=True)
        if len(problems) > 1:
            err.args = (
                f"{err.args[0]} (and {len(problems) - 1} more damaged shard(s): "
                f"{', '.join(str(p.shard) for p in problems[1:])})",
            )
        raise err


def existing_shards(m: BatchList | None) -> tuple[int, ...]:
    """The shards a worker must find on disk (never create afresh)."""
    return tuple(sorted(committed_shards(m))) if m is not None else ()


def check_value(uri: str, b: BatchRow, value: bytes | memoryview, whole: bool = True) -> None:
    """Raise CorruptBatchError unless ``value`` has the size and checksum of manifest row
    ``b`` (infra/checksums.py `value_ok`; ``whole=False``: a BLZ3 value's head only, for a
    caller that decodes it through its serializer, which checks each block it decodes)."""
    if len(value) == b.nbytes and value_ok(value, b.checksum, whole):
        return
    what = f"{len(value)} bytes stored, {b.nbytes} in the manifest" if len(value) != b.nbytes else "checksum mismatch"
    raise CorruptBatchError(batch_message(uri, b, f"stored bytes changed ({what})"))


def batch_message(uri: str, b: BatchRow, what: str) -> str:
    """The one-line message of a damaged batch: where it is, what is wrong, what to do."""
    where = f"documents {b.lo}..{b.hi}" if b.keyed else f"first record {b.first}"
    return (
        f"shard {b.shard} batch {b.seq} ({where}) of {uri}: {what}; run `bulkload verify {uri}` to list "
        "every damaged batch, then restore the dataset from a backup or rebuild it with "
        "`bulkload load SOURCE DATASET --replace`"
    )
