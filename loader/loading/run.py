"""`load`: one run that appends a source's records to a dataset, all or nothing.

1. parse and check everything (source, dataset, layout, format, counts) before touching
   data, and refuse a load whose records cannot fit on the filesystem (space.py);
2. lock the dataset (one writing job at a time) and read its manifest;
3. find the source's previous run: finished -> nothing to do; interrupted -> resume it
   (same plan, keep its durable batches); otherwise plan a new run. A file is planned by
   extent (file_runs.py): a grown file loads only its new records, a changed one is
   refused; a missing or damaged shard stops the run before anything is written
   (integrity.py);
4. run the workers (they checkpoint durable batches as they go, see commit.py);
5. commit: list the run's batches in the manifest, atomically (a file is fingerprinted
   again first: if the bytes loaded changed meanwhile, nothing is committed).

``--replace`` does the same into a sibling directory and swaps it in (replace.py).
"""

from __future__ import annotations

import operator
import os
import resource
import time
from dataclasses import asdict, dataclass, field

from ..errors import (
    BulkloadError,
    ChangedInputError,
    DatasetMismatchError,
    Interrupted,
    ManifestError,
    MissingPathError,
    NoSpaceError,
    NotWritableError,
    UsageError,
    WorkerError,
)
from ..infra import faults, interrupts, space
from ..infra.lock import DatasetLock, refuse_nested
from ..kinds import kind_for
from ..maintain.garbage import held_tables, start_writing
from ..model import manifest as mf
from ..model import runs
from ..model.layouts import Layout, get_layout
from ..serializers import COMPRESSIONS, FORMATS
from ..sources import SourcePlan, parse_source
from ..stores.base import MAX_SHARDS, MEM_ROOT, StoreSpec, parse_dataset_uri
from ..stores.health import require_shards
from . import replace as replace_mod
from .commit import Committer, Unit, checkpoint_settings, execute, log, resume_points
from .file_runs import changed_while_loading, plan_file_run
from .stream import run_stream
from .worker import Segment

DEFAULT_BATCH_RECORDS = 10_000


@dataclass
class LoadReport:
    dataset: str
    source: str
    run_id: str
    records: int
    bytes: int
    stored_bytes: int
    batches: int
    shards: int
    workers: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    format: str
    compression: str
    layout: str
    stages: dict = field(default_factory=dict)
    peak_rss_bytes: int = 0
    # loaded | resumed (an interrupted run finished) | already-loaded | appended (a file grew
    # since it was loaded: only its new records were, see file_runs.py)
    status: str = "loaded"
    written_records: int = 0  # written by this job (resumed: without the kept batches)
    resumed_records: int = 0  # kept from the interrupted run's durable batches
    map_grows: int = 0  # LMDB map growths during the run
    # documents (layout docs): `records` counts documents and `bytes` their text; bad
    # files left out by --on-bad-file skip, with the reason: [{"path", "reason"}]
    skipped: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


MAX_WORKERS = 1024
#: most bytes of records in one batch (whatever the format): a batch is produced, framed
#: and written whole, QUEUE_DEPTH at a time per worker, so this bounds a worker's memory
MAX_BATCH_BYTES = 256 << 20


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def check_count(option: str, value, lo: int, hi: int) -> int | None:
    """``value`` (None: not given) if it is a whole number in lo..hi, else UsageError
    naming the option: 0, negative, huge and non-integer values never fall back to a default."""
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        n = operator.index(value)
    except TypeError:
        n = None
    if n is None or not lo <= n <= hi:
        raise UsageError(f"{option} must be at least {lo:,} and at most {hi:,} (a whole number), not {value!r}")
    return n


def max_batch_records(kind) -> int:
    """Most records per batch of a record kind: the format's own limit and MAX_BATCH_BYTES."""
    from ..serializers import get_serializer

    limit = MAX_BATCH_BYTES // max(1, kind.record_bytes())
    if not kind.keyed:
        limit = min(limit, get_serializer(kind.format, kind.layout, kind.compression).max_records or limit)
    return limit


