"""`load`: one run that appends a source's records to a dataset, all or nothing.

1. parse and check everything (source, dataset, layout, format, counts) before touching
   data, and refuse a load whose records cannot fit on the filesystem (infra/space.py);
2. lock the dataset (one writing job at a time) and read its manifest;
3. run: `run.load_locked` (match the source's previous runs -> already loaded / resume /
   new; the workers; the commit), or for ``--replace`` the same into a sibling directory
   that is then swapped in (`replace.load_replacing`).

Crash behaviour: nothing is written before step 2; a load refused for lack of space
leaves no dataset directory it created; see run.py and replace.py for the rest.
"""

from __future__ import annotations

import dataclasses
import os
import time

from ..errors import BulkloadError, NoSpaceError
from ..infra import executors, faults, space
from ..infra.lock import DatasetLock
from ..maintain.garbage import start_writing
from ..model import manifest as mf
from ..model import runs
from ..model.layouts import get_layout
from ..sources import SourcePlan, parse_source
from ..stores.spec import StoreSpec, parse_dataset_uri
from .commit import pending_entries
from .file_runs import plan_file_run
from .job import LoadJob, Request, RunSettings
from .options import (
    check_bad_file_policy,
    check_compatible,
    checkpoint_settings,
    existing_manifest,
    prepare_root,
    resolve_options,
)
from .replace import discard_unfinished, load_replacing, sibling_root
from .report import LoadReport
from .run import load_locked


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
    request = Request(format=format, compression=compression, shards=shards, workers=workers,
                      batch_records=batch_records, progress=progress, checkpoint_seconds=checkpoint_seconds,
                      checkpoint_bytes=checkpoint_bytes, fault=faults.from_env(), t_start=t_start)
    spec = parse_dataset_uri(dataset)
    existing = existing_manifest(spec.root, replace)
    settings, spec, planned = _plan(source, spec, existing, request, layout, on_bad_file)
    if not planned.source.replayable:
        executors.require_local("a stream source (stdin or a FIFO)")  # before anything is written
    job = LoadJob(settings, planned, new_run=new_run, stdin=stdin, replace=replace)
    created = prepare_root(spec)
    try:
        _check_space(spec, existing, job)
    except NoSpaceError:
        if created:
            os.rmdir(spec.root)  # nothing is left of a refused load
        raise
    with DatasetLock(spec.root) as lock:
        lock.set_job(f"load {source}" + (" --replace" if replace else ""))
        m = existing_manifest(spec.root, replace)
        start_writing(spec, m)
        if replace:
            return load_replacing(spec, m, job)
        discard_unfinished(spec, progress)
        if m is not None:
            check_compatible(m, spec, settings)
        return load_locked(spec, m, job)


def _plan(source: str, spec: StoreSpec, existing: mf.Manifest | None, request: Request, layout: str | None,
          on_bad_file: str) -> tuple[RunSettings, StoreSpec, SourcePlan]:
    """Parse the source, resolve the options, plan the source: count it (a partial trailing
    record fails here, before any write), fingerprint it, list a directory."""
    layout_obj = get_layout(layout) if layout else None
    if layout_obj is None and existing is not None and existing.layout.get("variable_length") \
            and not source.startswith("gen://"):
        layout_obj = existing.layout_obj  # a directory into a docs dataset
    check_bad_file_policy(on_bad_file)
    src = parse_source(source, layout_obj, on_bad_file)
    if layout_obj is None and src.layout_name is not None:
        layout_obj = get_layout(src.layout_name)
    settings, spec = resolve_options(spec, existing, layout_obj, request)
    planned = src.plan(settings.layout)
    checkpoints = checkpoint_settings(request.checkpoint_seconds, request.checkpoint_bytes)
    return dataclasses.replace(settings, checkpoints=checkpoints), spec, planned


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
    prev = runs.last_matching(m, "load", src.uri, planned.fingerprint) if m is not None and not job.new_run else None
    todo = planned.total or 0
    if src.by_extent and m is not None:
        try:
            fplan = plan_file_run(m, src, kind.layout, new_run=job.new_run, considered=lambda r: True,
                                  resumable=lambda r: True)
            todo, prev = fplan.count, fplan.prev if fplan.status == "resume" else None
        except BulkloadError:
            pass  # refused under the lock, with its own message
    if prev is not None:
        todo = 0 if prev.status == "done" else todo - sum(e.count for e in pending_entries(prev.pending))
    space.check_space(spec.root, kind.min_stored_bytes(src, todo),
                      f"loading {todo:,} records of {src.uri} into {spec.uri}")
