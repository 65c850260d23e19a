import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import settings

# CI runs the property tests with a fixed seed so that a run is reproducible; a failure
# prints the example (and a blob to replay it with @reproduce_failure).
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    p = BIN / name
    return str(p) if p.exists() else (shutil.which(name) or name)


def run_cli(*args, input=None, check=False, timeout=120, env=None):
    """Run the installed `bulkload` command; returns CompletedProcess (text output)."""
    e = dict(os.environ, **(env or {}))
    return subprocess.run(
        [tool("bulkload"), *map(str, args)],
        input=input,
        capture_output=True,
        timeout=timeout,
        check=check,
        env=e,
        text=not isinstance(input, bytes),
    )


def manifest_json(root) -> dict:
    """The whole metadata of the dataset at ``root`` as one JSON object (a version-1
    manifest.json's content: the catalog's tables read whole)."""
    from loader.model import manifest as mf

    return json.loads(json.dumps(mf.load_manifest(root).to_json()))


def write_manifest_json(root, obj: dict) -> None:
    """Replace the dataset's metadata by ``obj`` (as `manifest_json` gives it, edited):
    written as a version-1 manifest.json (the catalog removed), which the next writer
    upgrades to a new catalog."""
    from pathlib import Path

    shutil.rmtree(Path(root) / "catalog", ignore_errors=True)
    (Path(root) / "manifest.json").write_text(json.dumps({**obj, "version": 1}))


def stored_docs(uri):
    """Of a docs dataset (verified first): (batch rows without table names, every stored
    key + value of its batches in order, all documents) - what must match between a
    resumed run and an uninterrupted one."""
    import loader
    from loader.docs.batch import key_of

    with loader.open(uri) as ds:
        assert ds.verify().ok
        rows = [b.row()[:9] + [b.row()[10]] for b in ds.manifest.batches]
        items = []
        for b in ds.manifest.batches:
            items.extend(ds.shard(b.shard).range(key_of(b.lo), key_of(b.hi + 1), table=b.table))
        return rows, items, ds.scan()


def each_shard(uri, fn) -> list:
    """fn(store) of every shard of a dataset (its manifest gives the shard count)."""
    import loader
    from loader.maintain.compact import per_shard
    from loader.stores.spec import parse_dataset_uri

    with loader.open(uri) as ds:
        k = ds.manifest.shards
    return per_shard(parse_dataset_uri(uri).with_shards(k), k, fn)


def shard_tables(uri) -> list[list[str]]:
    """The document tables of every shard of a docs dataset."""
    from loader.docs.tables import doc_tables

    return each_shard(uri, doc_tables)


@pytest.fixture(params=["lmdb", "rocksdb", "mem"])
def store_uri(request, tmp_path):
    """A fresh dataset URI for each backend; mem:// datasets are removed afterwards."""
    scheme = request.param
    if scheme == "mem":
        name = f"test-{uuid.uuid4().hex[:10]}"
        yield f"mem://{name}"
        shutil.rmtree(f"/dev/shm/bulkload/{name}", ignore_errors=True)
    else:
        yield f"{scheme}://{tmp_path}/ds"


@pytest.fixture
def lmdb_uri(tmp_path):
    return f"lmdb://{tmp_path}/ds"
