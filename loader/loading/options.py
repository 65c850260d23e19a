"""Resolving a load's or an ingest's options, and preparing its dataset directory.

`resolve_options`: explicit option > the dataset URI (``?shards=K``) > the existing
dataset > defaults, every count checked (`check_count`: 0, negative, huge or non-integer
values are a UsageError naming the option, never a silent default); `check_compatible`
refuses to append records the dataset's layout, format, compression, shard count or store
could not hold beside its own. `prepare_root` creates the dataset directory (its parent
must exist, be writable and not lie inside another dataset); `fresh_manifest` is the
manifest of an empty dataset with these options.

Crash behaviour: nothing here writes data; `prepare_root` makes at most one empty
directory (load.py removes it again when the load is refused before it writes).
"""

from __future__ import annotations

import os

from ..errors import DatasetMismatchError, ManifestError, MissingPathError, NotWritableError, UsageError
from ..infra import env
from ..infra.lock import refuse_nested
from ..kinds import kind_for
from ..model import manifest as mf
from ..model.layouts import DEFAULT_LAYOUT, Layout, fields_difference, get_layout
from ..model.options import MAX_SHARDS, MAX_WORKERS, check_count, default_workers
from ..serializers import COMPRESSIONS, FORMATS
from ..stores.spec import MEM_ROOT, StoreSpec
from .job import Checkpoints, Request, RunSettings

BAD_FILE_POLICIES = ("fail", "skip")


def check_bad_file_policy(on_bad_file: str) -> None:
    if on_bad_file not in BAD_FILE_POLICIES:
        raise UsageError(f"--on-bad-file must be fail or skip, not {on_bad_file!r}")


def checkpoint_settings(seconds: float | None = None, nbytes: int | None = None) -> Checkpoints:
    """Explicit values > BULKLOAD_CHECKPOINT_SECONDS / _BYTES > defaults (10 s, 1 GiB)."""
    env_seconds, env_bytes = env.checkpoint()
    seconds = env_seconds if seconds is None else seconds
    nbytes = env_bytes if nbytes is None else nbytes
    if not (0 <= seconds < float("inf")) or nbytes < 0:
        raise UsageError(f"checkpoint interval {seconds!r} s / {nbytes!r} bytes: both must be >= 0")
    return Checkpoints(float(seconds), int(nbytes))


def existing_manifest(root: str, replace: bool = False, uri: str | None = None) -> mf.Manifest | None:
    """The manifest at ``root``, or None; an invalid one raises ManifestError, except for
    ``--replace``, which starts the dataset over without reading it. ``uri``: the dataset
    as named, refused when its scheme is not the dataset's store (`mf.check_store`)."""
    if not mf.exists(root):
        return None
    try:
        return mf.load_manifest(root, None if replace else uri)
    except ManifestError:
        if replace:
            return None
        raise


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
        raise MissingPathError(
            f"directory {parent} does not exist (needed for dataset {spec.uri}); create it first: mkdir -p {parent}"
        )
    created = not os.path.isdir(spec.root) and _make_root(spec, parent)
    if not os.access(spec.root, os.W_OK):
        raise NotWritableError(
            f"dataset directory {spec.root} is not writable; fix its permissions or choose another location"
        )
    return created


def _make_root(spec: StoreSpec, parent: str) -> bool:
    """mkdir the dataset directory: True if this call made it, False if another job made
    it meanwhile (two loads creating one dataset: both go on to its lock, which one of them
    takes; the other is told the dataset is busy); only a path that is not a directory is refused."""
    try:
        os.mkdir(spec.root)
        return True
    except PermissionError:
        raise NotWritableError(
            f"cannot create dataset {spec.uri}: directory {parent} is not writable; choose a writable location"
        ) from None
    except FileExistsError:
        if os.path.isdir(spec.root):
            return False
        raise UsageError(f"dataset path {spec.root} exists and is not a directory") from None
    except OSError as e:
        raise NotWritableError(f"cannot create dataset {spec.uri}: {e.strerror}; choose a writable location") from None


