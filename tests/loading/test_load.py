import json
import os
import signal
import subprocess
import time

import numpy as np
import psutil
import pytest
from helpers import manifest_json, run_cli, tool, wait_until

import loader
from loader.errors import DatasetBusyError, DatasetMismatchError, PartialRecordError, WorkerError
from loader.infra.lock import DatasetLock
from loader.model.layouts import get_layout
from loader.sources.generators import generate
from loader.stores.spec import parse_dataset_uri

LAY = get_layout("scidb96")


def gen_bytes(start, n):
    return generate(LAY, start, n, impl="c").tobytes()


@pytest.mark.parametrize("fmt,comp", [("capnp", "none"), ("capnp", "lz4"), ("arrow", "none"), ("arrow", "zstd")])
def test_gen_load_reads_back_byte_identical(store_uri, fmt, comp):
    rep = loader.load(
        "gen://scidb96?n=25000&start=7",
        store_uri,
        format=fmt,
        compression=comp,
        shards=3,
        workers=2,
        batch_records=1000,
    )
    assert (rep.records, rep.batches, rep.shards, rep.workers) == (25000, 25, 3, 2)
    with loader.open(store_uri) as ds:
        assert ds.read_records(0, 25000).tobytes() == gen_bytes(7, 25000)
        assert ds.read_records(999, 2001).tobytes() == gen_bytes(7 + 999, 1002)
        assert ds.verify().ok
        info = ds.info()
        assert (info["records"], info["batches"], info["shards"], info["format"]) == (25000, 25, 3, fmt)
        assert ds.to_arrow().num_rows == 25000
        firsts = [f for f, _ in ds.iter_batches()]
        assert firsts == list(range(0, 25000, 1000))
    # every shard got its batches (seq mod K), nothing else
    m = manifest_json(parse_dataset_uri(store_uri).root)
    assert all(row[1] == row[0] % 3 for row in m["batches"])


def test_append_continues_numbering(lmdb_uri):
    loader.load("gen://scidb96?n=3500", lmdb_uri, batch_records=1000, shards=2)
    rep = loader.load("gen://scidb96?n=2000&start=3500", lmdb_uri, batch_records=1000)
    assert rep.records == 2000
    with loader.open(lmdb_uri) as ds:
        assert ds.records == 5500
        assert ds.read_records().tobytes() == gen_bytes(0, 5500)
        assert [r["status"] for r in ds.info()["runs"]] == ["done", "done"]


def test_file_source(tmp_path, store_uri):
    f = tmp_path / "recs.bin"
    f.write_bytes(gen_bytes(100, 4321))
    rep = loader.load(str(f), store_uri, batch_records=500, shards=2)
    assert rep.records == 4321 and rep.batches == 9
    with loader.open(store_uri) as ds:
        assert ds.read_records().tobytes() == gen_bytes(100, 4321)


def test_stdin_pipe_from_bulkload_gen(lmdb_uri):
    gen = subprocess.Popen([tool("bulkload-gen"), "12345", "5"], stdout=subprocess.PIPE)
    p = subprocess.run(
        [tool("bulkload"), "load", "-", lmdb_uri, "--batch-records", "1000", "--shards", "2", "--json"],
        stdin=gen.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    gen.stdout.close()
    gen.wait()
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["records"] == 12345 and rep["batches"] == 13
    with loader.open(lmdb_uri) as ds:
        assert ds.read_records().tobytes() == gen_bytes(5, 12345)
        assert ds.verify().ok


def test_partial_trailing_record_in_file_commits_nothing(tmp_path, lmdb_uri):
    loader.load("gen://scidb96?n=100", lmdb_uri)
    f = tmp_path / "bad.bin"
    f.write_bytes(gen_bytes(0, 10) + b"12345")
    with pytest.raises(PartialRecordError, match=r"bad.bin: partial record at byte offset 960 \(5 trailing bytes"):
        loader.load(str(f), lmdb_uri)
    p = run_cli("load", f, lmdb_uri)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1].startswith("bulkload: error: ")
    assert "byte offset 960" in p.stderr
    with loader.open(lmdb_uri) as ds:
        assert ds.records == 100 and ds.verify().ok


