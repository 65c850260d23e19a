"""`--replace`: build the new dataset beside the old one, then swap them atomically.

The new content is loaded into a sibling directory ``PARENT/.NAME.replacing`` (a
complete dataset: its own manifest and shards), while the old dataset stays readable and
untouched (`load_replacing`). When the new one is committed, one
``renameat2(RENAME_EXCHANGE)`` swaps the two directories; the old one (now at the
sibling path) is deleted. Readers that opened the old dataset keep their open shards
(the files live on until closed); a reader that opens a shard after the swap notices the
new ``dataset_id`` and raises DatasetReplacedError instead of mixing two datasets.

A dataset path that is a symlink (`replaced_spec`): --replace starts over the directory
it points to, in place - the link is resolved once, before the lock, the new dataset is
built beside the real directory and swapped with it, and the link is kept (now naming
the new dataset). Refusing would break the common "stable name -> volume" link; swapping
the link itself would leave the old data behind the link's former target while the
dataset at the target went on unchanged (issue 28, item 3). A symlink at the build's name
is never followed (maintain/builds.py).

Crash behaviour: a crash before the swap leaves the old dataset as it was; the same
`--replace` command resumes building the sibling (same source, same fingerprint), any
other writing command discards it (maintain/builds.py `discard_dead_build`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil

from ..infra import faults
from ..infra.fsatomic import exchange, fsync_dir
from ..infra.lock import DatasetLock
from ..infra.paths import replacing_sibling
from ..maintain.builds import build_dir, discard_build, drop_link_beside_link
from ..model import manifest as mf
from ..model import runs
from ..model.catalog_rows import RunList
from ..stores.spec import StoreSpec
from .job import LoadJob
from .options import existing_manifest, fresh_manifest, prepare_root
from .report import LoadReport, log
from .run import load_locked, part_of_build


def replaced_spec(spec: StoreSpec) -> StoreSpec:
    """The dataset a --replace of ``spec`` replaces: the directory a symlinked dataset
    path points to (module docstring); a dangling link is left as is (refused as a path
    that is not a directory)."""
    if os.path.islink(spec.root) and os.path.isdir(spec.root):
        drop_link_beside_link(spec.root)  # never followed: only the link is removed
        return dataclasses.replace(spec, root=os.path.realpath(spec.root))
    return spec


def sibling_root(spec: StoreSpec) -> str:
    return replacing_sibling(spec.root)


def sibling_spec(spec: StoreSpec) -> StoreSpec:
    return StoreSpec(spec.scheme, sibling_root(spec), spec.shards, spec.options)


def load_replacing(spec: StoreSpec, m: mf.Manifest | None, job: LoadJob) -> LoadReport:
    """Load ``job`` into a new dataset beside ``spec`` (whose manifest is ``m``: its lock is
    held; ``spec`` is no symlink: `replaced_spec`) and swap it in; the report names ``spec``."""
    old_id = m.dataset_id if m is not None else None
    sib = sibling_spec(spec)
    found = build_dir(spec.root)  # never a symlink: a link there is removed unfollowed
    sm = existing_manifest(found, replace=True) if found else None  # a damaged one is built again
    if sm is not None and not _resumable_build(sm, job, old_id):
        sm = None
    if sm is None and found:
        discard_build(found)
    prepare_root(sib)
    with DatasetLock(sib.root):
        if sm is None:
            sm = fresh_manifest(None, sib, job.settings, job.settings.batch_records)
            sm.runs = RunList([r.copy() for r in (m.runs if m else [])])
        else:
            runs.mark_interrupted(sm)
        report = load_locked(sib, sm, dataclasses.replace(job, replace=True, replaces=old_id))
        swap_in(sib.root, spec.root)
        discard_build(sib.root)  # the old dataset
    report.dataset = spec.uri
    log(
        job.settings.progress,
        f"replaced {spec.uri}: it now holds {report.records:,} records",
        dataset=spec.uri,
        run=report.run_id,
        event="replaced",
    )
    return report


def _resumable_build(sm: mf.Manifest, job: LoadJob, old_id: str | None) -> bool:
    """Is the sibling ``sm`` an unfinished build of this very job (same source and content,
    replacing the same dataset)? Else it is built again."""
    r = sm.runs[-1] if sm.runs else None
    planned = job.planned
    return bool(
        r
        and part_of_build(r, old_id)
        and r.source == planned.uri
        and r.fingerprint == planned.fingerprint
        and planned.fingerprint is not None
        and not job.new_run
    )


def swap_in(new_root: str, root: str) -> None:
    """Make ``new_root`` the dataset at ``root``; the old dataset ends at ``new_root``."""
    faults.hit("swap")
    if os.path.isdir(root):
        if not exchange(new_root, root):
            # no RENAME_EXCHANGE: two renames (a reader may briefly find no dataset)
            old = new_root + ".old"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(root, old)
            os.rename(new_root, root)
            os.rename(old, new_root)
    else:
        os.rename(new_root, root)
    fsync_dir(os.path.dirname(root.rstrip("/")) or "/")
    faults.hit("swapped")
