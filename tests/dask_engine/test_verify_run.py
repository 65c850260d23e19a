"""`verify` and `run` (pipelines) on Dask (a real LocalCluster, worker processes).

verify runs one task per shard on the Dask workers and reports exactly what a local
verify reports - on a sound dataset and on a damaged one (a changed batch, a missing
batch, a missing and a changed array piece), for lmdb and rocksdb, and for documents. A
pipeline's ``[job] engine`` / ``scheduler`` keys choose where every step runs; the
command line's flags and variables win over the file, ``--set`` over them, the API's
``client=`` / ``engine=`` over everything."""

import json

import numpy as np
import pytest
from helpers import run_cli

import loader
from loader.api.engine import engine_for
from loader.arrays.chunks import chunk_key
from loader.errors import PipelineError
from loader.model.chunk_index import index_path, read_index
from loader.model.placement import batch_key
from loader.stores.spec import parse_dataset_uri

from .cluster import local_cluster

DIMS = "i0:10,i1:500"


@pytest.fixture(scope="module")
def client():
    with local_cluster(2) as (c, _):
        yield c


def reports(uri, client):
    """(local verify's report, Dask verify's report without what it says of the engine)."""
    local = loader.verify(uri).to_dict()
    with engine_for(uri, client=client) as ex:
        dask = loader.verify(uri).to_dict()
    assert ex.workers, "no task ran on a Dask worker"
    assert dask.keys() - local.keys() == {"engine", "scheduler", "engine_workers", "tasks_retried"}
    return local, {k: v for k, v in dask.items() if k in local}


def shard_store(uri, shard):
    with loader.open(uri) as ds:
        k = ds.manifest.shards
    return parse_dataset_uri(uri).with_shards(k).open_shard(shard, write=True)


def damage_batches(uri):
    """Shard 1: a batch's bytes changed; shard 0: a batch deleted (not the first ones)."""
    with loader.open(uri) as ds:
        by_shard = {s: [b for b in ds.manifest.batches if b.shard == s] for s in (0, 1)}
    st = shard_store(uri, 1)
    b = by_shard[1][1]
    value = bytearray(st.get(batch_key(b.seq)))
    value[-5] ^= 0xFF
    st.put_sorted([(batch_key(b.seq), bytes(value))])
    st.sync()
    st.close()
    st = shard_store(uri, 0)
    b = by_shard[0][2]
    st.delete_range(batch_key(b.seq), batch_key(b.seq + 1))
    st.sync()
    st.close()


def damage_pieces(uri, array):
    """The array's first piece deleted; its last piece's bytes changed."""
    with loader.open(uri) as ds:
        a = ds.manifest.arrays[array]
        root = ds.spec.root
    idx = read_index(index_path(root, a))
    for i, how in ((0, "delete"), (len(idx["crow"]) - 1, "change")):
        key = chunk_key(idx["crow"][i], idx["ccol"][i], idx["piece"][i])
        st = shard_store(uri, int(idx["shard"][i]))
        if how == "delete":
            st.delete_range(key, chunk_key(idx["crow"][i], idx["ccol"][i], idx["piece"][i] + 1), table=a["table"])
        else:
            value = bytearray(st.get(key, table=a["table"]))
            value[-3] ^= 0x0F
            st.put_sorted([(key, bytes(value))], table=a["table"])
        st.sync()
        st.close()


@pytest.mark.parametrize("store", ["lmdb", "rocksdb"])
def test_verify_on_dask_reports_what_a_local_verify_reports(tmp_path, client, store):
    uri = f"{store}://{tmp_path}/ds"
    loader.load("gen://scidb96?n=6000", uri, shards=3, workers=2, batch_records=400)
    loader.finalize(uri, dims=DIMS, workers=2)
    loader.finalize(uri, dims="i2:10,i3:1000", array="k", duplicates="keep", workers=1, compact=False)
    local, dask = reports(uri, client)
    assert local["ok"] and local["batches"] == 15
    assert dask == local  # the arrays' multiset sums, added up over the shards' tasks
    damage_batches(uri)
    damage_pieces(uri, "k")
    local, dask = reports(uri, client)
    assert not local["ok"] and len(local["problems"]) == 5, local["problems"]
    assert local["problems"][2]["problem"] == (
        "array 'grid': not compared with the flat records it was built from: some of them are damaged"
    )
    assert dask == local  # the same problems, in the same order
    assert not (tmp_path / "ds" / ".leases").exists()


