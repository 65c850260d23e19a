"""`ingest`: load each new file of a directory exactly once, in name order.

    bulkload ingest DATASET --from DIR [--pattern '*.bin'] [--on-bad-file fail|skip]

(This module: files of fixed-size records. A documents dataset - layout ``docs``, given
by ``--layout docs`` or the dataset's manifest - is ingested by docs_ingest.py.)

A file is identified by its name (relative to DIR), size and content hash (xxh3-128 of
the whole file); ``manifest.files`` lists every file ingested so far. One run:

1. lists DIR (names matching the pattern, dotfiles excluded: write a file under a
   temporary dotted name and rename it when complete), in name order;
2. with the dataset locked: files already ingested and unchanged are skipped (size and
   mtime equal, or else the content hash equal); a file that changed since it was
   ingested is a bad file ("refused"); new files are hashed - a file whose size or
   mtime changes meanwhile is still being written and is left for the next run; a
   file whose size is not a whole number of records, that cannot be read, or that
   vanishes is a bad file;
3. loads the new files as one plan (one segment per file, consecutive batch seqs) and
   commits each file as soon as all its batches are durable (commit.py): a file counts
   as ingested exactly when its batches are committed, in the same manifest write;
4. bad files: ``fail`` (default) loads the files before the first bad one, then exits 1
   naming it (and the byte offset of a partial record); ``skip`` reports it and loads
   the others. A bad file is looked at again by every run until it is fixed or removed.

A crashed run is resumed by the next one: first the rest of its plan (files still
unchanged), keeping the batches that were already durable, then any newer files. So the
dataset ends byte-identical to an uninterrupted run. A run with nothing to do writes
nothing (a cron job every minute does not grow the manifest).
"""

from __future__ import annotations

import fnmatch
import os
import time
from dataclasses import asdict, dataclass, field

from ..errors import (
    ChangedInputError,
    InputError,
    Interrupted,
    MissingPathError,
    PartialRecordError,
    SourceVanishedError,
    UnreadableInputError,
    UsageError,
    WorkerError,
)
from ..infra import faults, interrupts
from ..infra.lock import DatasetLock
from ..kinds import kind_for
from ..maintain.garbage import start_writing
from ..model import manifest as mf
from ..model import runs
from ..model.layouts import get_layout
from ..sources import FileSource, hash_file, refuse_pseudo_file
from ..stores.health import require_shards
from ..stores.spec import parse_dataset_uri
from . import replace as replace_mod
from .commit import Committer, Unit, checkpoint_settings, execute, log, resume_points
from .worker import Segment

BAD_FILE_POLICIES = ("fail", "skip")


@dataclass
class IngestReport:
    dataset: str
    directory: str
    pattern: str
    run_id: str | None
    status: str  # done | nothing-to-do | failed
    files: list[dict] = field(default_factory=list)  # ingested by this run: name, records, bytes
    skipped: list[dict] = field(default_factory=list)  # bad files: name, reason
    deferred: list[dict] = field(default_factory=list)  # still being written: name, reason
    already: int = 0  # files present that were ingested before
    records: int = 0
    batches: int = 0
    bytes: int = 0
    resumed_records: int = 0
    seconds: float = 0.0
    mb_per_s: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Candidate:
    name: str
    path: str
    size: int
    mtime_ns: int
    xxh3: str | None = None


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def list_dir(directory: str, pattern: str) -> list[Candidate]:
    out = []
    try:
        names = os.listdir(directory)
    except PermissionError:
        raise MissingPathError(f"directory {directory} is not readable (permission denied)") from None
    for name in sorted(names):
        if name.startswith(".") or not fnmatch.fnmatchcase(name, pattern):
            continue
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        st = _stat(path)
        if st is not None:
            out.append(Candidate(name, path, *st))
    return out


