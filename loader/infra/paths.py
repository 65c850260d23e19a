"""The names inside a dataset directory, and where a dataset may be.

A dataset directory holds ``manifest.json`` (what the dataset holds), ``.lock`` (one
writing job), ``.readers/`` (reader pins), ``shard-000`` .. ``shard-{K-1}`` and
``arrays/``. A ``--replace`` builds its new dataset beside the old one, in
``PARENT/.NAME.replacing``. Nothing here writes.
"""

from __future__ import annotations

import os

MANIFEST = "manifest.json"
ARRAYS = "arrays"  # the arrays' chunk indexes (model/chunk_index.py)


def is_dataset(d: str | os.PathLike) -> bool:
    """Does directory ``d`` hold a dataset (a manifest)?"""
    return os.path.isfile(os.path.join(d, MANIFEST))


def replacing_sibling(root: str) -> str:
    """Where a ``--replace`` of the dataset at ``root`` builds the new one."""
    root = root.rstrip("/")
    return os.path.join(os.path.dirname(root), f".{os.path.basename(root)}.replacing")


def _is_replacing(name: str) -> bool:
    return name.startswith(".") and name.endswith(".replacing") and len(name) > len("..replacing")


def enclosing_dataset(root: str | os.PathLike) -> str | None:
    """The directory of a dataset that ``root`` would lie inside, or None: an ancestor
    holding a manifest, or a ``.NAME.replacing`` build. Its compaction (shards rebuilt and
    swapped) or a --replace would silently delete a dataset inside it."""
    d = os.path.dirname(os.path.realpath(root))
    while True:
        if is_dataset(d) or _is_replacing(os.path.basename(d)):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent
