"""Snapshot reads under compact / finalize / --replace (loader/snapshots.py, loader/garbage.py).

A reader opened before a writer replaced data (merged batches, a rebuilt array, folded
document tables) reads exactly its snapshot after the writer finished, on every store;
the replaced data is deleted by the first writer after the last such reader is gone, and
not before. Unpinned readers get a retryable error, never a VerifyError; `verify` never
reports a healthy dataset corrupt; runs of killed jobs show as interrupted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from helpers import each_shard, manifest_json, run_cli, tool, wait_until

import loader
from loader.arrays.finalize import finalize
from loader.docs.gen import generate_docs
from loader.docs.json_dir import write_json_dir
from loader.docs.tables import doc_tables
from loader.errors import CorruptBatchError, DatasetReplacedError, SnapshotExpiredError
from loader.maintain.compact import compact
from loader.model.layouts import get_layout
from loader.sources.generators import generate
from loader.stores.spec import parse_dataset_uri

LAY = get_layout("scidb96")
DIMS_A, DIMS_B = "i0:10,i1:100", "i0:5,i1:300"


def gen_bytes(start, n):
    return generate(LAY, start, n, impl="c").tobytes()


def root_of(uri):
    return parse_dataset_uri(uri).root


def manifest(uri):
    return manifest_json(root_of(uri))


def small_batches(uri, loads=6, each=500):
    """`loads` loads of `each` records in batches of 100, over 2 shards."""
    for i in range(loads):
        loader.load(f"gen://scidb96?n={each}&start={i * each}", uri, shards=2, workers=2, batch_records=100)
    return loads * each


def batch_keys(uri):
    return sorted(int.from_bytes(k, "big") for ks in each_shard(uri, lambda st: [k for k, _ in st.range()]) for k in ks)


def cli(*args, env=None):
    p = run_cli(*args, env=env)
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture
def uri_of(tmp_path):
    """uri_of(scheme) -> a fresh dataset URI (mem:// ones are removed afterwards)."""
    names = []

    def make(scheme):
        if scheme != "mem":
            return f"{scheme}://{tmp_path}/ds"
        names.append(f"test-{uuid.uuid4().hex[:10]}")
        return f"mem://{names[-1]}"

    yield make
    for name in names:
        shutil.rmtree(f"/dev/shm/bulkload/{name}", ignore_errors=True)


def shard_files(uri):
    """(directory inode, file name) of every file of every shard: what a compaction replaces."""
    root = root_of(uri)
    return {
        (os.stat(os.path.join(root, d)).st_ino, f)
        for d in os.listdir(root)
        if d.startswith("shard-")
        for f in os.listdir(os.path.join(root, d))
    }


def pins(uri):
    d = os.path.join(root_of(uri), ".readers")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


# --- a reader keeps its snapshot ------------------------------------------------------------------


def test_reader_keeps_its_batches_through_compact(store_uri):
    uri = store_uri
    n = small_batches(uri)
    lazy = loader.open(uri)  # no shard opened before the compaction
    warm = loader.open(uri)
    assert warm.read_records(0, 10).tobytes() == gen_bytes(0, 10)  # its shards are open
    assert lazy.pinned and pins(uri) == [str(lazy.manifest.generation)]
    old_seqs = sorted(b.seq for b in lazy.manifest.batches)
    files_before = shard_files(uri)
    # merge 100-record batches into 1000-record ones, then compact every store (LMDB: copy +
    # swap of the directory; RocksDB: compact_range, which deletes the SST files `warm` uses)
    cli("compact", uri, "--target-batch-records", 1000)
    assert files_before - shard_files(uri)  # files the open readers had are gone from disk
    m = manifest(uri)
    assert len(m["batches"]) == n // 1000 and [g["kind"] for g in m["garbage"]] == ["batches"]
    for ds in (lazy, warm):
        assert ds.read_records().tobytes() == gen_bytes(0, n)
        assert [first for first, _ in ds.iter_batches()] == list(range(0, n, 100))
        assert ds.verify().ok
    # not collected while a reader may need it: the old keys are all still there
    assert set(old_seqs) <= set(batch_keys(uri))
    cli("compact", uri)  # another writer, the readers still open: nothing collected
    assert manifest(uri)["garbage"] and set(old_seqs) <= set(batch_keys(uri))
    lazy.close()
    warm.close()
    assert pins(uri) == []
    loader.load(f"gen://scidb96?n=100&start={n}", uri)  # the next writer collects
    m = manifest(uri)
    assert m["garbage"] == [] and batch_keys(uri) == sorted(b[0] for b in m["batches"])
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == gen_bytes(0, n + 100) and ds.verify().ok


def test_collected_at_once_without_readers_and_disk_goes_back(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    n = small_batches(uri, loads=10, each=1000)
    with loader.open(uri):
        pass  # a reader that came and went holds nothing back
    rep = compact(uri, target_batch_records=5000)
    assert rep.batches_after == 2 and manifest(uri)["garbage"] == []
    assert batch_keys(uri) == sorted(b[0] for b in manifest(uri)["batches"])
    held = small_batches(f"lmdb://{tmp_path}/held", loads=10, each=1000)
    reader = loader.open(f"lmdb://{tmp_path}/held")
    rep_held = compact(f"lmdb://{tmp_path}/held", target_batch_records=5000)
    assert held == n and rep_held.bytes_after > 1.5 * rep.bytes_after  # the old batches are kept
    reader.close()
    rep_after = compact(f"lmdb://{tmp_path}/held", force=True)  # collects, then compacts the store
    assert rep_after.bytes_after <= rep.bytes_after * 1.1


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb", "mem"])
def test_reader_keeps_its_array_through_a_finalize_rebuild(scheme, uri_of):
    uri = uri_of(scheme)
    loader.load("gen://scidb96?n=4000", uri, shards=2, workers=2, batch_records=500)
    finalize(uri, dims=DIMS_A, workers=2)
    box = dict(i0=(2, 7), i1=(150, 1700))
    lazy = loader.open(uri)  # neither its index nor a shard read yet
    warm = loader.open(uri)
    before = warm.read_box(**box)
    assert before.num_rows > 0
    old = lazy.manifest.arrays["grid"]
    loader.load("gen://scidb96?n=500&start=4000", uri)  # the array goes stale
    cli("finalize", uri, "--dims", DIMS_B, "--workers", 2, "-q")  # rebuilt: a new table and index
    assert manifest(uri)["arrays"]["grid"]["table"] != old["table"]
    for ds in (lazy, warm):
        assert ds.read_box(**box).equals(before)
        assert ds.verify().ok
    index = os.path.join(root_of(uri), old["index"])
    assert os.path.exists(index) and all(old["table"] in t for t in each_shard(uri, lambda st: st.tables()))
    lazy.close()
    warm.close()
    compact(uri)  # the next writer drops the old build
    assert not os.path.exists(index) and manifest(uri)["garbage"] == []
    assert all(old["table"] not in t for t in each_shard(uri, lambda st: st.tables()))
    with loader.open(uri) as ds:
        assert ds.read_box(i1=(0, 4500)).num_rows == 4500 and ds.verify().ok


def interleaved_docs(tmp_path, uri, runs=3, n=300, fmt=None):
    docs = generate_docs(11, 0, n)
    for r in range(runs):
        d = tmp_path / f"in{r}"
        write_json_dir(docs.take(np.arange(r, n, runs)), d)
        loader.load(
            str(d),
            uri,
            layout="docs",
            shards=2,
            workers=2,
            batch_records=40,
            progress="none",
            **({"format": fmt} if fmt else {}),
        )
    return docs


@pytest.mark.parametrize("scheme,fmt", [("lmdb", None), ("rocksdb", None), ("lmdb", "raw"), ("mem", None)])
def test_reader_keeps_its_documents_through_a_fold(tmp_path, scheme, fmt, uri_of):
    uri = uri_of(scheme)
    want = interleaved_docs(tmp_path, uri, fmt=fmt)
    lazy = loader.open(uri)
    warm = loader.open(uri)
    assert warm.get(5).id == 5
    old_tables = each_shard(uri, doc_tables)
    assert all(len(t) == 3 for t in old_tables)
    cli("compact", uri)  # one table per shard
    for ds in (lazy, warm):
        assert ds.scan().equals(want)
        assert [ds.get(i).text for i in (0, 7, 299)] == [want.text_of(i).decode() for i in (0, 7, 299)]
        assert ds.verify().ok
    assert each_shard(uri, doc_tables) == [
        sorted(set(t) | {f"docs-{manifest(uri)['runs'][-1]['id']}"}) for t in old_tables
    ]
    lazy.close()
    warm.close()
    compact(uri)  # nothing to fold, but a writer: it drops the old tables
    assert all(len(t) == 1 for t in each_shard(uri, doc_tables)) and manifest(uri)["garbage"] == []
    with loader.open(uri) as ds:
        assert ds.scan().equals(want) and ds.verify().ok


def test_garbage_waits_for_the_oldest_reader_and_for_killed_readers_not_at_all(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    n = small_batches(uri, loads=3)
    old = loader.open(uri)
    compact(uri, target_batch_records=1000)
    new = loader.open(uri)  # opened after the switch: needs nothing of the garbage
    loader.load(f"gen://scidb96?n=100&start={n}", uri)
    assert manifest(uri)["garbage"]  # `old` still pins an older generation
    old.close()
    loader.load(f"gen://scidb96?n=100&start={n + 100}", uri)
    assert manifest(uri)["garbage"] == []  # `new` (still open) does not hold it back
    assert new.read_records().tobytes() == gen_bytes(0, n)  # its snapshot: before both loads
    new.close()
    # a reader killed with SIGKILL: the kernel drops its pin, the next writer collects
    reader = subprocess.Popen([sys.executable, "-c", READ_AND_WAIT, uri], stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "opened"
    compact(uri, target_batch_records=10000)
    assert manifest(uri)["garbage"]
    reader.send_signal(signal.SIGKILL)
    reader.wait()
    loader.load(f"gen://scidb96?n=100&start={n + 200}", uri)
    assert manifest(uri)["garbage"] == [] and pins(uri) == []
    assert batch_keys(uri) == sorted(b[0] for b in manifest(uri)["batches"])


READ_AND_WAIT = r"""
import sys, time, loader
ds = loader.open(sys.argv[1])
ds.read_records(0, 10)
print("opened", flush=True)
time.sleep(600)
"""


# --- readers that cannot pin; --replace ----------------------------------------------------------


def test_unpinned_reader_is_told_to_reopen_never_a_verify_error(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    n = small_batches(uri, loads=3)
    finalize(uri, dims=DIMS_A, workers=2, compact=False)
    ds = loader.open(uri, pin=False)
    assert not ds.pinned and pins(uri) == []
    cli("compact", uri, "--target-batch-records", 1000)  # merges: the old batches are deleted at once
    cli("finalize", uri, "--dims", DIMS_B, "--workers", 2, "-q")  # rebuilds the array
    with pytest.raises(SnapshotExpiredError, match=r"changed since this reader opened it .* open it again"):
        ds.read_records(0, 10)
    with pytest.raises(DatasetReplacedError, match="open it again"):  # the same family as --replace
        ds.read_box(i1=(0, 10))
    rep = ds.verify()  # verifies the dataset as it is now instead of reporting vanished data
    assert rep.ok and rep.records == n
    ds.close()
    docs_uri = f"rocksdb://{tmp_path}/docs"
    interleaved_docs(tmp_path, docs_uri, runs=2, n=120)
    with loader.open(docs_uri, pin=False) as docs:
        cli("compact", docs_uri)
        with pytest.raises(SnapshotExpiredError):
            docs.scan()
        assert docs.verify().ok


def test_a_manifest_written_onto_a_reused_inode_still_tells_the_reader_to_reopen(tmp_path):
    """The file system may give a new manifest the inode of one it freed (ext4 does): a
    reader must still see that its snapshot moved on. Here the rewritten manifest is put
    back onto the inode the reader read, through a hard link kept meanwhile."""
    uri = f"lmdb://{tmp_path}/ds"
    small_batches(uri, loads=3)
    path = tmp_path / "ds" / "manifest.json"
    keep = tmp_path / "ds" / "kept-inode"
    os.link(path, keep)
    ds = loader.open(uri, pin=False)
    cli("compact", uri, "--target-batch-records", 1000)  # merges: the old batches are deleted at once
    keep.write_bytes(path.read_bytes())  # the new manifest, in the reader's inode
    os.replace(keep, path)
    assert os.stat(path).st_ino == os.stat(tmp_path / "ds" / "manifest.json").st_ino
    with pytest.raises(SnapshotExpiredError, match=r"changed since this reader opened it .* open it again"):
        ds.read_records(0, 10)
    ds.close()


def test_array_index_after_replace_says_replaced(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=2000", uri, shards=2, batch_records=500)
    finalize(uri, dims=DIMS_A, workers=2)
    ds = loader.open(uri)
    loader.load("gen://scidb96?n=1000&start=5", uri, replace=True)
    with pytest.raises(DatasetReplacedError, match=r"was replaced .* open it again"):
        ds.read_box(i1=(0, 100))
    rep = ds.verify()  # the new dataset, verified
    assert rep.ok and rep.records == 1000
    ds.close()


def test_a_missing_batch_of_an_unchanged_dataset_is_still_corruption(tmp_path):
    uri = f"rocksdb://{tmp_path}/ds"
    small_batches(uri, loads=1)
    st = parse_dataset_uri(uri).with_shards(2).open_shard(1, write=True)
    st.delete_range(None, None)  # lose shard 1's batches behind the manifest's back
    st.close()
    with loader.open(uri, pin=False) as ds:
        with pytest.raises(CorruptBatchError, match=r"shard 1 batch 1 \(first record 100\).*: missing from the store"):
            ds.read_records()
        rep = ds.verify()
        assert not rep.ok and [p["batch"] for p in rep.problems] == [1, 3]
    p = run_cli("verify", uri)
    assert p.returncode == 1 and "FAILED (2 bad batches)" in p.stdout


# --- verify in a loop while writers run ----------------------------------------------------------

VERIFY_LOOP = r"""
import subprocess, sys, os, json
bulkload, uri, stop = sys.argv[1:4]
runs = []
while not os.path.exists(stop):
    p = subprocess.run([bulkload, "verify", uri], capture_output=True, text=True)
    runs.append([p.returncode, p.stdout[-300:], p.stderr[-300:]])
    open(stop + ".verify", "w").close()  # one round done
print(json.dumps(runs))
"""

READ_LOOP = r"""
import sys, os, json, loader
uri, stop = sys.argv[1:3]
seen = []
while not os.path.exists(stop):
    with loader.open(uri) as ds:
        n = ds.records
        recs = ds.read_records()
        assert len(recs) == n and recs["d0"].tolist() == list(range(n))
        if ds.manifest.arrays:
            assert ds.read_box(i1=(0, ds.manifest.arrays["grid"]["built_from_records"])).num_rows == \
                ds.manifest.arrays["grid"]["built_from_records"]
    seen.append(n)
    open(stop + ".read", "w").close()  # one round done
print(json.dumps(seen))
"""


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_verify_and_readers_in_a_loop_never_fail_while_compact_and_finalize_run(tmp_path, scheme):
    uri = f"{scheme}://{tmp_path}/ds"
    n = small_batches(uri, loads=4, each=5000)
    stop = tmp_path / "stop"
    loops = [
        subprocess.Popen(
            [sys.executable, "-c", VERIFY_LOOP, tool("bulkload"), uri, str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
        subprocess.Popen(
            [sys.executable, "-c", READ_LOOP, uri, str(stop)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ),
    ]
    try:
        for loop in ("verify", "read"):
            wait_until(lambda loop=loop: Path(f"{stop}.{loop}").exists(), 60, f"the {loop} loop's first round")
        for i, dims in enumerate([DIMS_A, DIMS_B, DIMS_A]):
            compact(uri, target_batch_records=[2000, 5000, 20000][i], force=True)
            finalize(uri, dims=dims, workers=2, compact=False)
            for _j in range(3):  # small appends: more batches to merge and a stale array
                loader.load(f"gen://scidb96?n=300&start={n}", uri, batch_records=100)
                n += 300
    finally:
        stop.touch()
    outs = [p.communicate(timeout=120) for p in loops]
    assert all(p.returncode == 0 for p in loops), [e for _, e in outs]
    verifies, reads = json.loads(outs[0][0]), json.loads(outs[1][0])
    assert len(verifies) >= 3 and len(reads) >= 3
    assert all(code == 0 and "ok" in out for code, out, _ in verifies), verifies
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == gen_bytes(0, n) and ds.verify().ok


# --- stores --------------------------------------------------------------------------------------

DROP_TABLE = r"""
import sys
from loader.stores.registry import backend_for
st = backend_for(sys.argv[1]).open(sys.argv[2], write=True)
st.drop_table("t")
st.close()
"""


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_a_table_dropped_by_another_process(tmp_path, scheme):
    from loader.stores.registry import backend_for

    path = str(tmp_path / "shard")
    with backend_for(scheme).open(path, write=True) as st:
        st.put_sorted([(b"k%03d" % i, b"v" * 100) for i in range(50)], table="t")
        st.put_sorted([(b"a", b"b")], table="u")
        st.sync()
    rd = backend_for(scheme).open(path, write=False)
    assert rd.has_table("t") and rd.has_table("u") and not rd.has_table("nope")
    assert rd.get(b"k001", table="t") == b"v" * 100
    subprocess.run([sys.executable, "-c", DROP_TABLE, scheme, path], check=True)
    # LMDB: the handle opened before reads as an absent table (no MDB_BAD_DBI error);
    # RocksDB: a read-only instance keeps reading what it opened
    got = rd.get(b"k001", table="t")
    assert got is None if scheme == "lmdb" else got == b"v" * 100
    rd.close()
    with backend_for(scheme).open(path, write=False) as rd:
        assert not rd.has_table("t") and rd.get(b"k001", table="t") is None and rd.has_table("u")


# --- runs of killed jobs --------------------------------------------------------------------------

HOLD_LOCK = r"""
import sys, time
from loader.infra.lock import DatasetLock
with DatasetLock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize(
    "cmd,fault,kind",
    [
        (["compact", "{ds}", "--target-batch-records", "1000"], "merged:1", "compact"),
        (["finalize", "{ds}", "--dims", DIMS_A, "--no-compact"], "built:1", "finalize"),
        (["finalize", "{ds}", "--dims", DIMS_A], "merged:1", "compact"),  # finalize's own compaction
    ],
)
def test_killed_compact_or_finalize_shows_interrupted(tmp_path, cmd, fault, kind):
    uri = f"lmdb://{tmp_path}/ds"
    for i in range(3):  # batches of 300 in a dataset of 1000-record batches: compaction merges them
        loader.load(f"gen://scidb96?n=300&start={300 * i}", uri, shards=2, workers=2, batch_records=1000)
    p = run_cli(*[a.format(ds=uri) for a in cmd], "-q", env={"BULKLOAD_FAULT": fault})
    assert p.returncode == -signal.SIGKILL, p.stderr
    killed = manifest(uri)["runs"][-1]
    assert killed["status"] == "running" and killed["kind"] == kind  # as the killed job left it
    runs = json.loads(cli("info", uri, "--json").stdout)["runs"]
    assert runs[-1]["id"] == killed["id"] and runs[-1]["status"] == "interrupted"
    assert "killed or crashed" in runs[-1]["error"]
    assert "interrupted" in cli("info", uri).stdout
    # while a job holds the lock, a running run may be alive: it is shown as it is
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, root_of(uri)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert json.loads(cli("info", uri, "--json").stdout)["runs"][-1]["status"] == "running"
    finally:
        holder.kill()
        holder.wait()
    compact(uri)  # the next writer of any kind records it
    assert [r["status"] for r in manifest(uri)["runs"] if r["id"] == killed["id"]] == ["interrupted"]
    with loader.open(uri) as ds:
        assert ds.verify().ok


@pytest.mark.parametrize("fault", ["collect:1", "collected:1", "deleting:1"])
def test_killed_while_collecting_then_the_next_writer_collects(tmp_path, fault):
    uri = f"rocksdb://{tmp_path}/ds"
    n = small_batches(uri, loads=3)
    p = run_cli("compact", uri, "--target-batch-records", 1000, "-q", env={"BULKLOAD_FAULT": fault})
    assert p.returncode == -signal.SIGKILL, p.stderr
    m = manifest(uri)
    assert len(m["batches"]) == 2 and m["garbage"]  # switched; the garbage still listed
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == gen_bytes(0, n) and ds.verify().ok
    cli("compact", uri)
    m = manifest(uri)
    assert m["garbage"] == [] and batch_keys(uri) == sorted(b[0] for b in m["batches"])