def ingest(dataset: str, from_dir: str, *, pattern: str = "*", on_bad_file: str = "fail",
           layout: str | None = None, format: str | None = None, compression: str | None = None,
           shards: int | None = None, workers: int | None = None, batch_records: int | None = None,
           progress: str = "none", checkpoint_seconds: float | None = None,
           checkpoint_bytes: int | None = None):
    """Ingest the new files of ``from_dir``; an IngestReport (documents: DocsIngestReport)."""
    from .run import check_compatible, fresh_manifest, prepare_root, resolve_options

    t_start = time.perf_counter()
    fault = faults.from_env()
    if on_bad_file not in BAD_FILE_POLICIES:
        raise UsageError(f"--on-bad-file must be fail or skip, not {on_bad_file!r}")
    if not pattern:
        raise UsageError("--pattern must not be empty (use '*' for every file)")
    directory = os.path.abspath(from_dir)
    if not os.path.isdir(directory):
        raise MissingPathError(f"directory {from_dir} does not exist (--from); create it or fix the path")
    refuse_pseudo_file(from_dir)
    spec = parse_dataset_uri(dataset)
    existing = mf.load_manifest(spec.root) if mf.exists(spec.root) else None
    layout_obj, fmt, comp, k, w_req, b, spec = resolve_options(
        spec, existing, layout_obj=get_layout(layout) if layout else None, format=format,
        compression=compression, shards=shards, workers=workers, batch_records=batch_records)
    ckpt = checkpoint_settings(checkpoint_seconds, checkpoint_bytes)
    kind = kind_for(layout_obj, fmt, comp)
    if kind.own_ingest:  # e.g. documents: <id>.json files (loader/docs/ingest.py)
        return kind.ingest_directory(spec, directory, pattern=pattern, layout_obj=layout_obj, fmt=fmt, comp=comp,
                                     k=k, w_req=w_req, b=b, b_given=batch_records is not None,
                                     on_bad_file=on_bad_file, progress=progress, ckpt=ckpt, fault=fault,
                                     t_start=t_start)
    rs = layout_obj.record_size
    report = IngestReport(spec.uri, directory, pattern, None, "nothing-to-do")
    listing = list_dir(directory, pattern)

    prepare_root(spec)
    with DatasetLock(spec.root) as lock:
        lock.set_job(f"ingest {directory}/{pattern}")
        m = mf.load_manifest(spec.root) if mf.exists(spec.root) else None
        start_writing(spec, m)
        sib = replace_mod.sibling_root(spec)
        if os.path.isdir(sib):
            log(progress, f"discarding an unfinished --replace of {spec.uri} ({sib})")
            replace_mod.discard(sib)
        if m is not None:
            check_compatible(m, spec, layout_obj, fmt, comp, k)
        require_shards(spec, m)
        opts = dict(format=fmt, compression=comp, layout=layout_obj.name, shards=k)

        # --- the interrupted run's plan, as far as its files are unchanged ------------------
        prev, kept_plan = _resumable(m, directory, pattern, opts) if m is not None else (None, [])
        if prev is not None:
            b = prev["batch_records"]
        planned_names = {e["name"] for e in kept_plan}

        # --- classify the directory -----------------------------------------------------------
        bad: list[tuple[Candidate, InputError]] = []
        new: list[Candidate] = []
        for c in listing:
            if c.name in planned_names:
                continue
            done = m.files.get(c.name) if m is not None else None
            if done is not None:
                err = _changed(c, done)
                if err is None:
                    report.already += 1
                else:
                    bad.append((c, err))
                continue
            try:
                c.xxh3, nread = hash_file(c.path)
            except (SourceVanishedError, UnreadableInputError) as e:
                bad.append((c, e))
                continue
            faults.hit("hashed")
            now = _stat(c.path)
            if now is None:
                bad.append((c, SourceVanishedError(f"{c.path}: the file vanished while being read; "
                                                   "nothing from it was committed")))
                continue
            if now != (c.size, c.mtime_ns) or nread != c.size:
                report.deferred.append({"name": c.name, "reason": f"still being written (size {c.size} -> "
                                        f"{now[0]} bytes during this run); left for the next run"})
                continue
            if c.size % rs:
                bad.append((c, PartialRecordError(c.path, c.size - c.size % rs, rs, c.size % rs)))
                continue
            new.append(c)

        first_bad = None
        if bad and on_bad_file == "fail":
            first_bad = min(bad, key=lambda x: x[0].name)
            new = [c for c in new if c.name < first_bad[0].name]
        else:
            for c, e in bad:
                report.skipped.append({"name": c.name, "reason": str(e)})
                log(progress, f"skipping bad file {c.name}: {e}", level="warning", file=c.name, event="skipped")
        for d in report.deferred:
            log(progress, f"leaving {d['name']} for the next run: it is still being written", file=d["name"],
                event="deferred")

        if not kept_plan and not new:
            if first_bad is not None:
                raise first_bad[1]
            report.seconds = round(time.perf_counter() - t_start, 4)
            log(progress, f"ingest {directory}: nothing new ({report.already} files already ingested)",
                event="nothing-to-do", already=report.already)
            return report

        # --- the run ----------------------------------------------------------------------------
        if m is None or not m.batches:
            m = fresh_manifest(m, spec, layout_obj, fmt, comp, k, b)
        nworkers = max(1, min(w_req, k))
        excluded: set[str] = set()
        while True:
            plan = _plan(kept_plan, [c for c in new if c.name not in excluded], m, b, rs)
            if prev is not None:
                run = prev
                runs.restart(run)
            else:
                run = mf.new_run("ingest", source=f"{directory}/{pattern}", directory=directory,
                                 pattern=pattern, workers=nworkers)
                run.update(batch_records=b, resumable=True, **opts)
                m.runs.append(run)
            run.update(plan=plan, first_seq=m.next_seq, first_record=m.next_record, workers=nworkers)
            report.run_id = run["id"]
            gone = runs.supersede(m, run, by=run["id"])
            if gone:
                log(progress, f"discarding the unfinished run(s) {', '.join(gone)}", superseded=gone)
            segments = [Segment(FileSource(os.path.join(directory, e["name"])), e["records"], e["first_seq"],
                                e["first_record"]) for e in plan]
            if prev is not None:
                res, keep = resume_points(spec, segments, b, k, m.next_seq, run.get("pending") or [])
                report.resumed_records = sum(r[3] for r in keep)
                log(progress, f"resuming ingest run {run['id']}: {len(kept_plan)} file(s) of its plan unchanged, "
                    f"{len(keep)} durable batches kept", run=run["id"], event="resume")
            else:
                res, keep = (), []
            log(progress, f"ingest {len(plan)} file(s) from {directory} into {spec.uri}: run {run['id']}",
                run=run["id"], files=[e["name"] for e in plan], event="start")
            units = [_unit(e, b, run["id"], directory) for e in plan]
            committer = Committer(spec.root, m, run, units, keep)
            late = None  # an error after every file was committed
            try:
                committer.save()
                receipts = execute(spec, m, run, committer, layout=layout_obj, segments=segments, resume=res,
                                   k=k, b=b, nworkers=nworkers, label="ingest", progress=progress,
                                   checkpoint=ckpt, fault=fault)
            except BaseException as e:
                _collect(report, committer, run)
                if committer.complete:  # every file was committed before the error
                    log(progress, f"run {run['id']}: every file was committed before this error: {e}",
                        level="warning")
                    receipts, late = [], e
                    break
                name, err = _bad_input(e, directory) if isinstance(e, WorkerError) else (None, None)
                if name is None or on_bad_file == "fail" or name in excluded:
                    e = runs.stop(run, err or e, _committed(report, committer))
                    committer.save_quietly()
                    raise e from None
                # skip it and go on with the files after it (renumbered: nothing kept)
                report.skipped.append({"name": name, "reason": str(err)})
                log(progress, f"skipping bad file {name}: {err}", level="warning", file=name, event="skipped")
                excluded.add(name)
                committed = {u.name for u in committer.committed_units}
                new = listing_for(plan, directory, committed, excluded)
                kept_plan = []  # the rest is renumbered: its durable batches cannot be reused
                prev = run
                run["pending"] = []
                continue
            break

        finished = lambda: (f"run {run['id']} had finished: {len(report.files)} file(s) ({report.records:,} "
                            "records) were committed")
        with interrupts.held(finished):  # the commit is written whole; a stop signal waits for it
            faults.hit("commit")
            committer.finish(receipts)
            _collect(report, committer, run)
            if committer.stopped:
                for u in units[committer.next:]:
                    report.deferred.append({"name": u.name, "reason": committer.stopped if u is units[committer.next]
                                            else "after a file that changed while being loaded; left for the next run"})
            seconds = time.perf_counter() - t_start
            status = "failed" if first_bad is not None else "done"
            runs.finish(run, "done", seconds=round(seconds, 3), files=len(report.files),
                        skipped=[s["name"] for s in report.skipped], deferred=[d["name"] for d in report.deferred])
            if first_bad is not None:
                runs.fail(run, first_bad[1])
                run.pop("pending", None)
                run["resumable"] = False
            m.save(spec.root)
        report.status = status
        report.seconds = round(seconds, 4)
        report.mb_per_s = round(report.bytes / seconds / 1e6, 2) if seconds > 0 else 0.0
        log(progress, f"ingested {len(report.files)} file(s), {report.records:,} records into {spec.uri} "
            f"(run {run['id']})", run=run["id"], stage="ingest", files=len(report.files), records=report.records,
            event="done")
        if isinstance(late, KeyboardInterrupt):
            late = Interrupted.of(late)
            late.outcome = finished()
            raise late from None
        if first_bad is not None:
            raise first_bad[1]
        return report


