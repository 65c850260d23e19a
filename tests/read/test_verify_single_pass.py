"""`verify` reads every flat batch once, however many arrays were built from them.

The pass that checks the batches (size, xxh3, decode) also sums the records each array
was built from (arrays/verify.py `FlatSums`); the arrays' checks then compare those sums
with their cells instead of reading the batches again. Counted, not timed: the store
reads of flat batches are counted (the stores are real; only the count is wrapped), on
LMDB, RocksDB and mem://, locally and in the Dask task's entry point (run in process).
A damaged flat batch still gives the report it gave before: the batch's row, and the
"not compared" row of every array built from it - and only of those (arrays built from
fewer records do not need it). A batch that compaction merged across an array's
``built_from_records`` is summed in part. Verifying a finalized dataset does not import
pandas (pyarrow's own to_numpy would, ~0.3 s).
"""

import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace

import pytest
from helpers import run_cli

import loader
from loader.api.verify_tasks import ShardCheck, check_shard
from loader.model.placement import batch_key
from loader.stores.lmdb_reads import LmdbReads
from loader.stores.rocksdb_store import RocksdbStore
from loader.stores.spec import parse_dataset_uri
from loader.stores.values import ValueReader

N, BATCH, MORE = 3000, 300, 600  # records of the arrays, per batch, loaded after finalize
NOT_COMPARED = "not compared with the flat records it was built from: some of them are damaged"


@pytest.fixture
def batch_reads(monkeypatch):
    """Counter of (shard path, key) of every read of a flat batch from a store: a store's
    own `get` of table ``batches``, and a zero-copy read through a ValueReader of it."""
    reads = Counter()

    def store_get(orig):
        def get(self, key, table="batches"):
            if table == "batches":
                reads[(self.path, bytes(key))] += 1
            return orig(self, key, table)

        return get

    def view_get(orig):
        def get(self, key):
            if self.view is not None and self.table == "batches":  # else store.get counts it
                reads[(self.store.path, bytes(key))] += 1
            return orig(self, key)

        return get

    monkeypatch.setattr(LmdbReads, "get", store_get(LmdbReads.get))
    monkeypatch.setattr(RocksdbStore, "get", store_get(RocksdbStore.get))
    monkeypatch.setattr(ValueReader, "get", view_get(ValueReader.get))
    return reads


def two_arrays(uri, more=MORE):
    """N records finalized as 'grid' and as 'k' (keep), then ``more`` records loaded."""
    loader.load(f"gen://scidb96?n={N}", uri, shards=2, workers=2, batch_records=BATCH)
    loader.finalize(uri, dims="i0:10,i1:100", workers=2)
    loader.finalize(uri, dims="i2:10,i3:1000", array="k", duplicates="keep", workers=1, compact=False)
    if more:
        loader.load(f"gen://scidb96?n={more}&start={N}", uri, workers=1, batch_records=BATCH)


def every_batch_once(uri):
    """{(shard path, key): 1} for every committed batch of the dataset."""
    with loader.open(uri) as ds:
        return {(ds.spec.shard_path(b.shard), batch_key(b.seq)): 1 for b in ds.manifest.batches}


def normalized(reads):
    """The counts by real path of the shard (a store may name its shard by another path)."""
    out = Counter()
    for (path, key), n in reads.items():
        out[(os.path.realpath(path), key)] += n
    return dict(out)


def test_verify_reads_each_flat_batch_once_with_two_arrays(store_uri, batch_reads):
    two_arrays(store_uri)
    with loader.open(store_uri) as ds:
        assert sorted(ds.manifest.arrays) == ["grid", "k"] and ds.records == N + MORE
        batch_reads.clear()
        rep = ds.verify()
    assert rep.ok, rep.problems
    assert normalized(batch_reads) == normalized(every_batch_once(store_uri))


@pytest.mark.parametrize("store", ["lmdb", "rocksdb"])
def test_the_dask_task_reads_its_shards_batches_once(tmp_path, store, batch_reads):
    uri = f"{store}://{tmp_path}/ds"
    two_arrays(uri)
    with loader.open(uri) as ds:
        m = ds.manifest
        local = ds.verify().to_dict()
        batch_reads.clear()
        results = [
            check_shard(ShardCheck(ds.uri, s, replace(m, batches=[b for b in m.batches if b.shard == s])), None)
            for s in range(m.shards)
        ]
        assert normalized(batch_reads) == normalized(every_batch_once(uri))
        dask = ds.verify_report([p for batches, _ in results for p in batches], [parts for _, parts in results])
    assert dask.to_dict() == local and local["ok"]