def prepare_root(spec: StoreSpec) -> bool:
    """Create the dataset directory (True if this call made it); its parent must exist and
    be writable, and must not lie inside another dataset."""
    refuse_nested(spec.root)
    if spec.scheme == "mem":
        os.makedirs(MEM_ROOT, exist_ok=True)
    parent = os.path.dirname(spec.root.rstrip("/")) or "/"
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise UsageError(f"{parent} is not a directory (needed for dataset {spec.uri})")
    if not os.path.isdir(parent):
        raise MissingPathError(f"directory {parent} does not exist (needed for dataset {spec.uri}); "
                               f"create it first: mkdir -p {parent}")
    created = not os.path.isdir(spec.root)
    if created:
        try:
            os.mkdir(spec.root)
        except PermissionError:
            raise NotWritableError(f"cannot create dataset {spec.uri}: directory {parent} is not writable; "
                                   "choose a writable location") from None
        except FileExistsError:
            raise UsageError(f"dataset path {spec.root} exists and is not a directory") from None
        except OSError as e:
            raise NotWritableError(f"cannot create dataset {spec.uri}: {e.strerror}; "
                                   "choose a writable location") from None
    if not os.access(spec.root, os.W_OK):
        raise NotWritableError(f"dataset directory {spec.root} is not writable; fix its permissions "
                               "or choose another location")
    return created


def check_compatible(m: mf.Manifest, spec: StoreSpec, layout: Layout, fmt: str, compression: str,
                     shards: int) -> None:
    if not m.batches:
        return  # an empty dataset can be redefined
    wrong = []
    if m.layout["name"] != layout.name or m.layout["fields"] != layout.to_dict()["fields"]:
        wrong.append(f"layout {m.layout['name']!r} (not {layout.name!r})")
    if m.format != fmt:
        wrong.append(f"format {m.format!r} (not {fmt!r})")
    if m.compression != compression:
        wrong.append(f"compression {m.compression!r} (not {compression!r})")
    if m.shards != shards:
        wrong.append(f"{m.shards} shards (not {shards})")
    if m.scheme != spec.scheme:
        wrong.append(f"store {m.scheme} (not {spec.scheme})")
    if wrong:
        raise DatasetMismatchError(
            f"dataset {spec.uri} already holds records with " + ", ".join(wrong)
            + "; load into a new dataset, or drop the conflicting option to append"
        )


def resolve_options(spec: StoreSpec, existing: mf.Manifest | None, *, layout_obj: Layout | None,
                    format: str | None, compression: str | None, shards: int | None,
                    workers: int | None, batch_records: int | None) -> tuple:
    """explicit > URI > existing dataset > defaults; returns (layout, fmt, comp, k, w, b, spec)."""
    if layout_obj is None:
        layout_obj = existing.layout_obj if existing is not None else get_layout("scidb96")
    has = existing is not None and bool(existing.batches)
    kind = kind_for(layout_obj)
    fmt = format or (existing.format if has else kind.default_format)
    if fmt not in FORMATS + kind.formats:
        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(kind.formats)}")
    comp = compression or (existing.compression if has else kind.default_compression)
    if comp not in COMPRESSIONS:
        raise UsageError(f"unknown compression {comp!r}; use one of {', '.join(kind.compressions)}")
    kind.check(layout_obj, fmt, comp)  # rejects unsupported combinations
    shards = check_count("--shards", shards, 1, MAX_SHARDS)
    workers = check_count("--workers", workers, 1, MAX_WORKERS)
    batch_records = check_count("--batch-records", batch_records, 1,
                                max_batch_records(kind_for(layout_obj, fmt, comp)))
    if shards is not None and spec.shards is not None and shards != spec.shards:
        raise UsageError(f"--shards {shards} contradicts ?shards={spec.shards} in {spec.uri}")
    k = shards or spec.shards or (existing.shards if has else None) or min(default_workers(), MAX_SHARDS)
    w_req = default_workers() if workers is None else workers
    b = batch_records if batch_records is not None else (existing.batch_records if has else DEFAULT_BATCH_RECORDS)
    return layout_obj, fmt, comp, k, w_req, b, spec.with_shards(k)