def test_verify_of_documents_on_dask(tmp_path, client):
    uri = f"lmdb://{tmp_path}/docs"
    loader.load("gen://docs?n=400&seed=3", uri, shards=2, workers=2, batch_records=50)
    local, dask = reports(uri, client)
    assert local["ok"] and local["records"] == 400
    assert dask == local


def test_verify_through_the_cli_on_a_local_cluster(tmp_path):
    uri = f"rocksdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=3000", uri, shards=2, workers=2, batch_records=500)
    damage_batches(uri)
    p = run_cli("--engine", "dask", "--scheduler", "local:1", "verify", uri, "--json", timeout=90)
    assert p.returncode == 1, p.stderr
    rep = json.loads(p.stdout)
    assert (rep["engine"], rep["scheduler"], rep["tasks_retried"], len(rep["engine_workers"])) == (
        "dask",
        "local:1",
        0,
        1,
    )
    assert [(x["shard"], x["problem"]) for x in rep["problems"]] == [
        (x["shard"], x["problem"]) for x in loader.verify(uri).problems
    ]


PIPELINE = """\
[job]
dataset = "{uri}"
shards = 2
workers = 2
batch_records = 500
{engine}
[load]
source = "gen://scidb96?n=3000"

[finalize]
dims = "{dims}"
"""


def pipeline(tmp_path, name, engine_lines=""):
    p = tmp_path / f"{name}.toml"
    p.write_text(PIPELINE.format(uri=f"lmdb://{tmp_path}/{name}", engine=engine_lines, dims=DIMS))
    return str(p)


def test_a_pipeline_runs_on_the_engine_its_job_names(tmp_path, client):
    ref = pipeline(tmp_path, "ref")
    loader.run(ref, progress="none")
    addr = client.scheduler.address
    on_dask = pipeline(tmp_path, "dask", f'engine = "dask"\nscheduler = "{addr}"\n')
    rep = loader.run(on_dask, progress="none").to_dict()
    assert (rep["engine"], rep["scheduler"], rep["tasks_retried"]) == ("dask", addr, 0)
    assert rep["engine_workers"] and [s["step"] for s in rep["steps"]] == ["load", "finalize"]
    with loader.open(f"lmdb://{tmp_path}/ref") as a, loader.open(f"lmdb://{tmp_path}/dask") as b:
        assert np.array_equal(a.read_records(), b.read_records())
        assert a.read_box("grid").equals(b.read_box("grid"))
    assert "engine" not in loader.run(ref, progress="none").to_dict()  # a local run's report: unchanged


def test_flags_and_variables_win_over_the_file_and_the_api_over_everything(tmp_path, client):
    """The file names a scheduler nobody listens on: a run that used it would fail
    (cannot reach the Dask scheduler; test_cli_engine.py)."""
    path = pipeline(tmp_path, "p", 'engine = "dask"\nscheduler = "tcp://127.0.0.1:9"\n')
    # BULKLOAD_ENGINE (what `bulkload --engine local run` sets) wins over the file
    assert "engine" not in loader.run(path, progress="none", env={"BULKLOAD_ENGINE": "local"}).to_dict()
    addr = client.scheduler.address
    rep = loader.run(
        path, ["job.scheduler=" + addr], progress="none", env={"BULKLOAD_ENGINE": "local"}, engine="dask"
    ).to_dict()  # the API's engine over the variable, --set over the file
    assert (rep["engine"], rep["scheduler"]) == ("dask", addr)
    rep = loader.run(path, progress="none", env={}, client=client).to_dict()  # a client over the file's scheduler
    assert rep["scheduler"] == addr
    p = run_cli("--engine", "local", "run", path, "--json", "-q")
    assert p.returncode == 0, p.stderr
    assert "engine" not in json.loads(p.stdout)


@pytest.mark.parametrize(
    "line,message",
    [
        ('engine = "spark"', "p.toml, line 6: [job] engine must be local or dask, not 'spark'"),
        (
            'engine = "dask"\nscheduler = "nowhere"',
            "p.toml, line 7: [job] scheduler must be tcp://HOST:PORT (or tls, ws, wss, ucx, inproc://), or local:N (N >= 1), not 'nowhere'",
        ),
    ],
)
def test_a_bad_engine_key_names_its_line(tmp_path, line, message):
    path = pipeline(tmp_path, "p", line + "\n")
    with pytest.raises(PipelineError) as e:
        loader.run(path, progress="none", env={})
    assert str(e.value) == f"{tmp_path}/{message}"
    p = run_cli("run", path)
    assert p.returncode == 2 and p.stderr == f"bulkload: error: {tmp_path}/{message}\n", p.stderr
    assert not (tmp_path / "p").exists()
