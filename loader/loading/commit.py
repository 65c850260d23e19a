"""Running a plan of batches with checkpoints, and committing it unit by unit.

A *plan* is a list of segments (workers.Segment): contiguous record ranges of sources,
numbered with consecutive batch seqs from the dataset's ``next_seq``. It is divided into
*units*, the granularity of visibility: the whole run for `load`, one file for `ingest`.

While the workers write, each one syncs its shards every ``checkpoint_seconds`` /
``checkpoint_bytes`` and reports the batches that are now durable. The coordinator
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

Planning never lists the batches: `Plan` computes a batch's row, a shard's seqs and the
records still to write from the segments, so a plan of 10**15 records costs what a plan
of ten does (memory stays flat in N, as the workers' bounded queues keep it while loading).
"""

from __future__ import annotations

import bisect
import os
import time
from dataclasses import dataclass
from typing import Callable

from ..infra import env, faults, logs
from ..infra.pool import Pool
from ..infra.progress import Progress
from ..kinds import FixedKind, kind_for
from ..model import manifest as mf
from ..model.layouts import Layout
from ..stores.health import existing_shards
from ..stores.spec import StoreSpec
from .worker import LoadTask, Segment, load_worker, shard_seqs

CHECKPOINT_SECONDS, CHECKPOINT_BYTES = env.CHECKPOINT_SECONDS, env.CHECKPOINT_BYTES


def checkpoint_settings(seconds: float | None = None, nbytes: int | None = None) -> tuple[float, int]:
    """Explicit values > BULKLOAD_CHECKPOINT_SECONDS / _BYTES > defaults (10 s, 1 GiB)."""
    from ..errors import UsageError

    env_seconds, env_bytes = env.checkpoint()
    seconds = env_seconds if seconds is None else seconds
    nbytes = env_bytes if nbytes is None else nbytes
    if not (0 <= seconds < float("inf")) or nbytes < 0:
        raise UsageError(f"checkpoint interval {seconds!r} s / {nbytes!r} bytes: both must be >= 0")
    return float(seconds), int(nbytes)


@dataclass
class Unit:
    """What becomes visible at once: batches first_seq .. first_seq+nbatches-1."""

    name: str
    first_seq: int
    nbatches: int
    first_record: int
    records: int
    on_commit: Callable[[mf.Manifest, "Unit"], None] | None = None
    check: Callable[["Unit"], str | None] | None = None  # a reason not to commit it, or None


def plan_units(segments: list[Segment], b: int, names: list[str]) -> list[Unit]:
    return [Unit(name, s.first_seq, s.nbatches(b), s.first_record, s.count)
            for s, name in zip(segments, names)]


class Plan:
    """The batches of a plan's segments, computed arithmetically: memory and time grow with
    the number of segments (one for a load, one per file for an ingest) and shards, never
    with the number of batches (a generated source of 10**15 records is one segment)."""

    def __init__(self, segments: list[Segment], b: int, k: int):
        self.segments = sorted((s for s in segments if s.count), key=lambda s: s.first_seq)
        self.b, self.k = b, k
        self._firsts = [s.first_seq for s in self.segments]

    @property
    def end(self) -> int | None:
        """One past the last seq (None: no batches)."""
        return max((s.first_seq + s.nbatches(self.b) for s in self.segments), default=None)

    def row(self, seq: int) -> tuple[int, int, int] | None:
        """(shard, first record, count) of batch ``seq``, or None if the plan has no such batch."""
        i = bisect.bisect_right(self._firsts, seq) - 1
        if i < 0:
            return None
        seg, b = self.segments[i], self.b
        j = seq - seg.first_seq
        if j >= seg.nbatches(b):
            return None
        return seq % self.k, seg.first_record + j * b, min(b, seg.count - j * b)

    def shard_seqs(self, shard: int):
        """The seqs of the batches on ``shard``, ascending."""
        for seg in self.segments:
            yield from shard_seqs(seg.first_seq, seg.first_seq + seg.nbatches(self.b), shard, self.k)

    def records_from(self, resume: tuple) -> int:
        """Records of the batches at or above each shard's resume seq (``()``: all)."""
        total = sum(s.count for s in self.segments)
        if not resume:
            return total
        b = self.b
        for seg in self.segments:
            nb = seg.nbatches(b)
            last = seg.first_seq + nb - 1
            for shard in range(self.k):
                done = shard_seqs(seg.first_seq, min(seg.first_seq + nb, resume[shard]), shard, self.k)
                if done:
                    total -= len(done) * b - (b * nb - seg.count if done[-1] == last else 0)
        return total


def resume_points(spec: StoreSpec, segments: list[Segment], b: int, k: int, first_seq: int,
                  pending: list, kind=None) -> tuple[tuple, list]:
    """(per-shard resume seqs, rows kept) for a plan, given a crashed run's pending rows.

    A pending row is kept when it matches the plan and its stored value is intact
    (size and xxh3 recomputed by the record kind: one value, or a range scan); per shard, only the prefix up to the first batch that is
    missing or damaged is kept, since the worker rewrites that shard from there.
    """
    check = (kind or FixedKind(None, "", "")).stored_problem
    plan = Plan(segments, b, k)
    end = plan.end or first_seq
    cand = {row[0]: list(row) for row in pending if plan.row(row[0]) == (row[1], row[2], row[3])}
    resume, keep = [], []
    for s in range(k):
        point = end
        good = []
        store = None
        try:
            for seq in plan.shard_seqs(s):  # stops at the first batch not kept
                row = cand.get(seq)
                if row is None:
                    point = seq
                    break
                if store is None:
                    store = spec.open_shard(s, write=False)
                if check(store, row) is not None:
                    point = seq
                    break
                good.append(row)
        except Exception:  # an unreadable shard: rewrite all of it
            good, point = [], next(plan.shard_seqs(s), end)
        finally:
            if store is not None:
                store.close()
        resume.append(max(point, first_seq))
        keep.extend(good)
    return tuple(resume), sorted(keep)


