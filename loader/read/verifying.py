"""`verify` of a dataset snapshot (read/dataset.py's `Dataset` inherits it): every batch's
size, checksum, decode, count and first record against the manifest, and every array's
chunks and multiset of cells against the flat records, in one pass over the flat batches
(arrays/verify.py's `FlatSums` takes each batch's records as it is checked).

Invariants: problems are reported only while the snapshot is still whole (a dataset that
moved on is verified again as it is now, `VERIFY_ATTEMPTS` times); `verify_part` and
`verify_report` are the two halves a task per shard (api/verify_tasks.py) runs apart.

Crash behaviour: reads only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Self

from ..errors import BlockChecksumError, CorruptBatchError, DatasetReplacedError, StoreError
from ..infra.checksums import CHANGED, value_ok
from ..model import manifest as mf
from ..model.engine_keys import EngineKeys
from ..model.placement import batch_key
from ..stores.base import require_access
from ..stores.health import batch_message, committed_shards
from ..stores.values import ValueReader

if TYPE_CHECKING:
    from ..arrays.verify import FlatSums
    from ..serializers.base import Serializer
    from ..stores.base import ShardStore
    from ..stores.spec import StoreSpec

#: one finding of `verify` (shard, batch, first_record, problem; a keyed batch's ids), as JSON shows it
Problem = dict[str, Any]


class KeyedIndex(Protocol):
    """The committed keyed batches of a snapshot (the documents plug-in's DocIndex)."""

    batches: list[mf.BatchEntry]


class KeyedReader(Protocol):
    """What the core reads through a layout kind's keyed reader (`Dataset.docs`: the
    documents plug-in's DocReader, loader/docs/access.py). Its documents are the plug-in's
    types, which the core does not import: Any here."""

    index: KeyedIndex

    def get(self, doc_id: int) -> Any: ...

    def get_many(self, ids: Iterable[int]) -> tuple[Any, list[int]]: ...

    def scan(self, start_id: int = 0, stop_id: int | None = None) -> Any: ...

    def verify_batch(self, b: mf.BatchEntry) -> str | None: ...


@dataclass
class VerifyReport(EngineKeys):
    dataset: str
    ok: bool
    batches: int
    records: int
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | self.engine


#: times `verify` starts over on a dataset that moved on while it was verified
VERIFY_ATTEMPTS = 4


class Verifying:
    """The verification methods of `Dataset` (it provides manifest, shard, serializer,
    docs, uri, moved_on and _opened_as)."""

    if TYPE_CHECKING:  # provided by `Dataset`
        manifest: mf.Manifest
        spec: StoreSpec
        uri: str
        _opened_as: tuple[str, bool]

        def __init__(self, uri: str, pin: bool = True) -> None: ...

        @property
        def serializer(self) -> Serializer: ...

        @property
        def docs(self) -> KeyedReader: ...

        def shard(self, i: int, random_reads: bool = False) -> ShardStore: ...

        def moved_on(self) -> Exception | None: ...

        def close(self) -> None: ...

    def verify(self, check: Callable[[Self], VerifyReport] | None = None) -> VerifyReport:
        """Recompute every batch's checksum and count; list what does not match.

        ``check(ds)`` gives the report of one snapshot (default `verify_snapshot`, in this
        process; api/verify_tasks.py passes one that runs a task per shard on an executor).
        Problems are reported only when this snapshot is still whole: when the dataset
        moved on while it was checked (replaced, or an unpinned reader's data collected),
        the dataset as it is now is verified again (a few times, then the "open it
        again" error is raised) - a healthy dataset is never reported corrupt."""
        check = check or type(self).verify_snapshot
        for s in range(self.manifest.shards):  # a shard this user may not read is a usage error, not a finding
            require_access(self.spec.shard_path(s), lock_files=self.spec.backend.READER_WRITES)
        ds = self
        moved: Exception | None = None
        try:
            for _ in range(VERIFY_ATTEMPTS):
                try:
                    report = check(ds)
                    moved = None if report.ok else ds.moved_on()
                except DatasetReplacedError as e:
                    moved = e
                if moved is None:
                    return report
                if ds is not self:
                    ds.close()
                ds = type(self)(*self._opened_as)
            assert moved is not None  # each attempt returned or found it moved on
            raise moved
        finally:
            if ds is not self:
                ds.close()

    def verify_snapshot(self) -> VerifyReport:
        """One pass of `verify` over this snapshot, in this process."""
        problems, arrays = self.verify_part(range(self.manifest.shards))
        return self.verify_report(problems, [arrays])

    def verify_part(self, shards: Iterable[int]) -> tuple[list[Problem], dict[str, dict[str, Any]] | StoreError]:
        """The checks of `verify` on what ``shards`` store: (the problems of their batches,
        in manifest order; their part of every array's check, arrays/verify.py
        `array_parts`, or the StoreError that stopped it). Each flat batch is read once:
        its records feed the checks of all arrays. A shard that is missing or damaged is
        one problem (its batches are not read); the other shards are still verified."""
        wanted = set(shards)
        flat = None
        if self.manifest.arrays:
            from ..arrays.verify import FlatSums, array_parts  # heavy (pyarrow): only datasets with arrays

            flat = FlatSums(self.manifest.arrays)
        problems = self._batch_problems(wanted, flat)
        if flat is None:
            return problems, {}
        try:
            return problems, array_parts(self, wanted, flat)
        except StoreError as e:
            return problems, e

    def verify_report(
        self, problems: list[Problem], array_parts: list[dict[str, dict[str, Any]] | StoreError]
    ) -> VerifyReport:
        """The report of this snapshot: the problems of its batches (in manifest order),
        then of its arrays, from the parts of their checks (`verify_part`, in shard order)."""
        if self.manifest.arrays:
            from ..arrays.verify import combine_arrays

            stopped = next((p for p in array_parts if isinstance(p, StoreError)), None)
            parts = [p for p in array_parts if not isinstance(p, StoreError)]
            try:
                problems = problems + (combine_arrays(self.manifest, parts) if stopped is None else [])
            except StoreError as e:
                stopped = e
            if stopped is not None:
                problems = [
                    *problems,
                    {"shard": None, "batch": None, "first_record": None, "problem": f"arrays: {stopped}"},
                ]
        return VerifyReport(self.uri, not problems, len(self.manifest.batches), self.manifest.records, problems)

    def _batch_problems(self, shards: set[int], flat: FlatSums | None) -> list[Problem]:
        """The problems of the batches stored in ``shards`` (see `verify_part`)."""
        problems: list[Problem] = []
        broken: set[int] = set()
        for b in self.manifest.batches:
            if b.shard in broken or b.shard not in shards:
                continue
            where = {"shard": b.shard, "batch": b.seq, "first_record": b.first}
            failed: Exception | None = None
            problem: str | None = None
            try:
                problem = self.docs.verify_batch(b) if b.keyed else self._batch_problem(b, flat)
            except StoreError as e:  # the shard is missing or damaged: one problem for it
                broken.add(b.shard)
                problems.append(
                    {
                        "shard": b.shard,
                        "batch": None,
                        "first_record": None,
                        "batches": committed_shards(self.manifest)[b.shard],
                        "problem": str(e),
                    }
                )
                failed = e
            except DatasetReplacedError:
                raise  # the dataset moved on: `verify` checks it again as it is now
            except Exception as e:
                problem, failed = f"unreadable: {e}", e
            if failed is not None and flat is not None:  # the arrays built from it cannot be compared
                flat.damaged(b.first, failed)
            if problem is not None:
                problems.append({**where, **({"ids": [b.lo, b.hi]} if b.keyed else {}), "problem": problem})
        return problems

    def _batch_problem(self, b: mf.BatchEntry, flat: FlatSums | None) -> str | None:
        """Why a fixed-size batch is not intact in its shard, or None. Its records, read
        in place, go to ``flat`` (the arrays' sums, when there are arrays); when they cannot
        be read, the error `iter_batches` would raise goes there instead."""
        with ValueReader(self.shard(b.shard), "batches") as rd:
            v = rd.get(batch_key(b.seq))
            problem, error = self._stored_problem(b, v, flat)
            if problem is None and v is not None:  # (a missing value is a problem)
                try:  # (a BLZ3 value's blocks: each checked by its hash as it is decoded)
                    start, recs = self.serializer.decode(v)
                except BlockChecksumError:
                    problem = CHANGED
                    if flat is not None and flat.needs(b.first):
                        error = CorruptBatchError(batch_message(self.uri, b, problem))
                except Exception as e:
                    problem, error = f"undecodable: {e}", e
                else:
                    if flat is not None:
                        flat.add(b.first, recs)
                    if len(recs) != b.count or start != b.first:
                        problem = f"holds {len(recs)} records from {start}, manifest says {b.count} from {b.first}"
            rd.release(v)
        if error is not None and flat is not None:
            flat.damaged(b.first, error)
        return problem

    def _stored_problem(
        self, b: mf.BatchEntry, v: bytes | memoryview | None, flat: FlatSums | None
    ) -> tuple[str | None, BaseException | None]:
        """(what is wrong with batch b's stored value ``v``, the error reading it raises)."""
        if v is None:
            problem = "missing from the store"
        elif len(v) != b.nbytes:
            problem = f"size {len(v)} != {b.nbytes} in the manifest"
        elif not value_ok(v, b.checksum, whole=False):  # (BLZ3: the blocks as `_batch_problem` decodes them)
            problem = CHANGED
        else:
            return None, None
        if flat is None or not flat.needs(b.first):
            return problem, None
        moved = self.moved_on() if v is None else None  # as `_value` says it
        return problem, moved or CorruptBatchError(batch_message(self.uri, b, problem))