def _committed(report: IngestReport, committer: Committer) -> str:
    """What of this run is committed, for the message of an error or signal that stops it
    (after ``_collect``): files and records, and what to do."""
    total = len(report.files) + len(committer.units) - committer.next
    if not report.files:
        return f"none of its {total} file(s) was committed; re-run the same command to resume"
    return (f"{len(report.files)} of {total} file(s) ({report.records:,} records) were committed; re-run the "
            "same command to load the rest")


def listing_for(plan: list[dict], directory: str, committed: set[str], excluded: set[str]) -> list[Candidate]:
    """The plan's files not yet committed, as candidates for a new plan (same identity)."""
    out = []
    for e in plan:
        if e["name"] in committed or e["name"] in excluded:
            continue
        out.append(Candidate(e["name"], os.path.join(directory, e["name"]), e["size"], e["mtime_ns"], e["xxh3"]))
    return out


def _collect(report: IngestReport, committer: Committer, run: dict) -> None:
    seen = {f["name"] for f in report.files}
    for u in committer.committed_units:
        if u.name not in seen:
            report.files.append({"name": u.name, "records": u.records, "batches": u.nbatches,
                                 "first_record": u.first_record})
            report.records += u.records
            report.batches += u.nbatches
    if report.files:
        rs = committer.m.layout_obj.record_size
        report.bytes = report.records * rs