class Committer:
    """Tracks durable rows of a run and commits its units in order."""

    def __init__(self, root: str, m: mf.Manifest, run: dict, units: list[Unit], keep: list,
                 record_pending: bool = True):
        self.root, self.m, self.run, self.units = root, m, run, units
        self.durable = {row[0]: list(row) for row in keep}
        self.next = 0  # index of the next unit to commit
        self.stopped: str | None = None  # a unit refused to commit (e.g. its file changed)
        self.record_pending = record_pending
        self.committed_units: list[Unit] = []
        run.setdefault("records", 0)
        run.setdefault("batches", 0)

    @property
    def complete(self) -> bool:
        """Every unit is committed (the run's data is all in, whatever happens next)."""
        return bool(self.units) and self.next == len(self.units)

    def add(self, rows) -> None:
        for row in rows:
            self.durable[row[0]] = list(row)

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
            if self.m.next_seq != u.first_seq or self.m.next_record != u.first_record:
                raise RuntimeError(f"internal error: unit {u.name} starts at seq {u.first_seq}, "
                                   f"the dataset at {self.m.next_seq}")
            rows = [self.durable.pop(s) for s in seqs]
            self.m.batches.extend(mf.BatchEntry(*r) for r in rows)
            if rows:
                self.m.mark_arrays_stale()
            self.run["records"] += sum(mf.BatchEntry(*r).records for r in rows)
            self.run["batches"] += len(rows)
            if u.on_commit is not None:
                u.on_commit(self.m, u)
            self.committed_units.append(u)
            self.next += 1
            changed = True
        if changed and self.next == len(self.units):
            # everything is committed: the run is done even if the job dies right now
            # (the caller adds its final figures to the run record afterwards)
            self.run.update(status="done", ended=time.time(), resumable=False, error=None)
            self.durable.clear()
        return changed

    def save(self) -> None:
        if self.record_pending:
            self.run["pending"] = sorted(self.durable.values())
        self.m.save(self.root)

    def save_quietly(self) -> None:
        """save(), on the way out of a run that stopped: a failure to write is not reported
        (the error that stopped the run matters more; the manifest on disk is the last good one)."""
        from ..errors import BulkloadError

        try:
            self.save()
        except BulkloadError:
            pass

    def on_message(self, msg: tuple) -> None:
        if msg and msg[0] == "checkpoint":
            faults.hit("checkpoint")
            self.add(msg[2])
            self.advance()
            if self.record_pending or self.next:
                self.save()

    def finish(self, receipts: list[dict]) -> None:
        for rc in receipts:
            self.add(rc["batches"])
        self.advance()


def execute(spec: StoreSpec, m: mf.Manifest, run: dict, committer: Committer, *, layout: Layout,
            segments: list[Segment], resume: tuple, k: int, b: int, nworkers: int,
            label: str, progress: str, stream_feed=None, checkpoint: tuple[float, int] | None = None,
            fault: str = "", kind=None, table: str = "batches", keep_tables: tuple = (),
            store_options: tuple = (), clear_from: int = -1) -> list[dict]:
    """Run the workers over the plan (or the stream feed, streams.py); returns their receipts.

    Checkpoints flow into ``committer`` as they arrive; the caller calls
    ``committer.finish(receipts)`` and saves the final run status.
    """
    kind = kind or kind_for(layout, m.format, m.compression)
    rs = kind.record_bytes()
    todo_records = Plan(segments, b, k).records_from(resume)
    if stream_feed is None and not todo_records:
        return []
    secs, nbytes = checkpoint or checkpoint_settings()
    shard_hint = todo_records * rs // k
    first_seq = segments[0].first_seq if segments else m.next_seq
    first_record = segments[0].first_record if segments else m.next_record
    tasks = [LoadTask(store=spec, worker=w, workers=nworkers, nshards=k, layout=layout.to_dict(),
                      format=m.format, compression=m.compression,
                      segments=tuple(segments) if stream_feed is None else (),
                      first_seq=first_seq, first_record=first_record, batch_records=b,
                      resume=tuple(resume), shard_bytes_hint=shard_hint, main_pid=os.getpid(),
                      checkpoint_bytes=nbytes, checkpoint_seconds=secs, fault=fault, table=table,
                      keep_tables=tuple(keep_tables), store_options=tuple(store_options),
                      clear_from=clear_from, must_exist=existing_shards(m))
             for w in range(nworkers)]
    total = None if stream_feed is not None else todo_records
    with Progress(label, total, rs, mode=progress) as prog:
        if stream_feed is not None:
            return stream_feed(tasks, prog, committer.on_message)

        def on_message(msg: tuple) -> None:
            if msg[0] == "progress":  # keyed records: (documents, bytes of text)
                prog.advance(msg[1], msg[2])
            else:
                committer.on_message(msg)

        pool = Pool(load_worker, tasks, on_progress=prog.advance, on_message=on_message)
        return pool.run()


def log(progress: str, message: str, **fields) -> None:
    """A log line (text or JSON, see logs.py) unless the job is quiet."""
    if progress != "none":
        logs.event(message, **fields)


def now() -> float:
    return time.time()
