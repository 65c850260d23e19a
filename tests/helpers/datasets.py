"""A dataset's metadata as JSON, its shards and its documents, read through the package."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def manifest_json(root: str | Path) -> dict[str, Any]:
    """The whole metadata of the dataset at ``root`` as one JSON object (a version-1
    manifest.json's content: the catalog's tables read whole)."""
    from loader.model import manifest as mf

    return json.loads(json.dumps(mf.load_manifest(root).to_json()))


def write_manifest_json(root: str | Path, obj: dict[str, Any]) -> None:
    """Replace the dataset's metadata by ``obj`` (as `manifest_json` gives it, edited):
    written as a version-1 manifest.json (the catalog removed), which the next writer
    upgrades to a new catalog."""
    shutil.rmtree(Path(root) / "catalog", ignore_errors=True)
    (Path(root) / "manifest.json").write_text(json.dumps({**obj, "version": 1}))


def stored_docs(uri: str) -> tuple[list[Any], list[Any], Any]:
    """Of a docs dataset (verified first): (batch rows without table names, every stored
    key + value of its batches in order, all documents) - what must match between a
    resumed run and an uninterrupted one."""
    import loader
    from loader.docs.batch import key_of

    with loader.open(uri) as ds:
        assert ds.verify().ok
        rows = [[*b.row()[:9], b.row()[10]] for b in ds.manifest.batches]
        items: list[Any] = []
        for b in ds.manifest.batches:
            items.extend(ds.shard(b.shard).range(key_of(b.lo), key_of(b.hi + 1), table=b.table))
        return rows, items, ds.scan()


def each_shard(uri: str, fn: Callable[[Any], Any]) -> list[Any]:
    """fn(store) of every shard of a dataset (its manifest gives the shard count)."""
    import loader
    from loader.maintain.compact import per_shard
    from loader.stores.spec import parse_dataset_uri

    with loader.open(uri) as ds:
        k = ds.manifest.shards
    return per_shard(parse_dataset_uri(uri).with_shards(k), k, fn)


def shard_tables(uri: str) -> list[list[str]]:
    """The document tables of every shard of a docs dataset."""
    from loader.docs.tables import doc_tables

    return each_shard(uri, doc_tables)
