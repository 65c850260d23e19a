"""`load`: one run that appends a source's records to a dataset, all or nothing.

1. parse and check everything (source - or several, sources/many.py -, dataset, layout,
   format, counts) before touching data, and refuse a load whose records cannot fit on
   the filesystem (infra/space.py);
2. lock the dataset (one writing job at a time) and read its manifest;
3. run: `run.load_locked` (match the source's previous runs -> already loaded / resume /
   new; the workers; the commit), or for ``--replace`` the same into a sibling directory
   that is then swapped in (`replace.load_replacing`).

Crash behaviour: nothing is written before step 2; a load refused for lack of space
leaves no dataset directory it created; see run.py and replace.py for the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

from ..errors import BulkloadError, NoSpaceError
from ..infra import executors, faults, space
from ..infra.lock import DatasetLock
from ..maintain.garbage import start_writing
from ..model import manifest as mf
from ..model.layouts import Layout, get_layout
from ..sources import Source, SourcePlan, object_source, parse_sources
from ..stores.spec import StoreSpec, parse_dataset_uri
from .commit import pending_entries
from .execute import prewarm
from .file_runs import last_loaded, plan_file_run
from .inputs import match_inputs
from .job import LoadJob, Request, RunSettings
from .options import (
    check_bad_file_policy,
    check_compatible,
    checkpoint_settings,
    existing_manifest,
    prepare_root,
    resolve_options,
)
from .replace import load_replacing, replaced_spec, sibling_root
from .report import LoadReport
from .run import load_locked


def load(
    source,
    dataset: str,
    *,
    layout: str | None = None,
    format: str | None = None,
    compression: str | None = None,
    shards: int | None = None,
    workers: int | None = None,
    batch_records: int | None = None,
    progress: str = "none",
    stdin=None,
    new_run: bool = False,
    replace: bool = False,
    checkpoint_seconds: float | None = None,
    checkpoint_bytes: int | None = None,
    on_bad_file: str = "fail",
) -> LoadReport:
    """Load the records of ``source`` into ``dataset``; returns the run's report.

    ``source``: a SOURCE string as the CLI's (gen://..., a file, ``-``), a source of
    `loader.generator`, or a Python object: a numpy structured array, a pandas DataFrame, a
    pyarrow Table / RecordBatch / RecordBatchReader, or an iterable of those or of bytes
    (sources/shared.py, sources/iterables.py; the layout: ``layout``, else the dataset's,
    else the object's own).

    Appends to an existing dataset. Re-running the same source (same URI and content
    fingerprint) resumes its interrupted run, or loads nothing if it already finished,
    unless ``new_run``. ``replace`` starts the dataset over, atomically.

    ``source`` may name several inputs (a list, or a glob such as ``"parts/*.bin"``):
    one run loads them in that order, each committed whole, each recognised on a re-run
    as one source would be (loaded before: left out); several FIFOs are read in parallel.

    Documents (``layout="docs"``, or ``gen://docs?...``): ``source`` may be a directory
    of ``<id>.json`` files; ``on_bad_file`` ``fail`` (nothing is loaded, BadFileError
    names the file and reason) or ``skip`` (the report lists skipped files).
    """
    t_start = time.perf_counter()
    request = Request(
        format=format,
        compression=compression,
        shards=shards,
        workers=workers,
        batch_records=batch_records,
        progress=progress,
        checkpoint_seconds=checkpoint_seconds,
        checkpoint_bytes=checkpoint_bytes,
        fault=faults.from_env(),
        t_start=t_start,
    )
    named = parse_dataset_uri(dataset)
    spec = replaced_spec(named) if replace else named  # a symlink: the directory it names
    existing, given, src = _opened(source, spec, layout, replace, on_bad_file)
    try:
        report = _load(src, spec, existing, request, given, new_run=new_run, stdin=stdin, replace=replace)
    finally:
        src.close()  # e.g. an in-memory array's shared copy
    if spec is not named:
        report.dataset = named.uri  # the path as given (the link)
    return report


def _opened(
    source, spec: StoreSpec, layout: str | None, replace: bool, on_bad_file: str
) -> tuple[mf.Manifest | None, Layout | None, Source]:
    """(the dataset's manifest or None, the layout asked for, the source: to close)."""
    existing = existing_manifest(spec.root, replace, spec.uri)
    refs = _refs(source)
    given = _given_layout(refs, layout, existing)
    return existing, given, _source(source, refs, given, on_bad_file)


def _load(
    src: Source,
    spec: StoreSpec,
    existing: mf.Manifest | None,
    request: Request,
    given: Layout | None,
    *,
    new_run: bool,
    stdin,
    replace: bool,
) -> LoadReport:
    settings, spec, planned = _plan(src, spec, existing, request, given)
    if not planned.source.replayable or planned.source.local_only:  # before anything is written
        executors.require_local("a stream (stdin, a FIFO, an iterable) or an in-memory object")
    elif planned.total is not None:
        user_code = getattr(planned.source, "runs_user_code", False)
        prewarm(spec, settings, planned.total, user_code)
    job = LoadJob(settings, planned, new_run=new_run, stdin=stdin, replace=replace)
    created = prepare_root(spec)
    try:
        _check_space(spec, existing, job)
    except NoSpaceError:
        if created:
            with contextlib.suppress(OSError):  # another job may have started on it meanwhile
                os.rmdir(spec.root)  # nothing is left of a refused load
        raise
    with DatasetLock(spec.root) as lock:
        lock.set_job(f"load {planned.uri}" + (" --replace" if replace else ""))
        m = existing_manifest(spec.root, replace, spec.uri)
        start_writing(spec, m, progress=request.progress, replacing=replace)
        if replace:
            return load_replacing(spec, m, job)
        if m is not None:
            check_compatible(m, spec, settings)
        return load_locked(spec, m, job)


def _refs(source) -> list[str] | None:
    """The SOURCE strings of ``source`` (one, several, a glob); None: a Python object."""
    if isinstance(source, (str, os.PathLike)):
        return [os.fspath(source)]
    if isinstance(source, (list, tuple)) and all(isinstance(r, (str, os.PathLike)) for r in source):
        return [os.fspath(r) for r in source]
    return None


def _given_layout(refs: list[str] | None, layout: str | None, existing: mf.Manifest | None) -> Layout | None:
    """The layout asked for: ``layout``, or a documents dataset's for a directory loaded
    into it (no layout is given then)."""
    if layout:
        return get_layout(layout)
    if (
        refs is not None
        and existing is not None
        and existing.layout.get("variable_length")
        and not any(r.startswith("gen://") for r in refs)
    ):
        return existing.layout_obj  # a directory into a docs dataset
    return None


def _source(source, refs: list[str] | None, given: Layout | None, on_bad_file: str) -> Source:
    """The source spec of SOURCE strings or of a Python object."""
    if refs is None:
        return object_source(source)
    check_bad_file_policy(on_bad_file)
    return parse_sources(refs, given, on_bad_file)


def _plan(
    src: Source, spec: StoreSpec, existing: mf.Manifest | None, request: Request, given: Layout | None
) -> tuple[RunSettings, StoreSpec, SourcePlan]:
    """Resolve the layout and the options, plan the source: count it (a partial trailing
    record fails here, before any write), fingerprint it, list a directory. The layout:
    the one given, the source's (gen://LAYOUT, a typed file's schema, checked), the
    dataset's, else the source's own (an array's dtype)."""
    settings, spec = _settings(src, spec, existing, request, given)
    return settings, spec, src.plan(settings.layout)


def _settings(
    src: Source, spec: StoreSpec, existing: mf.Manifest | None, request: Request, given: Layout | None
) -> tuple[RunSettings, StoreSpec]:
    """The run's settings (layout, options, checkpoints), checked; nothing is read but the
    source's layout."""
    dataset_layout = existing.layout_obj if existing is not None and existing.batches else None
    layout_obj = src.records_layout(given, dataset_layout)
    settings, spec = resolve_options(spec, existing, layout_obj, request)
    checkpoints = checkpoint_settings(request.checkpoint_seconds, request.checkpoint_bytes)
    return dataclasses.replace(settings, checkpoints=checkpoints), spec


def check(
    source,
    dataset: str,
    *,
    layout: str | None = None,
    format: str | None = None,
    compression: str | None = None,
    shards: int | None = None,
    workers: int | None = None,
    batch_records: int | None = None,
    checkpoint_seconds: float | None = None,
    replace: bool = False,
    on_bad_file: str = "fail",
) -> RunSettings:
    """What `load` checks before it writes, without loading: the settings the run would
    have, or the error the load would raise (a pipeline checks its [load] with it before
    its first step: api/pipeline_check.py)."""
    request = Request(
        format=format,
        compression=compression,
        shards=shards,
        workers=workers,
        batch_records=batch_records,
        checkpoint_seconds=checkpoint_seconds,
    )
    spec = parse_dataset_uri(dataset)  # a symlink is read through (replaced_spec writes: not here)
    existing, given, src = _opened(source, spec, layout, replace, on_bad_file)
    try:
        settings, spec = _settings(src, spec, existing, request, given)
    finally:
        src.close()
    if existing is not None and not replace:
        check_compatible(existing, spec, settings)
    return settings


def _check_space(spec: StoreSpec, existing: mf.Manifest | None, job: LoadJob) -> None:
    """Refuse up front (infra/space.py) a load whose records still to write cannot fit: the
    source's records, less those of its interrupted run that are durable (read without the
    lock: a figure, not a decision about the run), none if it was already loaded."""
    m = existing
    if job.replace:
        sib = sibling_root(spec)
        try:
            m = mf.load_manifest(sib) if mf.exists(sib) else None
        except BulkloadError:
            m = None
    planned, kind = job.planned, job.settings.kind()
    src = planned.source
    if not src.replayable:
        return  # a stream: its size is not known
    prev = last_loaded(m, src.uri, planned.fingerprint) if m is not None and not job.new_run else None
    todo = planned.total or 0
    if planned.parts:
        try:
            found = match_inputs(
                m, planned, kind.layout, new_run=job.new_run, considered=lambda r: True, resumable=lambda r: True
            )
            todo, prev = found.total, found.resume
        except BulkloadError:
            pass  # refused under the lock, with its own message
    elif src.by_extent and m is not None:
        try:
            fplan = plan_file_run(
                m, src, kind.layout, new_run=job.new_run, considered=lambda r: True, resumable=lambda r: True
            )
            todo, prev = fplan.count, fplan.prev if fplan.status == "resume" else None
        except BulkloadError:
            pass  # refused under the lock, with its own message
    if prev is not None:
        todo = 0 if prev.status == "done" else todo - sum(e.count for e in pending_entries(prev.pending))
    space.check_space(
        spec.root, kind.min_stored_bytes(src, todo), f"loading {todo:,} records of {src.uri} into {spec.uri}"
    )