def check_compatible(m: mf.Manifest, spec: StoreSpec, settings: RunSettings) -> None:
    """Refuse to append records the dataset ``m`` could not hold beside its own (an empty
    dataset can be redefined)."""
    if not m.batches:
        return
    layout, wrong = settings.layout, []
    if m.layout["name"] != layout.name:
        wrong.append(f"layout {m.layout['name']!r} (not {layout.name!r})")
    elif m.layout["fields"] != layout.to_dict()["fields"]:  # e.g. a user's layout file named like a built-in
        wrong.append(
            f"layout {m.layout['name']!r} whose {fields_difference(m.layout['fields'], layout.fields)} "
            f"as in the other layout named {layout.name!r} that this load uses"
        )
    if m.format != settings.format:
        wrong.append(f"format {m.format!r} (not {settings.format!r})")
    if m.compression != settings.compression:
        wrong.append(f"compression {m.compression!r} (not {settings.compression!r})")
    if m.shards != settings.shards:
        wrong.append(f"{m.shards} shards (not {settings.shards})")
    if m.scheme != spec.scheme:
        wrong.append(f"store {m.scheme} (not {spec.scheme})")
    if wrong:
        raise DatasetMismatchError(
            f"dataset {spec.uri} already holds records with "
            + ", ".join(wrong)
            + "; load into a new dataset, or drop the conflicting option to append"
        )


def resolve_options(
    spec: StoreSpec, existing: mf.Manifest | None, layout: Layout | None, request: Request
) -> tuple[RunSettings, StoreSpec]:
    """explicit > URI > existing dataset > defaults: the run's settings (their checkpoint
    interval left to the caller: `checkpoint_settings`) and the dataset spec with its shards."""
    if layout is None:
        layout = existing.layout_obj if existing is not None else get_layout(DEFAULT_LAYOUT)
    holding = existing if existing is not None and existing.batches else None  # a dataset holding records
    kind = kind_for(layout)
    fmt = request.format or (holding.format if holding is not None else kind.default_format)
    if fmt not in FORMATS + kind.formats:
        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(kind.formats)}")
    comp = request.compression or (holding.compression if holding is not None else kind.compression_for(fmt))
    if comp not in COMPRESSIONS:
        raise UsageError(f"unknown compression {comp!r}; use one of {', '.join(kind.compressions)}")
    kind.check(layout, fmt, comp)  # rejects unsupported combinations
    shards = check_count("--shards", request.shards, 1, MAX_SHARDS)
    workers = check_count("--workers", request.workers, 1, MAX_WORKERS)
    run_kind = kind_for(layout, fmt, comp)
    batch_records = check_count("--batch-records", request.batch_records, 1, run_kind.max_batch_records())
    if shards is not None and spec.shards is not None and shards != spec.shards:
        raise UsageError(f"--shards {shards} contradicts ?shards={spec.shards} in {spec.uri}")
    k = shards or spec.shards or (holding.shards if holding is not None else None) or min(default_workers(), MAX_SHARDS)
    b = (
        batch_records
        if batch_records is not None
        else (holding.batch_records if holding is not None else run_kind.default_batch_records())
    )
    settings = RunSettings(
        layout=layout,
        format=fmt,
        compression=comp,
        shards=k,
        workers=default_workers() if workers is None else workers,
        workers_given=workers is not None,
        batch_records=b,
        batch_records_given=batch_records is not None,
        progress=request.progress,
        fault=request.fault,
        t_start=request.t_start,
    )
    return settings, spec.with_shards(k)


def fresh_manifest(m: mf.Manifest | None, spec: StoreSpec, settings: RunSettings, batch_records: int) -> mf.Manifest:
    """A manifest for an empty dataset with these options (keeping its id and history)."""
    fresh = mf.Manifest(
        layout=settings.layout.to_dict(),
        format=settings.format,
        compression=settings.compression,
        scheme=spec.scheme,
        shards=settings.shards,
        batch_records=batch_records,
    )
    if m is not None:
        fresh.runs, fresh.dataset_id, fresh.created, fresh.extra = m.runs, m.dataset_id, m.created, m.extra
    return fresh