def fresh_manifest(m: mf.Manifest | None, spec: StoreSpec, layout_obj: Layout, fmt: str, comp: str,
                   k: int, b: int) -> mf.Manifest:
    """A manifest for an empty dataset with these options (keeping its id and history)."""
    keep = {"runs": m.runs, "dataset_id": m.dataset_id, "created": m.created, "extra": m.extra} if m else {}
    return mf.Manifest(layout=layout_obj.to_dict(), format=fmt, compression=comp, scheme=spec.scheme,
                       shards=k, batch_records=b, **keep)


def load(source: str, dataset: str, *, layout: str | None = None, format: str | None = None,
         compression: str | None = None, shards: int | None = None, workers: int | None = None,
         batch_records: int | None = None, progress: str = "none", stdin=None,
         new_run: bool = False, replace: bool = False, checkpoint_seconds: float | None = None,
         checkpoint_bytes: int | None = None, on_bad_file: str = "fail") -> LoadReport:
    """Load the records of ``source`` into ``dataset``; returns the run's report.

    Appends to an existing dataset. Re-running the same source (same URI and content
    fingerprint) resumes its interrupted run, or loads nothing if it already finished,
    unless ``new_run``. ``replace`` starts the dataset over, atomically.

    Documents (``layout="docs"``, or ``gen://docs?...``): ``source`` may be a directory
    of ``<id>.json`` files; ``on_bad_file`` ``fail`` (nothing is loaded, BadFileError
    names the file and reason) or ``skip`` (the report lists skipped files).
    """
    t_start = time.perf_counter()
    fault = faults.from_env()
    spec = parse_dataset_uri(dataset)
    existing = _existing_manifest(spec.root, replace)

    layout_obj = get_layout(layout) if layout else None
    if layout_obj is None and existing is not None and existing.layout.get("variable_length") \
            and not source.startswith("gen://"):
        layout_obj = existing.layout_obj  # a directory into a docs dataset
    if on_bad_file not in ("fail", "skip"):
        raise UsageError(f"--on-bad-file must be fail or skip, not {on_bad_file!r}")
    src = parse_source(source, layout_obj, on_bad_file)
    if layout_obj is None and src.layout_name is not None:
        layout_obj = get_layout(src.layout_name)
    layout_obj, fmt, comp, k, w_req, b, spec = resolve_options(
        spec, existing, layout_obj=layout_obj, format=format, compression=compression, shards=shards,
        workers=workers, batch_records=batch_records)
    # count (a partial trailing record fails here, before any write), fingerprint, list a directory
    planned = src.plan(layout_obj)
    ckpt = checkpoint_settings(checkpoint_seconds, checkpoint_bytes)
    created = prepare_root(spec)
    try:
        _check_space(spec, existing, planned, kind_for(layout_obj, fmt, comp), new_run=new_run, replace=replace)
    except NoSpaceError:
        if created:
            os.rmdir(spec.root)  # nothing is left of a refused load
        raise
    job = dict(planned=planned, layout_obj=layout_obj, fmt=fmt, comp=comp, k=k,
               w_req=w_req, b=b, b_given=batch_records is not None, new_run=new_run,
               progress=progress, stdin=stdin, ckpt=ckpt, fault=fault, t_start=t_start)

    with DatasetLock(spec.root) as lock:
        lock.set_job(f"load {source}" + (" --replace" if replace else ""))
        m = _existing_manifest(spec.root, replace)
        start_writing(spec, m)
        sib = replace_mod.sibling_spec(spec)
        if not replace:
            if os.path.isdir(sib.root):
                log(progress, f"discarding an unfinished --replace of {spec.uri} ({sib.root})")
                replace_mod.discard(sib.root)
            if m is not None:
                check_compatible(m, spec, layout_obj, fmt, comp, k)
            return load_locked(spec, m, replace=False, replaces=None, **job)

        # --- --replace: build beside, then swap ------------------------------------------
        old_id = m.dataset_id if m is not None else None
        sm = _existing_manifest(sib.root, replace=True)  # a damaged one is built again
        if sm is not None:
            r = sm.runs[-1] if sm.runs else None
            if not (r and r.get("replace") and r.get("replaces") == old_id
                    and r.get("source") == planned.uri and r.get("fingerprint") == planned.fingerprint
                    and planned.fingerprint is not None and not new_run):
                sm = None
        if sm is None:
            replace_mod.discard(sib.root)
        prepare_root(sib)
        with DatasetLock(sib.root):
            if sm is None:
                sm = fresh_manifest(None, sib, layout_obj, fmt, comp, k, b)
                sm.runs = [dict(r) for r in (m.runs if m else [])]
            else:
                runs.mark_interrupted(sm)
            report = load_locked(sib, sm, replace=True, replaces=old_id, **job)
            replace_mod.swap_in(sib.root, spec.root)
            replace_mod.discard(sib.root)  # the old dataset
        report.dataset = spec.uri
        log(progress, f"replaced {spec.uri}: it now holds {report.records:,} records", dataset=spec.uri,
            run=report.run_id, event="replaced")
        return report


