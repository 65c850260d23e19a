"""`ingest`, step 3: the plan of a run - which files, numbered how, committed how.

A plan is a list of entries (model/runs.py's `PlanFile`), one per file, in name order:
``name``, ``size``, ``mtime_ns``, ``xxh3`` (its identity), ``records``, ``first_seq``,
``first_record`` (its place in the dataset). It is saved in the run record (``run.plan``), so that the next
run resumes it (`resumable_plan`): first the rest of the interrupted plan (files still
unchanged, same numbers: their durable batches are kept), then any newer files
(`number_files`). Each file is one commit unit (`file_unit`): it counts as ingested
exactly when its batches are committed, in the same manifest write, and it is not
committed if it changed while it was loaded.

Pure planning: reads files' stats and contents, writes nothing.
"""

from __future__ import annotations

import os
import time

from ..errors import InputError
from ..model import manifest as mf
from ..model import runs
from ..model.runs import IngestRun, PlanFile
from ..sources import FileSource, hash_file
from .commit import Unit
from .ingest_scan import Candidate, file_stat
from .plan import Segment


def resumable_plan(m: mf.Manifest, directory: str, pattern: str, opts: dict) -> tuple[IngestRun | None, list[PlanFile]]:
    """The last unfinished ingest run of this directory and the part of its plan to redo
    (its files not committed yet, as far as they are unchanged)."""
    prev = None
    for r in runs.recent(m):
        if isinstance(r, IngestRun) and r.directory == directory and r.pattern == pattern:
            prev = r
            break
    if prev is None or prev.status not in runs.UNFINISHED or not prev.resumable:
        return None, []
    if not runs.options_match(prev, **opts) or runs.compacted_since(m, prev):
        return None, []
    rest = [e for e in prev.plan or [] if not (e.name in m.files and m.files[e.name].get("run") == prev.id)]
    if not rest or rest[0].first_seq != m.next_seq or rest[0].first_record != m.next_record:
        return None, []
    return prev, _unchanged_prefix(rest, directory)


def _unchanged_prefix(rest: list[PlanFile], directory: str) -> list[PlanFile]:
    """The entries of ``rest`` up to the first file that changed (an mtime alone may move)."""
    kept = []
    for e in rest:
        path = os.path.join(directory, e.name)
        st = file_stat(path)
        if st is None or st[0] != e.size:
            break
        if st[1] != e.mtime_ns:
            try:
                h, _ = hash_file(path)
            except InputError:
                break
            if h != e.xxh3:
                break
            e = e.copy()
            e.mtime_ns = st[1]
        kept.append(e)
    return kept


def number_files(kept: list[PlanFile], new: list[Candidate], m: mf.Manifest, b: int, rs: int) -> list[PlanFile]:
    """Number the files: the kept part of an interrupted plan first, then the new files."""
    plan = [e.copy() for e in kept]
    seq, first = m.next_seq, m.next_record
    if plan:
        last = plan[-1]
        seq, first = last.first_seq + -(-last.records // b), last.first_record + last.records
    for c in new:
        n = c.size // rs
        plan.append(
            PlanFile(
                name=c.name, size=c.size, mtime_ns=c.mtime_ns, xxh3=c.xxh3, records=n, first_seq=seq, first_record=first
            )
        )
        seq += -(-n // b)
        first += n
    return plan


def segments_of(plan: list[PlanFile], directory: str) -> list[Segment]:
    """The plan's files as segments the workers read (one per file)."""
    return [Segment(FileSource(os.path.join(directory, e.name)), e.records, e.first_seq, e.first_record) for e in plan]


def file_unit(e: PlanFile, b: int, run_id: str, directory: str) -> Unit:
    """The commit unit of one planned file: committed only if it is unchanged, and then
    listed in ``manifest.files`` in the same manifest write."""
    path = os.path.join(directory, e.name)

    def check(u: Unit) -> str | None:
        now = file_stat(path)
        if now != (e.size, e.mtime_ns):
            return (
                f"{e.name} changed while it was being loaded (size {e.size} -> "
                f"{now[0] if now else 'gone'}); left for the next run"
            )
        return None

    def on_commit(m: mf.Manifest, u: Unit) -> None:
        m.files[e.name] = {
            "size": e.size,
            "mtime_ns": e.mtime_ns,
            "xxh3": e.xxh3,
            "records": e.records,
            "first_record": e.first_record,
            "first_seq": e.first_seq,
            "batches": u.nbatches,
            "run": run_id,
            "ingested": time.time(),
        }

    return Unit(e.name, e.first_seq, -(-e.records // b), e.first_record, e.records, on_commit=on_commit, check=check)
