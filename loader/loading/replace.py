"""`--replace`: build the new dataset beside the old one, then swap them atomically.

The new content is loaded into a sibling directory ``PARENT/.NAME.replacing`` (a
complete dataset: its own manifest and shards), while the old dataset stays readable and
untouched. When the new one is committed, one ``renameat2(RENAME_EXCHANGE)`` swaps the
two directories; the old one (now at the sibling path) is deleted. Readers that opened
the old dataset keep their open shards (the files live on until closed); a reader that
opens a shard after the swap notices the new ``dataset_id`` and raises
DatasetReplacedError instead of mixing two datasets. A crash before the swap leaves the
old dataset as it was; the same `--replace` command resumes building the sibling, any
other writing command discards it.
"""

from __future__ import annotations

import os
import shutil

from ..infra.fsatomic import exchange, fsync_dir
from ..infra.paths import replacing_sibling
from ..stores.spec import StoreSpec


def sibling_root(spec: StoreSpec) -> str:
    return replacing_sibling(spec.root)


def sibling_spec(spec: StoreSpec) -> StoreSpec:
    return StoreSpec(spec.scheme, sibling_root(spec), spec.shards, spec.options)


def swap_in(new_root: str, root: str) -> None:
    """Make ``new_root`` the dataset at ``root``; the old dataset ends at ``new_root``."""
    from ..infra import faults

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


def discard(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