def _existing_manifest(root: str, replace: bool) -> mf.Manifest | None:
    """The manifest at ``root``, or None; an invalid one raises ManifestError, except for
    ``--replace``, which starts the dataset over without reading it."""
    if not mf.exists(root):
        return None
    try:
        return mf.load_manifest(root)
    except ManifestError:
        if replace:
            return None
        raise


def _check_space(spec: StoreSpec, existing: mf.Manifest | None, planned: SourcePlan, kind, *,
                 new_run: bool, replace: bool) -> None:
    """Refuse up front (space.py) a load whose records still to write cannot fit: the
    source's records, less those of its interrupted run that are durable (read without the
    lock: a figure, not a decision about the run), none if it was already loaded."""
    m = existing
    if replace:
        sib = replace_mod.sibling_root(spec)
        try:
            m = mf.load_manifest(sib) if mf.exists(sib) else None
        except BulkloadError:
            m = None
    src = planned.source
    if not src.replayable:
        return  # a stream: its size is not known
    prev = runs.last_matching(m, "load", src.uri, planned.fingerprint) if m is not None and not new_run else None
    todo = planned.total or 0
    if src.by_extent and m is not None:
        try:
            fplan = plan_file_run(m, src, kind.layout, new_run=new_run, considered=lambda r: True,
                                  resumable=lambda r: True)
            todo, prev = fplan.count, fplan.prev if fplan.status == "resume" else None
        except BulkloadError:
            pass  # refused under the lock, with its own message
    if prev is not None:
        todo = 0 if prev.get("status") == "done" else todo - sum(r[3] for r in prev.get("pending") or [])
    space.check_space(spec.root, kind.min_stored_bytes(src, todo),
                      f"loading {todo:,} records of {src.uri} into {spec.uri}")