def _plan(kept: list[dict], new: list[Candidate], m: mf.Manifest, b: int, rs: int) -> list[dict]:
    """Number the files: the kept part of an interrupted plan first, then the new files."""
    plan = [dict(e) for e in kept]
    seq, first = m.next_seq, m.next_record
    if plan:
        last = plan[-1]
        seq, first = last["first_seq"] + -(-last["records"] // b), last["first_record"] + last["records"]
    for c in new:
        n = c.size // rs
        plan.append({"name": c.name, "size": c.size, "mtime_ns": c.mtime_ns, "xxh3": c.xxh3, "records": n,
                     "first_seq": seq, "first_record": first})
        seq += -(-n // b)
        first += n
    return plan


def _unit(e: dict, b: int, run_id: str, directory: str) -> Unit:
    path = os.path.join(directory, e["name"])

    def check(u: Unit) -> str | None:
        now = _stat(path)
        if now != (e["size"], e["mtime_ns"]):
            return (f"{e['name']} changed while it was being loaded (size {e['size']} -> "
                    f"{now[0] if now else 'gone'}); left for the next run")
        return None

    def on_commit(m: mf.Manifest, u: Unit) -> None:
        m.files[e["name"]] = {"size": e["size"], "mtime_ns": e["mtime_ns"], "xxh3": e["xxh3"],
                              "records": e["records"], "first_record": e["first_record"],
                              "first_seq": e["first_seq"], "batches": u.nbatches, "run": run_id,
                              "ingested": time.time()}

    return Unit(e["name"], e["first_seq"], -(-e["records"] // b), e["first_record"], e["records"],
                on_commit=on_commit, check=check)


def _changed(c: Candidate, done: dict) -> ChangedInputError | None:
    """None if the file is the one ingested before; else the error refusing it."""
    if c.size == done["size"]:
        if c.mtime_ns == done.get("mtime_ns"):
            return None
        try:
            h, _ = hash_file(c.path)
        except InputError:
            return None  # it vanished or became unreadable: it was ingested, nothing to do
        if h == done["xxh3"]:
            return None
        what = "its content changed (same size, other xxh3)"
    else:
        what = f"its size changed ({done['size']} -> {c.size} bytes)"
    return ChangedInputError(
        f"{c.path}: this file was already ingested (run {done.get('run')}) but {what}; an ingested file "
        "must not change - write new data to a new file name, or move this one away")


def _resumable(m: mf.Manifest, directory: str, pattern: str, opts: dict) -> tuple[dict | None, list[dict]]:
    """The last unfinished ingest run of this directory and the part of its plan to redo."""
    prev = None
    for r in reversed(runs.current(m)):
        if r.get("kind") == "ingest" and r.get("directory") == directory and r.get("pattern") == pattern:
            prev = r
            break
    if prev is None or prev.get("status") not in runs.UNFINISHED or not prev.get("resumable"):
        return None, []
    if not runs.options_match(prev, **opts) or runs.compacted_since(m, prev):
        return None, []
    rest = [e for e in prev.get("plan") or []
            if not (e["name"] in m.files and m.files[e["name"]].get("run") == prev["id"])]
    if not rest or rest[0]["first_seq"] != m.next_seq or rest[0]["first_record"] != m.next_record:
        return None, []
    kept = []
    for e in rest:
        path = os.path.join(directory, e["name"])
        st = _stat(path)
        if st is None or st[0] != e["size"]:
            break
        if st[1] != e["mtime_ns"]:
            try:
                h, _ = hash_file(path)
            except InputError:
                break
            if h != e["xxh3"]:
                break
            e = dict(e, mtime_ns=st[1])
        kept.append(e)
    return prev, kept


def _bad_input(e: WorkerError, directory: str) -> tuple[str | None, InputError | None]:
    """A worker failed on a source file: (its name, the input error it raised)."""
    err = e.raised(PartialRecordError, SourceVanishedError, UnreadableInputError)
    if err is None:
        return None, None
    path = str(err).split(":", 1)[0]  # these errors name their file first
    name = os.path.relpath(path, directory) if path.startswith(directory + os.sep) else None
    return name, err
