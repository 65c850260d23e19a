"""The same source loaded by the local pool and by Dask (a real LocalCluster with two
worker processes) gives byte-identical datasets: batch rows with checksums, records, and
the arrays after finalize; for lmdb and rocksdb, capnp and arrow. Also: compact on Dask,
errors raised by a task on a Dask worker, and what Dask refuses (streams, mem://)."""

import io
import json
import re

import pytest
from helpers import run_cli

import loader
from loader.errors import DuplicateCellError, UsageError
from loader.sources.generators import generate

from .cluster import dataset_state, local_cluster, same_state

SOURCE = "gen://scidb96?n=30000&start=7"
OPTS = dict(shards=3, workers=2, batch_records=2000)


@pytest.fixture(scope="module")
def client():
    with local_cluster(2) as (c, _):
        yield c


@pytest.mark.parametrize("store", ["lmdb", "rocksdb"])
@pytest.mark.parametrize("fmt", ["capnp", "arrow"])
def test_local_and_dask_give_the_same_dataset(tmp_path, client, store, fmt):
    uris = {e: f"{store}://{tmp_path}/{e}" for e in ("local", "dask")}
    for engine, uri in uris.items():
        kw = {"client": client} if engine == "dask" else {}
        rep = loader.load(SOURCE, uri, format=fmt, **OPTS, **kw)
        assert rep.records == 30000
        loader.load("gen://scidb96?n=5000&start=90000", uri, **kw)  # a second run appends
        loader.finalize(uri, dims="i0:10,i1:1000", workers=2, **kw)
    local, dask = (dataset_state(u) for u in uris.values())
    assert len(local[0]) == 15 + 3 and local[2]
    same_state(local, dask)
    assert not (tmp_path / "dask" / ".leases").exists()  # the leases of the runs are gone


def test_compact_on_dask_matches_local(tmp_path, client):
    uris = {e: f"lmdb://{tmp_path}/{e}" for e in ("local", "dask")}
    for engine, uri in uris.items():
        kw = {"client": client} if engine == "dask" else {}
        for i in range(4):
            loader.load(f"gen://scidb96?n=1500&start={1500 * i}", uri, shards=2, workers=1, batch_records=500)
        rep = loader.compact(uri, target_batch_records=3000, workers=2, force=True, **kw)
        assert rep.batches_after == 2
    same_state(*(dataset_state(u) for u in uris.values()))


def test_ingest_on_dask_matches_local(tmp_path, client):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}.bin").write_bytes(generate("scidb96", 1000 * i, 1000 + 200 * i).tobytes())
    uris = {e: f"rocksdb://{tmp_path}/{e}" for e in ("local", "dask")}
    for engine, uri in uris.items():
        kw = {"client": client} if engine == "dask" else {}
        rep = loader.ingest(uri, str(src), shards=2, workers=2, batch_records=300, **kw)
        assert rep.to_dict()["files"]
    same_state(*(dataset_state(u, arrays=False) for u in uris.values()))


def test_an_error_raised_in_a_dask_task_is_the_runs_error(tmp_path, client):
    """A task that raises on a Dask worker fails the run with the worker's own error, the
    same one line as on the local pool; the dataset keeps its last commit."""
    messages = []
    for engine in ("local", "dask"):
        uri = f"lmdb://{tmp_path}/{engine}"
        kw = {"client": client} if engine == "dask" else {}
        loader.load("gen://scidb96?n=3000", uri, shards=2, workers=2, batch_records=1000)
        loader.load("gen://scidb96?n=3000", uri, new_run=True)  # every cell twice
        before = dataset_state(uri)
        with pytest.raises(DuplicateCellError) as e:
            loader.finalize(uri, dims="i0:10,i1:1000", workers=2, **kw)
        messages.append(str(e.value).replace(str(tmp_path / engine), "DS"))
        same_state(before, dataset_state(uri))
    for text in messages:  # whichever task failed first: the same line
        assert re.fullmatch(
            r"cell \(i0=0, i1=\d+\) of array 'grid' is set by records (\d+) and \d+; nothing "
            r"was committed - choose --duplicates first, last or keep, or fix the data",
            text,
        ), text


def test_a_stream_or_a_mem_dataset_on_dask_is_a_usage_error(tmp_path, client):
    with pytest.raises(UsageError, match=r"a stream .* cannot run on the dask engine"):
        loader.load("-", f"lmdb://{tmp_path}/s", layout="scidb96", stdin=io.BytesIO(b"\0" * 960), client=client)
    # an in-memory array lives in the coordinator's memory: no Dask worker can read it
    with pytest.raises(UsageError, match="in-memory object cannot run on the dask engine"):
        loader.load(generate("scidb96", 0, 100), f"lmdb://{tmp_path}/s", client=client)
    with pytest.raises(UsageError, match="mem:// dataset"):
        loader.load("gen://scidb96?n=10", "mem://x?shards=2", client=client)
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_python_reports_have_the_keys_of_the_cli_json_on_either_engine(tmp_path, client):
    """``loader.load(..., client=)`` and the other runs' reports say what ``--json`` says:
    engine, scheduler, engine_workers, tasks_retried on Dask, none of them locally."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "f.bin").write_bytes(generate("scidb96", 2000, 500).tobytes())  # records 2000..2499
    for engine in ("local", "dask"):
        kw = {"client": client} if engine == "dask" else {}
        flags = ["--engine", "dask", "--scheduler", client.scheduler.address] if engine == "dask" else []
        py, cli = f"lmdb://{tmp_path}/py-{engine}", f"lmdb://{tmp_path}/cli-{engine}"
        ours = {
            "load": loader.load("gen://scidb96?n=2000", py, shards=2, workers=2, batch_records=500, **kw),
            "ingest": loader.ingest(py, str(src), **kw),
            "finalize": loader.finalize(py, dims="i0:5,i1:1000", workers=1, compact=False, **kw),
            "compact": loader.compact(py, force=True, workers=1, **kw),
            "verify": loader.verify(py, **kw),
        }
        theirs = {
            "load": ["load", "gen://scidb96?n=2000", cli, "--shards", 2, "--workers", 2, "--batch-records", 500],
            "ingest": ["ingest", cli, "--from", src],
            "finalize": ["finalize", cli, "--dims", "i0:5,i1:1000", "--workers", 1, "--no-compact"],
            "compact": ["compact", cli, "--force", "--workers", 1],
            "verify": ["verify", cli],
        }
        for name, args in theirs.items():
            p = run_cli(*flags, *args, "--json")
            assert p.returncode == 0, p.stderr
            assert set(ours[name].to_dict()) == set(json.loads(p.stdout)), (engine, name)
            assert ("tasks_retried" in ours[name].to_dict()) == (engine == "dask"), (engine, name)