def load_locked(spec: StoreSpec, m: mf.Manifest | None, *, planned: SourcePlan, layout_obj, fmt, comp,
                 k, w_req, b, b_given, new_run, progress, stdin, ckpt, fault, t_start,
                 replace: bool, replaces: str | None, mode: str = "load", on_commit=None) -> LoadReport:
    """The load proper, with the dataset locked. With ``replace``, ``spec``/``m`` are the
    sibling being built and ``replaces`` the id of the dataset it will replace.

    ``mode="ingest"`` (documents, loader/docs/ingest.py): the run is an ``ingest`` run;
    the caller has already left out the ids stored in the dataset (same lock) and passes
    only new ones; a finished run with the same fingerprint does not mean "already
    loaded" (the caller decided what is new). ``on_commit(m, unit, run)`` is called when
    the run is committed, just before the manifest write that commits it."""
    kind = kind_for(layout_obj, fmt, comp)
    require_shards(spec, m)  # a missing or damaged shard stops every writer before it writes
    src, total, fp, skipped = planned.source, planned.total, planned.fingerprint, list(planned.skipped)
    opts = dict(format=fmt, compression=comp, layout=layout_obj.name, shards=k)
    fplan = None  # a file: the extent this run loads (file_runs.py)
    if src.by_extent and mode == "load":
        fplan = plan_file_run(m, src, layout_obj, new_run=new_run,
                              considered=lambda r: not replace or _replaces(r, replaces),
                              resumable=lambda r: runs.load_resumable(m, r, **opts))
        total, fp = fplan.count, fplan.fingerprint
        prev = fplan.prev if fplan.status in ("resume", "already-loaded") else None
        if fplan.status == "appended":
            log(progress, f"{src.uri} grew since run {fplan.prev['id']} loaded its first {fplan.offset:,} records: "
                f"loading the {fplan.count:,} new ones", run=fplan.prev["id"], source=src.uri, event="appended")
    else:
        prev = runs.last_matching(m, mode, src.uri, fp) if m is not None else None
        if replace and prev is not None and not _replaces(prev, replaces):
            prev = None  # history of the dataset being replaced
        if mode == "ingest" and prev is not None and prev.get("status") == "done":
            prev = None  # only an unfinished ingest run is taken up again
    if prev is not None and prev.get("status") == "done" and not new_run:
        if replace:  # built completely before a crash, never swapped in: just swap
            return _report(spec, src, prev, layout_obj, fmt, comp, k, 0, [], [], t_start,
                           status="loaded", records=prev.get("records", 0))
        log(progress, f"nothing to do: {src.uri} was already loaded into {spec.uri} by run {prev['id']} "
            f"({prev.get('records', 0):,} records); use --new-run to load it again",
            run=prev["id"], source=src.uri, event="already-loaded")
        return _report(spec, src, prev, layout_obj, fmt, comp, k, 0, [], [], t_start, status="already-loaded")

    resume = None
    if prev is not None and not new_run and m is not None and runs.load_resumable(m, prev, **opts):
        if b_given and prev.get("batch_records") != b:
            log(progress, f"resuming run {prev['id']} with its batch size {prev['batch_records']} "
                f"(not --batch-records {b}); use --new-run to start over with another size")
        b = prev["batch_records"]
        resume = prev
    if m is None or not m.batches:
        m = fresh_manifest(m, spec, layout_obj, fmt, comp, k, b)
    if mode == "load":  # what the dataset may not take twice (documents: ids already stored)
        planned = kind.vet_new(spec, m, planned)
        total, skipped = (planned.total, list(planned.skipped)) if planned.entries is not None else (total, skipped)

    if resume is not None:
        run = resume
        runs.restart(run)
    else:
        run = mf.new_run(mode, source=src.uri, fingerprint=fp, workers=None)
        run.update(first_seq=m.next_seq, first_record=m.next_record, total=total, batch_records=b,
                   resumable=fp is not None, **opts)
        if fplan is not None:
            run["source_offset"] = fplan.offset
        if replace:
            run.update(replace=True, replaces=replaces)
        m.runs.append(run)
    gone = runs.supersede(m, run, by=run["id"])
    if gone:
        log(progress, f"discarding the unfinished run(s) {', '.join(gone)}: their pending batches are "
            "overwritten by this run", superseded=gone)

    nworkers = max(1, min(w_req, k))
    run["workers"] = nworkers
    if skipped:
        run["skipped"] = skipped
    stream_run = not src.replayable
    table, clear_from = kind.run_table(run["id"]), -1
    if kind.keyed:  # a run above every stored id shares the table of the highest ones
        if "table" not in run and resume is not None:  # a run from before shared tables
            run["table"], run["clear_from"] = table, -1
        elif "table" not in run:
            run["table"], run["clear_from"] = kind.choose_table(run["id"], m.batches, planned.id_span())
            kind.check_table_limit(spec, m, run["table"])
        table, clear_from = run["table"], run.get("clear_from", -1)
    src = planned.for_run(spec.root, run["id"])  # a directory: its listing saved as the run's plan file
    segments = [] if stream_run else [Segment(src, total, run["first_seq"], run["first_record"],
                                              offset=run.get("source_offset", 0))]
    if resume is not None:
        res, keep = resume_points(spec, segments, b, k, run["first_seq"], run.get("pending") or [], kind)
        kept = sum(r[3] for r in keep)
        log(progress, f"resuming run {run['id']} of {src.uri}: {len(keep):,} batches ({kept:,} records) "
            f"already durable are kept, {total - kept:,} records to load", run=run["id"],
            kept_batches=len(keep), kept_records=kept, event="resume")
    else:
        res, keep = (), []
        log(progress, f"{mode} {src.uri} into {spec.uri}: run {run['id']}", run=run["id"], source=src.uri,
            event="start")
    hook = (lambda m_, u: on_commit(m_, u, run)) if on_commit is not None else None
    check = None
    if fplan is not None:  # the bytes loaded must be the ones fingerprinted when the run began
        end = run.get("source_offset", 0) + total
        check = lambda u: changed_while_loading(src, layout_obj, run["fingerprint"], end)  # noqa: E731
    units = [] if stream_run else [Unit(src.uri, run["first_seq"], -(-total // b), run["first_record"], total,
                                       on_commit=hook, check=check)]
    committer = Committer(spec.root, m, run, units, keep, record_pending=not stream_run)
    run["records"], run["batches"] = 0, 0

    feed = None
    if stream_run:
        feed = lambda tasks, prog, on_message: run_stream(tasks, prog, src, layout_obj, on_message, stdin)
    outcome = ("nothing from this run was committed; " + ("a stream cannot be replayed: re-run the whole "
               "producer pipeline" if stream_run else "re-run the same command to resume it"))
    late = None  # an error after every batch was committed
    try:
        committer.save()
        receipts = execute(spec, m, run, committer, layout=layout_obj, segments=segments, resume=res, k=k,
                           b=b, nworkers=nworkers, label=mode, progress=progress, stream_feed=feed,
                           checkpoint=ckpt, fault=fault, kind=kind, table=table, clear_from=clear_from,
                           keep_tables=sorted({e.table for e in m.batches if e.table} | held_tables(m)),
                           store_options=kind.store_options(spec.scheme))
        if stream_run:
            receipts, total = receipts
            committer.units = [Unit(src.uri, run["first_seq"], sum(len(rc["batches"]) for rc in receipts),
                                    run["first_record"], total)]
            run["total"] = total
    except BaseException as e:
        if not committer.complete:
            raise _stopped(e, spec, k, run, committer, kind, table, clear_from, outcome) from None
        # everything was committed (at checkpoints) before this error, e.g. a worker died after
        # its last one: the run is done; only its figures are incomplete
        log(progress, f"run {run['id']}: every batch was committed before this error: {e}", level="warning")
        receipts, late = [], e
    finished = lambda: f"run {run['id']} had finished: its {run['records']:,} records were committed"
    with interrupts.held(finished):  # the commit is written whole; a stop signal waits for it
        try:
            faults.hit("commit")
            committer.finish(receipts)
        except BaseException as e:
            raise _stopped(e, spec, k, run, committer, kind, table, clear_from, outcome) from None
        if committer.stopped:  # the file changed while it was loaded: its batches are not kept
            run["pending"], run["resumable"] = [], False
            raise _stopped(ChangedInputError(committer.stopped), spec, k, run, committer, kind, table,
                           clear_from, "nothing from this run was committed") from None
        if committer.next < len(committer.units):  # cannot happen: every batch has a receipt
            raise WorkerError("the workers did not write every planned batch; nothing was committed")
        report = _commit(spec, m, run, src, receipts, keep, skipped, layout_obj, kind, k, nworkers,
                         t_start, progress, status=("resumed" if resume is not None else "appended"
                                                    if fplan is not None and fplan.status == "appended" else "loaded"))
    if isinstance(late, KeyboardInterrupt):
        late = Interrupted.of(late)
        late.outcome = finished()
        raise late from None
    return report


def _stopped(e: BaseException, spec: StoreSpec, k: int, run: dict, committer: Committer, kind, table: str,
             clear_from: int, outcome: str) -> BaseException:
    """The run stopped before its commit: record why, save; the exception to raise."""
    bad = kind.input_error(e.error if isinstance(e, WorkerError) and e.error is not None else e)
    if bad is not None:  # bad input: nothing of this run stays in the stores
        run["pending"], run["resumable"] = [], False
        kind.discard_run(spec, k, table, clear_from)
        e = bad
    e = runs.stop(run, e, outcome)
    committer.save_quietly()
    return e


def _commit(spec: StoreSpec, m: mf.Manifest, run: dict, src, receipts: list, keep: list,
            skipped: list, layout_obj: Layout, kind, k: int, nworkers: int, t_start: float, progress: str,
            status: str) -> LoadReport:
    """Write the commit (every batch is in the manifest's list, the run done); the report."""
    seconds = time.perf_counter() - t_start
    stages = {k2: round(max(rc[k2] for rc in receipts), 3)
              for k2 in ("produce_s", "serialize_s", "write_s", "sync_s")} if receipts else {}
    written = [r for rc in receipts for r in rc["batches"]]
    grows = sum(rc.get("map_grows", 0) for rc in receipts)
    skipped = sorted(skipped + [f for rc in receipts for f in rc.get("skipped", [])], key=lambda f: f["path"])
    if skipped:
        run["skipped"] = skipped
        for f in skipped:
            log(progress, f"skipped bad file {f['path']}: {f['reason']}", level="warning", file=f["path"],
                event="skipped")
    if kind.keyed:
        run["text_bytes"] = sum(mf.BatchEntry(*r).text_bytes or 0 for r in written + list(keep))
    runs.finish(run, "done", seconds=round(seconds, 3), written_records=_records(written),
                kept_records=_records(keep), map_grows=grows)
    src.committed()  # e.g. a directory's plan file is removed
    m.save(spec.root)
    log(progress, f"loaded {run['records']:,} records from {src.uri} into {spec.uri} (run {run['id']})",
        run=run["id"], stage="load", records=run["records"], seconds=round(seconds, 3), event="done")
    report = _report(spec, src, run, layout_obj, m.format, m.compression, k, nworkers, receipts, keep,
                     t_start, stages=stages, status=status)
    report.skipped = skipped
    return report


def _replaces(run: dict, replaces: str | None) -> bool:
    """Is this run part of the `--replace` build that replaces dataset ``replaces``?"""
    return bool(run.get("replace")) and run.get("replaces") == replaces


def _records(rows) -> int:
    return sum(mf.BatchEntry(*r).records for r in rows)


def _report(spec, src, run, layout_obj, fmt, comp, k, nworkers, receipts, keep, t_start, *,
            stages=None, status="loaded", records=None) -> LoadReport:
    seconds = time.perf_counter() - t_start
    written = [r for rc in receipts for r in rc["batches"]]
    nrec = _records(written) + _records(keep) if records is None else records
    nwritten = _records(written)
    if layout_obj.variable_length:  # bytes of text
        wbytes = sum(mf.BatchEntry(*r).text_bytes or 0 for r in written)
        nbytes = wbytes + sum(mf.BatchEntry(*r).text_bytes or 0 for r in keep)
        if records is not None:
            nbytes = run.get("text_bytes", nbytes)
    else:
        rs = layout_obj.record_size
        wbytes, nbytes = nwritten * rs, nrec * rs
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 + sum(rc["max_rss"] for rc in receipts)
    return LoadReport(
        dataset=spec.uri, source=src.uri, run_id=run["id"], records=nrec, bytes=nbytes,
        stored_bytes=sum(r[5] for r in written) + sum(r[5] for r in keep),
        batches=len(written) + len(keep) if status != "already-loaded" else 0, shards=k, workers=nworkers,
        seconds=round(seconds, 4), records_per_s=round(nwritten / seconds, 1) if seconds > 0 else 0.0,
        mb_per_s=round(wbytes / seconds / 1e6, 2) if seconds > 0 else 0.0, format=fmt,
        compression=comp, layout=layout_obj.name, stages=stages or {}, peak_rss_bytes=peak,
        status=status, written_records=nwritten, resumed_records=_records(keep),
        map_grows=sum(rc.get("map_grows", 0) for rc in receipts),
    )
