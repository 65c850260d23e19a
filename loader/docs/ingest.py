"""`ingest` for documents (layout ``docs``): load the new ``<id>.json`` files of a directory,
again and again (cron), through the load machinery. The steps, the ledger and crash
behaviour: docs/design/documents.md."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from ..infra.lock import DatasetLock
from ..loading.ingest import IngestReport
from ..loading.job import LoadJob, RunSettings
from ..loading.options import check_compatible, prepare_root
from ..loading.report import LoadReport, log
from ..loading.run import load_locked
from ..maintain.garbage import start_writing
from ..model import manifest as mf
from ..model import runs
from ..model.runs import Run, SourceRun
from ..read.dataset import Dataset
from ..sources import SourcePlan
from ..stores.health import require_shards
from ..stores.spec import StoreSpec
from .access import stored_duplicates
from .json_dir import DirListing, FileError, parse_json_files
from .ledger import Ledger, StatOf, commit_ledger, load_ledger, write_run_ledger
from .sources import JsonDirSource, listing_fingerprint

_COMPARE_CHUNK = 4096  # files read and compared at once

CHANGED_HINT = (
    "documents are immutable once stored - give the new version a new id (a new <id>.json "
    "file), or restore the stored content"
)


# --- the run -----------------------------------------------------------------------------------


def ingest_docs(spec: StoreSpec, directory: str, *, settings: RunSettings, on_bad_file: str) -> IngestReport:
    """The documents part of `loader.loading.ingest.ingest` (options already resolved)."""
    src = JsonDirSource(directory, on_bad_file)
    listing, errors = src.listing()  # badly named files: fail raises here, before any write
    report = IngestReport(spec.uri, directory, None, None, "nothing-to-do", layout="docs")
    prepare_root(spec)
    with DatasetLock(spec.root) as lock:
        lock.set_job(f"ingest {directory}")
        m = mf.load_manifest(spec.root, spec.uri) if mf.exists(spec.root) else None
        start_writing(spec, m, progress=settings.progress)
        if m is not None:
            check_compatible(m, spec, settings)
        require_shards(spec, m)
        found = _new_files(spec, m, src, listing, [e.to_dict() for e in errors])
        report.already, report.skipped = found.already, [_named(f) for f in found.skipped]
        if not found.new:
            for f in report.skipped:  # loaded files' are logged by the load (loading/run.py)
                log(
                    settings.progress,
                    f"skipping bad file {f['name']}: {f['reason']}",
                    level="warning",
                    file=f["name"],
                    event="skipped",
                )
            report.seconds = round(time.perf_counter() - settings.t_start, 4)
            log(
                settings.progress,
                f"ingest {directory}: nothing new ({report.already} already ingested)",
                event="nothing-to-do",
                already=report.already,
                skipped=len(report.skipped),
            )
            return report
        rep = _load_new(spec, m, src, found, settings)
    return _done(report, rep, found.new, settings.t_start)


@dataclass(frozen=True)
class NewFiles:
    """The files of the directory sorted out (`_new_files`)."""

    new: DirListing  # to load: ids not stored
    skipped: list  # bad files ({"path", "reason"}), sorted by path
    already: int  # files ingested (or loaded) before: in the ledger, or equal to the stored document
    verified: list  # ids of the files found equal to their stored documents (not in the ledger)
    stat_of: StatOf  # the listed files' stats
    ledger: Ledger  # what the ledgers said before this run


def _new_files(
    spec: StoreSpec, m: mf.Manifest | None, src: JsonDirSource, listing: DirListing, skipped: list
) -> NewFiles:
    """Sort the listed files: in the ledger unchanged -> already; stored -> compared (equal:
    already; changed: bad); bad last time and still bad -> skipped (or BadFileError); the
    rest is new."""
    entries, sizes, mtimes = listing.stat()  # the files still there
    ledger = load_ledger(spec.root, m)
    known = ledger.unchanged(entries.ids, sizes, mtimes)
    verified: list[int] = []  # stored ids whose file equals the stored document
    new = entries.take(np.flatnonzero(~known))
    if m is not None and m.batches and new:
        compare = _Comparer(spec.uri, verified)
        try:
            new, skipped = stored_duplicates(spec, m, src, new, skipped, src.on_bad_file, compare=compare)
        finally:
            compare.close()
    new, skipped = _still_bad(m, src.path, new, skipped, src.on_bad_file)
    return NewFiles(
        new, skipped, int(known.sum()) + len(verified), verified, StatOf(entries.ids, sizes, mtimes), ledger
    )


def _load_new(
    spec: StoreSpec, m: mf.Manifest | None, src: JsonDirSource, found: NewFiles, settings: RunSettings
) -> LoadReport:
    """Write this run's ledger, then load the new files: the load machinery in mode
    ``ingest``, the ledger named in the manifest by the commit."""
    fp = listing_fingerprint(found.new)
    plan_ids = found.new.ids
    name, mine = write_run_ledger(spec.root, m, fp, plan_ids, found.verified, found.stat_of)

    def on_commit(m2: mf.Manifest, unit, run: Run) -> None:
        commit_ledger(spec.root, m2, unit, run, name, (mine, len(plan_ids)), found.ledger)

    planned = SourcePlan(src, len(found.new), fp, found.new, tuple(found.skipped))
    return load_locked(spec, m, LoadJob(settings, planned, mode="ingest", on_commit=on_commit))


def _done(report: IngestReport, rep: LoadReport, new: DirListing, t_start: float) -> IngestReport:
    """The report of a run that loaded ``new`` (``rep``: the load run's report)."""
    report.run_id = rep.run_id
    report.status = "done"
    report.files = _ingested(new, rep.skipped)
    report.records = rep.records
    report.batches, report.bytes, report.resumed_records = rep.batches, rep.bytes, rep.resumed_records
    report.skipped = [_named(f) for f in rep.skipped]
    report.seconds = round(time.perf_counter() - t_start, 4)
    report.mb_per_s = round(report.bytes / report.seconds / 1e6, 2) if report.seconds > 0 else 0.0
    return report


def _ingested(new: DirListing, skipped: list[dict]) -> list[dict]:
    """The files of the plan that were stored (one document each): all but the skipped ones."""
    bad = {f["path"] for f in skipped}
    prefix = os.path.join(new.directory, "")
    return [{"name": path[len(prefix) :], "records": 1} for _id, path in new if path not in bad]


def _named(f: dict) -> dict:
    return {"name": os.path.basename(f["path"]), "path": f["path"], "reason": f["reason"]}


def _still_bad(m: mf.Manifest | None, directory: str, new, skipped: list, on_bad_file: str):
    """The new files the last ingest run (or `load DIR`) of this directory skipped as bad
    are parsed here first: still bad -> skipped (or, fail, BadFileError) before anything is
    written, so that a bad file left in the directory does not make every run commit an
    empty run."""
    last: SourceRun | None = None
    for r in runs.recent(m) if m is not None else ():
        if isinstance(r, SourceRun) and r.source == directory and r.status == "done":
            last = r
            break
    was_bad = {f["path"] for f in last.skipped or [] if isinstance(f, dict)} if last is not None else set()
    if not was_bad:
        return new, skipped
    retry = [e for e in new if e[1] in was_bad]
    if not retry:
        return new, skipped
    _, bad = parse_json_files(retry, on_bad_file)  # fail: raises BadFileError at the first
    if not bad:
        return new, skipped
    gone = {f.path for f in bad}
    return (
        new.take([j for j, (_i, p) in enumerate(new) if p not in gone]),
        sorted(skipped + [f.to_dict() for f in bad], key=lambda f: f["path"]),
    )


class _Comparer:
    """``stored_duplicates``' compare: reads the files of stored ids and compares them with
    the stored documents; returns the changed ones as FileErrors, records the equal ones."""

    def __init__(self, uri: str, equal: list[int]):
        self.uri, self.equal = uri, equal
        self.ds: Dataset | None = None

    def __call__(self, found: list[tuple[int, str]]) -> list[FileError]:
        if self.ds is None:
            self.ds = Dataset(self.uri)
        errors: list[FileError] = []
        for a in range(0, len(found), _COMPARE_CHUNK):
            chunk = found[a : a + _COMPARE_CHUNK]
            batch, bad = parse_json_files(chunk, "skip")
            errors.extend(
                FileError(e.path, f"already ingested, but its content changed: {e.reason}; " + CHANGED_HINT)
                for e in bad
            )
            stored, missing = self.ds.get_many(batch.ids.tolist())
            if missing:  # cannot be: the ids were found stored under the same lock
                raise RuntimeError(f"internal error: stored ids {missing[:5]} could not be read back")
            path_of = dict(chunk)
            changed = _differences(batch, stored)
            for j, why in changed:
                errors.append(
                    FileError(
                        path_of[int(batch.ids[j])],
                        f"already ingested, but its content changed ({why}); " + CHANGED_HINT,
                    )
                )
            keep = np.ones(len(batch), bool)
            keep[[j for j, _ in changed]] = False
            self.equal.extend(batch.ids[keep].tolist())
        return errors

    def close(self) -> None:
        if self.ds is not None:
            self.ds.close()


def _differences(new, stored) -> list[tuple[int, str]]:
    """(position, what differs) of the documents of two DocBatches (same ids, same order)."""
    created = new.created_at != stored.created_at
    lengths = new.lengths != stored.lengths
    same_len = np.flatnonzero(~lengths)
    text = np.zeros(len(new), bool)
    if len(same_len):  # compare the texts of equal length at once
        a, z = new.take(same_len), stored.take(same_len)
        neq = np.concatenate([[0], np.cumsum(a.text != z.text)])
        text[same_len] = neq[a.offsets[1:]] != neq[a.offsets[:-1]]
    text |= lengths
    out = []
    for j in np.flatnonzero(created | text).tolist():
        what = []
        if created[j]:
            what.append(f"created_at {int(stored.created_at[j])} -> {int(new.created_at[j])}")
        if text[j]:
            what.append(
                f"text of {int(stored.lengths[j])} -> {int(new.lengths[j])} bytes differs"
                if lengths[j]
                else "text differs"
            )
        out.append((j, ", ".join(what)))
    return out
