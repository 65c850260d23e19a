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


def replacing_sibling(root: str, resolve: bool = True) -> str:
    """Where a ``--replace`` of the dataset at ``root`` builds the new one: beside the real
    directory (a dataset path that is a symlink is resolved: --replace swaps the directory
    it points to, never the link, so the build of a link and of its target is one path).
    ``resolve=False``: the name beside ``root`` as given (where older versions built)."""
    root = os.path.realpath(root) if resolve else root.rstrip("/")
    return os.path.join(os.path.dirname(root), f".{os.path.basename(root)}.replacing")


def _is_replacing(name: str) -> bool:
    return name.startswith(".") and name.endswith(".replacing") and len(name) > len("..replacing")


def holds_bulkload_data(d: str | os.PathLike) -> bool:
    """Does directory ``d`` look like a dataset or a piece of one, whatever state its
    metadata is in: a ``.NAME.replacing`` build; a ``shard-000`` (of any type); a
    ``manifest.json`` (of any type: a dangling link, a FIFO) beside the ``.lock``; an
    ``arrays/`` holding ``array-*`` files; or a store directory itself (an LMDB
    ``data.mdb``, a RocksDB ``IDENTITY`` + ``CURRENT``)? A lone ``manifest.json`` is a
    common name, not a sign. Only names are looked at: nothing is opened or read."""

    def has(name: str) -> bool:
        return os.path.lexists(os.path.join(d, name))

    if _is_replacing(os.path.basename(os.fspath(d))) or has("shard-000") or has("data.mdb"):
        return True
    if (has(MANIFEST) and has(".lock")) or (has("IDENTITY") and has("CURRENT")):
        return True
    try:
        with os.scandir(os.path.join(d, "arrays")) as it:
            return any(e.name.startswith("array-") for e in it)
    except OSError:
        return False


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