def test_partial_trailing_record_on_stdin(lmdb_uri):
    data = gen_bytes(0, 2500) + b"xyz"
    p = run_cli("load", "-", lmdb_uri, "--batch-records", "1000", input=data)
    assert p.returncode == 1
    assert "<stdin>: partial record at byte offset 240000 (3 trailing bytes" in p.stderr.decode()
    with loader.open(lmdb_uri) as ds:
        assert ds.records == 0
        assert ds.info()["runs"][-1]["status"] == "failed"


def test_worker_failure_stops_the_job_and_commits_nothing(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=1000", uri, shards=2, workers=2, batch_records=100)
    # sabotage shard 1: its writer lock is a directory, so its worker cannot open it (the
    # shard itself is sound: a missing one stops the job before any worker starts)
    root = tmp_path / "ds"
    (root / "shard-001" / "writer.lock").unlink()
    (root / "shard-001" / "writer.lock").mkdir()
    t = time.monotonic()
    with pytest.raises(WorkerError, match="worker 1 failed"):
        loader.load("gen://scidb96?n=2000000", uri, batch_records=1000)
    assert time.monotonic() - t < 30
    assert not [
        c
        for c in psutil.Process().children(recursive=True)
        if "bulkload-worker" in " ".join(c.cmdline()) and c.status() != psutil.STATUS_ZOMBIE
    ]
    m = manifest_json(root)
    assert len(m["batches"]) == 10 and m["runs"][-1]["status"] == "failed"
    assert "worker 1 failed" in m["runs"][-1]["error"]


def test_ctrl_c_stops_everything_and_commits_nothing(lmdb_uri):
    p = subprocess.Popen(
        [tool("bulkload"), "load", "gen://scidb96?n=200000000", lmdb_uri, "--quiet", "--batch-records", "1000"],
        stderr=subprocess.PIPE,
        text=True,
    )
    root = parse_dataset_uri(lmdb_uri).root
    wait_until(lambda: os.path.exists(os.path.join(root, "shard-000", "data.mdb")), 30, "the load's first shard")
    kids = wait_until(
        lambda: k if len(k := psutil.Process(p.pid).children(recursive=True)) >= 4 else None,
        30,
        "the load's tracker, forkserver and 2 workers",
    )
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert "interrupted" in err
    _gone, alive = psutil.wait_procs(kids, timeout=10)
    assert not alive
    with loader.open(lmdb_uri) as ds:
        # a signal, not an error: the run is interrupted and the same command resumes it
        assert ds.records == 0 and ds.info()["runs"][-1]["status"] == "interrupted"


def test_mismatched_dataset_is_refused(lmdb_uri):
    loader.load("gen://scidb96?n=100", lmdb_uri, shards=2)
    with pytest.raises(DatasetMismatchError, match="format 'capnp' \\(not 'arrow'\\)"):
        loader.load("gen://scidb96?n=100", lmdb_uri, format="arrow")
    with pytest.raises(DatasetMismatchError, match="2 shards \\(not 3\\)"):
        loader.load("gen://scidb96?n=100", lmdb_uri + "?shards=3")
    p = run_cli("load", "gen://scidb96?n=10", lmdb_uri, "--format", "arrow")
    assert p.returncode == 2 and "already holds records with format 'capnp'" in p.stderr


def test_a_user_layout_named_like_a_built_in_is_told_apart_and_never_ignored(tmp_path, lmdb_uri):
    mine = tmp_path / "scidb96.toml"
    mine.write_text('name = "scidb96"\n[fields]\nx = "int64"\n')
    raw = tmp_path / "raw.bin"
    raw.write_bytes(np.arange(12, dtype="<i8").tobytes())
    loader.load("gen://scidb96?n=10", lmdb_uri)
    p = run_cli("load", raw, lmdb_uri, "--layout", mine)
    assert p.returncode == 2 and "(not 'scidb96')" not in p.stderr, p.stderr
    assert (
        "already holds records with layout 'scidb96' whose field 1 is d0:float64, not x:int64 as in the other "
        "layout named 'scidb96'" in p.stderr
    )
    new = f"lmdb://{tmp_path}/new"
    p = run_cli("load", "gen://scidb96?n=10", new, "--layout", mine)
    assert (
        p.returncode == 2
        and "gen://scidb96?n=10&start=0 generates records of layout 'scidb96', but --layout "
        "gives another layout also named 'scidb96' (field 1 is d0:float64, not x:int64)"
        in p.stderr
    ), p.stderr
    assert not os.path.exists(tmp_path / "new")
    pts = tmp_path / "pts.toml"
    pts.write_text('name = "pts"\n[fields]\nx = "int64"\n')
    with pytest.raises(loader.errors.UsageError, match="generates layout 'scidb96' but --layout is 'pts'"):
        loader.load("gen://scidb96?n=10", new, layout=str(pts))
    assert loader.load("gen://scidb96?n=10", new, layout="scidb96").layout == "scidb96"


def test_second_writer_is_refused_with_exit_3(lmdb_uri):
    loader.load("gen://scidb96?n=100", lmdb_uri)
    root = parse_dataset_uri(lmdb_uri).root
    with DatasetLock(root):
        with pytest.raises(DatasetBusyError, match=f"dataset locked by pid {os.getpid()} on host"):
            loader.load("gen://scidb96?n=100", lmdb_uri)
        p = run_cli("load", "gen://scidb96?n=100", lmdb_uri)
        assert p.returncode == 3 and "dataset locked by pid" in p.stderr


def test_flipped_byte_is_found_by_verify(tmp_path):
    import lmdb

    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=5000", uri, shards=2, batch_records=1000)
    env = lmdb.open(str(tmp_path / "ds" / "shard-001"), max_dbs=64)
    db = env.open_db(b"batches")
    key = (3).to_bytes(8, "big")
    with env.begin(write=True, db=db) as txn:
        v = bytearray(txn.get(key))
        v[500] ^= 0x10
        txn.put(key, bytes(v))
    env.close()
    with loader.open(uri) as ds:
        rep = ds.verify()
    assert not rep.ok and rep.problems == [
        {"shard": 1, "batch": 3, "first_record": 3000, "problem": "checksum mismatch (stored bytes changed)"}
    ]
    p = run_cli("verify", uri)
    assert p.returncode == 1 and "shard 1 batch 3" in p.stderr


@pytest.mark.parametrize("fmt", ["arrow", "parquet", "npy", "capnp"])
def test_export(tmp_path, fmt):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=2500&start=3", uri, batch_records=1000)
    out = tmp_path / f"out.{fmt}"
    p = run_cli("export", uri, "--out", out, "--format", fmt, "--json")
    assert p.returncode == 0, p.stderr
    want = gen_bytes(3, 2500)
    if fmt == "npy":
        got = np.load(out).tobytes()
    elif fmt == "arrow":
        import pyarrow as pa

        t = pa.ipc.open_file(str(out)).read_all()
        got = _table_bytes(t)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        got = _table_bytes(pq.read_table(out))
    else:
        schema = LAY.capnp_module()
        parts, starts = [], []
        with open(out, "rb") as f:
            for msg in schema.Batch.read_multiple(f):
                starts.append(msg.start)
                arr = np.zeros(len(msg.records), LAY.dtype)
                for i, r in enumerate(msg.records):
                    for name in LAY.names:
                        arr[i][name] = getattr(r, name)
                parts.append(arr.tobytes())
        assert starts == [0, 1000, 2000]
        got = b"".join(parts)
    assert got == want


def _table_bytes(t):
    arr = np.empty(t.num_rows, LAY.dtype)
    for name in LAY.names:
        arr[name] = t.column(name).to_numpy()
    return arr.tobytes()
