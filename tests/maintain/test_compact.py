"""Compaction: merging small batches, store compaction, and finalize's compaction step."""

import json

import pytest
from helpers import run_cli

import loader
from loader.arrays.finalize import finalize
from loader.maintain.compact import compact, plan_merge
from loader.model.layouts import get_layout
from loader.model.manifest import BatchEntry
from loader.sources.generators import generate

LAY = get_layout("scidb96")


def small_loads(uri, loads=7, each=300, **kw):
    loader.load(f"gen://scidb96?n={each}", uri, shards=2, batch_records=1000, **kw)
    for i in range(1, loads):
        loader.load(f"gen://scidb96?n={each}&start={i * each}", uri)


def test_plan_merge_groups_consecutive_batches():
    bs = [BatchEntry(s, s % 2, s * 300, 300, 0, 0) for s in range(7)]
    assert [[b.seq for b in g] for g in plan_merge(bs, 1000)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [len(g) for g in plan_merge(bs, 300)] == [1] * 7
    assert [len(g) for g in plan_merge(bs, 10**6)] == [7]


@pytest.mark.parametrize("store,fmt", [("lmdb", "capnp"), ("rocksdb", "arrow")])
def test_compact_merges_small_batches(tmp_path, store, fmt):
    uri = f"{store}://{tmp_path}/ds"
    small_loads(uri, format=fmt)
    with loader.open(uri) as ds:
        before = ds.read_records().tobytes()
        assert len(ds.manifest.batches) == 7
    rep = compact(uri, workers=2)
    assert (rep.batches_before, rep.batches_after, rep.merged) == (7, 3, True)
    assert rep.bytes_before > 0 and rep.bytes_after > 0
    assert all(s["compacted"] for s in rep.shards)
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == before == generate(LAY, 0, 2100, impl="c").tobytes()
        assert [(b.first, b.count) for b in ds.manifest.batches] == [(0, 900), (900, 900), (1800, 300)]
        assert all(b.shard == b.seq % 2 for b in ds.manifest.batches)
        assert ds.verify().ok
        # only the listed batches remain in the stores
        keys = sorted(int.from_bytes(k, "big") for s in range(2) for k, _ in ds.shard(s).range())
        assert keys == sorted(b.seq for b in ds.manifest.batches)
        assert ds.manifest.runs[-1].kind == "compact" and ds.manifest.runs[-1].status == "done"
    # appending after a compaction continues the numbering
    loader.load("gen://scidb96?n=500&start=2100", uri)
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == generate(LAY, 0, 2600, impl="c").tobytes()
        assert ds.verify().ok
    rep = compact(uri, target_batch_records=900)  # 900, 900, 300 + 500
    assert rep.merged and rep.batches_after == 3
    # nothing left to merge: a second compaction keeps the batches
    rep = compact(uri, target_batch_records=900)
    assert not rep.merged and rep.batches_after == rep.batches_before == 3
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == generate(LAY, 0, 2600, impl="c").tobytes()


def test_finalize_compacts_first_unless_told_not_to(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    small_loads(uri, loads=4, each=250)
    rep = finalize(uri, dims="i0:10,i1:100", workers=2, compact=False)
    assert rep.compact is None
    with loader.open(uri) as ds:
        assert len(ds.manifest.batches) == 4
    rep = finalize(uri, dims="i0:10,i1:100", workers=2)
    assert rep.compact["batches_before"] == 4 and rep.compact["batches_after"] == 1
    assert rep.status == "nothing-to-do"  # the array holds every record already: not rebuilt
    rep = finalize(uri, dims="i0:10,i1:100", workers=2, force=True)
    assert rep.status == "done" and rep.compact["status"] == "nothing-to-do"
    with loader.open(uri) as ds:
        assert ds.read_box(i1=(0, 1000)).num_rows == 1000
        assert ds.verify().ok
        kinds = [r.kind for r in ds.manifest.runs]
        assert kinds[-3:] == ["finalize", "compact", "finalize"]


def test_compact_keeps_arrays_and_reports_bytes(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=20000", uri, shards=2, batch_records=2000)
    finalize(uri, dims="i0:10,i1:1000", workers=2)
    finalize(uri, dims="i0:10,i1:5000", workers=2)  # the first build's pages are now free
    rep = compact(uri, force=True)
    assert rep.bytes_after < rep.bytes_before
    with loader.open(uri) as ds:
        assert ds.read_box(i1=(100, 200)).num_rows == 100
        assert ds.verify().ok


def test_cli_compact(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    small_loads(uri, loads=3, each=200)
    r = run_cli("compact", uri, "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["batches_before"] == 3 and rep["batches_after"] == 1
    r = run_cli("compact", uri)
    assert r.returncode == 0 and r.stdout.startswith(f"nothing to do: {uri} has no small batches to merge")
    r = run_cli("compact", uri, "--force")
    assert r.returncode == 0 and r.stdout.startswith(f"compacted {uri}: 1 -> 1 batches")
    r = run_cli("compact", uri, "--target-batch-records", "0")
    assert r.returncode == 2 and "at least 1" in r.stderr


# the commands that take the dataset lock to write, after a compaction killed with its rows files written
NEXT_WRITERS = {
    "load": ["load", "gen://scidb96?n=300&start=2100", "{ds}", "-q"],
    "finalize": ["finalize", "{ds}", "--dims", "i0:3,i1:700", "--no-compact", "-q"],
    "runs-prune": ["runs", "prune", "{ds}", "--keep", "100"],
    "compact": ["compact", "{ds}", "-q"],
}


@pytest.mark.parametrize("writer", sorted(NEXT_WRITERS))
def test_rows_files_of_a_killed_compaction_are_removed_by_the_next_writer(tmp_path, writer):
    uri = f"lmdb://{tmp_path}/ds"
    small_loads(uri)
    p = run_cli("compact", uri, "--workers", 2, "-q", env={"BULKLOAD_FAULT": "merged:1"})
    assert p.returncode == -9, p.stderr

    def rows_files():
        return sorted(f.name for f in (tmp_path / "ds").glob(".compact-rows-*"))

    assert len(rows_files()) == 2  # one per merge worker
    for cmd in (["verify", uri], ["info", uri]):  # readers do not trip on them
        p = run_cli(*cmd)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stdout + p.stderr
    p = run_cli(*[a.format(ds=uri) for a in NEXT_WRITERS[writer]])
    assert p.returncode == 0, p.stderr
    assert rows_files() == []
    assert run_cli("verify", uri).returncode == 0