def damage(uri, pick, how):
    """Damage the flat batch ``pick(batches)``: flip a byte, delete it, or cut it short."""
    with loader.open(uri) as ds:
        b = pick(ds.manifest.batches)
        k = ds.manifest.shards
    st = parse_dataset_uri(uri).with_shards(k).open_shard(b.shard, write=True)
    try:
        key = batch_key(b.seq)
        if how == "deleted":
            st.delete_range(key, batch_key(b.seq + 1))
        else:
            value = bytearray(st.get(key))
            if how == "flipped":
                value[len(value) // 2] ^= 0xFF
            else:
                del value[-64:]
            st.put_sorted([(key, bytes(value))])
        st.sync()
    finally:
        st.close()
    return b


BATCH_PROBLEM = {
    "flipped": "checksum mismatch (stored bytes changed)",
    "deleted": "missing from the store",
    "cut": "size {short} != {nbytes} in the manifest",
}


def report_of(uri):
    with loader.open(uri) as ds:
        return ds.verify().to_dict()


def array_row(name):
    return {
        "array": name,
        "chunk": "-",
        "shard": "-",
        "batch": "-",
        "first_record": "-",
        "problem": f"array {name!r}: {NOT_COMPARED}",
    }


@pytest.mark.parametrize("how", ["flipped", "deleted", "cut"])
@pytest.mark.parametrize("store", ["lmdb", "rocksdb"])
def test_a_damaged_batch_is_reported_with_every_array_built_from_it(tmp_path, store, how):
    uri = f"{store}://{tmp_path}/ds"
    two_arrays(uri)
    b = damage(uri, lambda bs: [b for b in bs if b.first < N][4], how)
    rep = report_of(uri)
    problem = BATCH_PROBLEM[how].format(short=b.nbytes - 64, nbytes=b.nbytes)
    assert not rep["ok"]
    assert rep["problems"] == [
        {"shard": b.shard, "batch": b.seq, "first_record": b.first, "problem": problem},
        array_row("grid"),
        array_row("k"),
    ]
    p = run_cli("verify", uri)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert f"array 'k': {NOT_COMPARED}" in p.stdout + p.stderr


@pytest.mark.parametrize("where,arrays", [("below both", ["grid", "k"]), ("below k only", ["k"]), ("above both", [])])
def test_only_the_arrays_built_from_a_damaged_batch_are_not_compared(tmp_path, where, arrays):
    """grid is built from the first N records, k from the first N + MORE; then MORE more
    are loaded: a damaged batch matters to the arrays whose records it holds."""
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N}", uri, shards=2, workers=2, batch_records=BATCH)
    loader.finalize(uri, dims="i0:10,i1:100", workers=2)
    loader.load(f"gen://scidb96?n={MORE}&start={N}", uri, workers=1, batch_records=BATCH)
    loader.finalize(uri, dims="i2:10,i3:1000", array="k", duplicates="keep", workers=1, compact=False)
    loader.load(f"gen://scidb96?n={MORE}&start={N + MORE}", uri, workers=1, batch_records=BATCH)
    lo, hi = {"below both": (0, N), "below k only": (N, N + MORE), "above both": (N + MORE, N + 2 * MORE)}[where]
    with loader.open(uri) as ds:
        assert {a: s["built_from_records"] for a, s in ds.manifest.arrays.items()} == {"grid": N, "k": N + MORE}
    b = damage(uri, lambda bs: next(b for b in bs if lo <= b.first < hi), "flipped")
    rep = report_of(uri)
    assert [p["problem"] for p in rep["problems"]] == [BATCH_PROBLEM["flipped"]] + [
        f"array {a!r}: {NOT_COMPARED}" for a in arrays
    ]
    assert rep["problems"][0]["batch"] == b.seq


def test_a_batch_merged_across_an_arrays_records_is_summed_in_part(tmp_path):
    """compact merges the batches after finalize into ones that straddle the N records
    grid was built from: its check sums only the first part of such a batch."""
    uri = f"rocksdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N - 150}", uri, shards=2, workers=2, batch_records=BATCH)
    loader.finalize(uri, dims="i0:10,i1:100", workers=2)
    loader.load(f"gen://scidb96?n={MORE + 150}&start={N - 150}", uri, workers=1, batch_records=100)
    loader.compact(uri, target_batch_records=1000)
    with loader.open(uri) as ds:
        built = ds.manifest.arrays["grid"]["built_from_records"]
        straddling = [b for b in ds.manifest.batches if b.first < built < b.first + b.count]
        assert straddling, [(b.first, b.count) for b in ds.manifest.batches]
        assert ds.verify().ok
    damage(uri, lambda bs: straddling[0], "flipped")
    assert [p["problem"] for p in report_of(uri)["problems"]] == [
        BATCH_PROBLEM["flipped"],
        f"array 'grid': {NOT_COMPARED}",
    ]


def test_verify_of_a_finalized_dataset_does_not_import_pandas(tmp_path):
    pytest.importorskip("pandas")  # only then could pyarrow import it
    uri = f"lmdb://{tmp_path}/ds"
    two_arrays(uri, more=0)
    code = f"import sys, loader\nassert loader.verify({uri!r}).ok\nprint('pandas' in sys.modules)\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"
    p = run_cli("verify", uri)
    assert p.returncode == 0, p.stderr
