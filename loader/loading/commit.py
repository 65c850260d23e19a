"""Running a plan of batches with checkpoints, and committing it unit by unit.

A *plan* is a list of segments (plan.py): contiguous record ranges of sources, numbered
with consecutive batch seqs from the dataset's ``next_seq``. It is divided into *units*,
the granularity of visibility: the whole run for `load`, one file for `ingest`.

While the workers write (execute.py), each one syncs its shards every checkpoint interval
(job.Checkpoints) and reports the batches that are now durable (messages.Checkpoint). The coordinator
records them in the manifest as the run's ``pending`` rows (readers ignore them) and,
as soon as every batch of the next unit is durable, moves that unit's rows into the
committed list - one atomic manifest write. So:

- a crash (of the job, of a worker, of the machine) loses at most the work since the
  last checkpoint, and never exposes a partial unit;
- a resumed run keeps the pending batches that are still intact in the stores (their
  checksums are recomputed first) and writes only the rest, with the same seqs and
  record numbers: the result is byte-identical to an uninterrupted run.

Per shard, a worker writes its batches in seq order, so the durable batches of one
shard are always a prefix of the shard's planned batches; a resumed worker therefore
needs only a per-shard resume point (it deletes every key at or above it first).

Crash behaviour: the manifest is only ever replaced whole (model/manifest.py), so a crash
between two writes leaves the last one; a resumed run never trusts a pending batch without
checking its stored value first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from ..errors import BulkloadError
from ..infra import faults
from ..kinds import FixedKind
from ..model import manifest as mf
from ..model import runs
from ..model.manifest import BatchEntry
from ..model.runs import SourceRun
from ..stores.spec import StoreSpec
from .messages import Checkpoint
from .plan import Plan
from .report import records_of

_SEQ = attrgetter("seq")


@dataclass
class Unit:
    """What becomes visible at once: batches first_seq .. first_seq+nbatches-1."""

    name: str
    first_seq: int
    nbatches: int
    first_record: int
    records: int
    on_commit: Callable[[mf.Manifest, Unit], None] | None = None
    check: Callable[[Unit], str | None] | None = None  # a reason not to commit it, or None


def pending_entries(rows) -> list[BatchEntry]:
    """A run's ``pending`` rows (as the manifest stores them) as batch entries."""
    return [BatchEntry(*r) for r in rows or ()]


def pending_rows(entries) -> list[list]:
    """Batch entries as a run's ``pending`` rows (in seq order)."""
    return [e.row() for e in sorted(entries, key=_SEQ)]


def resume_points(spec: StoreSpec, plan: Plan, pending: list, kind=None) -> tuple[tuple, list[BatchEntry]]:
    """(per-shard resume seqs, entries kept) for a plan, given a crashed run's pending rows.

    A pending row is kept when it matches the plan and its stored value is intact
    (size and xxh3 recomputed by the record kind: one value, or a range scan); per shard,
    only the prefix up to the first batch that is missing or damaged is kept, since the
    worker rewrites that shard from there.
    """
    check = (kind or FixedKind(None, "", "")).stored_problem
    end = plan.end or plan.first_seq
    cand = {e.seq: e for e in pending_entries(pending) if plan.row(e.seq) == (e.shard, e.first, e.count)}
    resume, keep = [], []
    for s in range(plan.nshards):
        point, good = _intact_prefix(spec, plan, s, cand, check, end)
        resume.append(max(point, plan.first_seq))
        keep.extend(good)
    return tuple(resume), sorted(keep, key=_SEQ)


def _intact_prefix(spec: StoreSpec, plan: Plan, s: int, cand: dict, check, end: int) -> tuple[int, list]:
    """(resume seq, entries kept) of shard ``s``: its planned batches up to the first one
    that is not a candidate or not intact."""
    point, good, store = end, [], None
    try:
        for seq in plan.shard_seqs(s):  # stops at the first batch not kept
            entry = cand.get(seq)
            if entry is None:
                point = seq
                break
            if store is None:
                store = spec.open_shard(s, write=False)
            if check(store, entry) is not None:
                point = seq
                break
            good.append(entry)
    except Exception:  # an unreadable shard: rewrite all of it
        good, point = [], next(plan.shard_seqs(s), end)
    finally:
        if store is not None:
            store.close()
    return point, good


class Committer:
    """Tracks durable batches of a run and commits its units in order."""

    def __init__(
        self,
        root: str,
        m: mf.Manifest,
        run: SourceRun,
        units: list[Unit],
        keep: list[BatchEntry],
        record_pending: bool = True,
    ):
        self.root, self.m, self.run, self.units = root, m, run, units
        self.durable: dict[int, BatchEntry] = {e.seq: e for e in keep}
        self.next = 0  # index of the next unit to commit
        self.stopped: str | None = None  # a unit refused to commit (e.g. its file changed)
        self.record_pending = record_pending
        self.committed_units: list[Unit] = []
        if not run.has("records"):
            run.records = 0
        if not run.has("batches"):
            run.batches = 0

    @property
    def complete(self) -> bool:
        """Every unit is committed (the run's data is all in, whatever happens next)."""
        return bool(self.units) and self.next == len(self.units)

    def add(self, entries) -> None:
        for e in entries:
            self.durable[e.seq] = e

    def advance(self) -> bool:
        """Commit every unit that is now fully durable (in order). True if any was."""
        changed = False
        while self.stopped is None and self.next < len(self.units):
            u = self.units[self.next]
            seqs = range(u.first_seq, u.first_seq + u.nbatches)
            if any(s not in self.durable for s in seqs):
                break
            if u.check is not None:
                reason = u.check(u)
                if reason:
                    self.stopped = reason
                    break
            self._commit(u, [self.durable.pop(s) for s in seqs])
            changed = True
        if changed and self.next == len(self.units):
            # everything is committed: the run is done even if the job dies right now
            # (the caller adds its final figures to the run record afterwards)
            self.run.update(status="done", ended=time.time(), resumable=False, error=None)
            self.durable.clear()
        return changed

    def _commit(self, u: Unit, entries: list[BatchEntry]) -> None:
        """List unit ``u``'s batches in the manifest (in memory: the caller saves)."""
        if self.m.next_seq != u.first_seq or self.m.next_record != u.first_record:
            raise RuntimeError(
                f"internal error: unit {u.name} starts at seq {u.first_seq}, the dataset at {self.m.next_seq}"
            )
        self.m.batches.extend(entries)
        if entries:
            self.m.mark_arrays_stale()
        self.run.records = runs.need(self.run, "records", self.run.records) + records_of(entries)
        self.run.batches = runs.need(self.run, "batches", self.run.batches) + len(entries)
        if u.on_commit is not None:
            u.on_commit(self.m, u)
        self.committed_units.append(u)
        self.next += 1

    def save(self) -> None:
        if self.record_pending:
            self.run.pending = pending_rows(self.durable.values())
        self.m.save(self.root)

    def save_quietly(self) -> None:
        """save(), on the way out of a run that stopped: a failure to write is not reported
        (the error that stopped the run matters more; the manifest on disk is the last good one)."""
        try:
            self.save()
        except BulkloadError:
            pass

    def on_message(self, msg) -> None:
        """A worker's message (pool.Pool's ``on_message``): checkpoints are recorded."""
        if isinstance(msg, Checkpoint):
            faults.hit("checkpoint")
            self.add(msg.entries)
            self.advance()
            if self.record_pending or self.next:
                self.save()

    def finish(self, receipts) -> None:
        """Every worker returned: add the batches of their receipts and commit."""
        for rc in receipts:
            self.add(rc.batches)
        self.advance()
