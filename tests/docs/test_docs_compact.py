"""`bulkload compact` on documents: each shard's document tables folded into one (windows
over interleaved runs, both formats and stores), nothing to do, kills before and after
the manifest switch, and the LMDB table limit lifted by a fold."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from helpers import manifest_json, run_cli, shard_tables, tool

import loader
from loader.docs.batch import DocBatch, sort_by_id
from loader.docs.fold import components, windows
from loader.docs.gen import generate_docs
from loader.docs.json_dir import write_json_dir
from loader.errors import UsageError
from loader.maintain.compact import compact
from loader.model.manifest import BatchEntry
from loader.stores.spec import parse_dataset_uri

SEED, B = 7, 40
KW = dict(shards=2, workers=2, batch_records=B, progress="none")


def interleaved(tmp_path, uri, runs=3, n=360, fmt=None, seed=SEED):
    """`runs` JSON-directory loads whose ids interleave (id mod runs = run); returns all docs."""
    docs = generate_docs(seed, 0, n)
    for r in range(runs):
        d = tmp_path / f"in{r}"
        write_json_dir(docs.take(np.arange(r, n, runs)), d)
        loader.load(str(d), uri, layout="docs", **KW, **({"format": fmt} if fmt else {}))
    return docs


def check(uri, want):
    with loader.open(uri) as ds:
        assert ds.verify().ok
        assert ds.records == len(want)
        assert ds.scan().equals(want)
        for i in want.ids.tolist()[::17]:
            d = ds.get(i)
            assert d.text.encode() == want.text_of(int(np.searchsorted(want.ids, i)))


def manifest_state(uri):
    return manifest_json(parse_dataset_uri(uri).root)


# --- planning --------------------------------------------------------------------------------


def entry(lo, hi, docs, seq=0):
    return BatchEntry(seq, 0, 0, docs, 0, 0, lo, hi, docs, "docs-x", 0)


def test_components_and_windows():
    bs = [entry(0, 99, 50), entry(1, 100, 50), entry(200, 299, 100), entry(150, 210, 10)]
    comps = components(bs)
    assert [[(b.lo, b.hi) for b in c] for c in comps] == [[(0, 99), (1, 100)], [(150, 210), (200, 299)]]
    w = windows(comps[0], 25)
    assert len(w) == 4 and w[0][0] == 0 and w[-1][1] == 100
    assert all(a <= z and z + 1 == a2 for (a, z), (a2, _) in itertools.pairwise(w))
    assert windows(comps[1], 1000) == [(150, 299)]
    assert windows([entry(5, 5, 1)], 1) == [(5, 5)]


# --- folds -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme,fmt", [("lmdb", "block"), ("rocksdb", "block"), ("lmdb", "raw"), ("rocksdb", "raw")])
def test_fold_interleaved_runs(tmp_path, scheme, fmt):
    uri = f"{scheme}://{tmp_path}/ds"
    want = interleaved(tmp_path, uri, fmt=fmt)
    assert all(len(t) == 3 for t in shard_tables(uri))
    rep = compact(uri, target_batch_records=50).to_dict()  # windows much smaller than a shard
    assert rep["status"] == "done" and rep["documents_rewritten"] == len(want)
    assert (rep["tables_before"], rep["tables_after"]) == (3, 1)
    assert rep["text_bytes_rewritten"] == want.text_nbytes
    assert all(s["status"] == "folded" and s["windows"] >= 4 and s["components"] >= 2 for s in rep["shards"]), rep[
        "shards"
    ]
    assert rep["bytes_before"] > 0 and rep["bytes_after"] > 0
    tables = shard_tables(uri)
    assert tables == [[f"docs-{rep['run_id']}"]] * 2
    check(uri, want)
    with loader.open(uri) as ds:
        m = ds.manifest
        assert m.runs[-1].kind == "compact" and m.runs[-1].status == "done"
        assert all(b.table == tables[0][0] and b.seq % 2 == b.shard for b in m.batches)
        assert max(b.docs for b in m.batches) <= 75
    # loads after the fold: above all ids share the folded table; among them get one of their own
    more = generate_docs(SEED, 1000, 60)
    loader.load(f"gen://docs?n=60&seed={SEED}&start=1000", uri, **KW, format=fmt)
    assert shard_tables(uri) == tables
    d = tmp_path / "gaps"
    gaps = generate_docs(SEED, 360, 40)
    write_json_dir(gaps, d)
    loader.load(str(d), uri, layout="docs", **KW)
    check(uri, DocBatch.concat([want, gaps, more]))


def test_split_windows_and_several_components(tmp_path):
    """Ids clustered at both ends of a run's range: the uniform estimate is far off, the
    windows are split; separate id ranges make separate components."""
    uri = f"lmdb://{tmp_path}/ds"
    docs = generate_docs(SEED, 0, 160)
    lone = generate_docs(SEED, 2000, 1)
    parts = [docs, lone]
    d0 = tmp_path / "a"
    write_json_dir(DocBatch.concat([docs.slice(0, 150), lone]), d0)
    loader.load(str(d0), uri, layout="docs", shards=1, workers=1, batch_records=400, progress="none")
    d1 = tmp_path / "b"
    write_json_dir(docs.slice(150, 160), d1)
    loader.load(str(d1), uri, layout="docs", shards=1, workers=1, batch_records=400, progress="none")
    far = generate_docs(SEED, 10_000, 30)
    loader.load(f"gen://docs?n=30&seed={SEED}&start=10000", uri, shards=1, workers=1, batch_records=10, progress="none")
    rep = compact(uri, target_batch_records=10).to_dict()
    s = rep["shards"][0]
    assert s["status"] == "folded" and s["components"] == 4 and s["splits"] >= 1 and s["windows"] >= 7
    want = sort_by_id(DocBatch.concat([*parts, far]))
    check(uri, want)
    with loader.open(uri) as ds:  # batches of about the target (a window of up to 4x is cut in pieces)
        assert max(b.docs for b in ds.manifest.batches) <= 15 and len(ds.manifest.batches) >= 12
    assert shard_tables(uri) == [[f"docs-{rep['run_id']}"]]


def test_nothing_to_do_and_force(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://docs?n=200&seed={SEED}", uri, **KW)
    loader.load(f"gen://docs?n=100&seed={SEED}&start=200", uri, **KW)  # above: shares the table
    before = manifest_state(uri)
    rep = compact(uri).to_dict()
    assert rep["status"] == "nothing-to-do" and rep["run_id"] is None and rep["documents_rewritten"] == 0
    assert [s["status"] for s in rep["shards"]] == ["nothing to do"] * 2
    assert manifest_state(uri) == before
    p = run_cli("compact", uri)
    assert p.returncode == 0 and "nothing to do" in p.stdout, p.stderr
    p = run_cli("compact", uri, "--force", "--json", "-q")
    rep = json.loads(p.stdout)
    assert rep["status"] == "done" and rep["documents_rewritten"] == 300
    assert shard_tables(uri) == [[f"docs-{rep['run_id']}"]] * 2
    check(uri, generate_docs(SEED, 0, 300))
    with pytest.raises(UsageError, match="--target-batch-records must be at least 1"):
        compact(uri, target_batch_records=0)


def test_cli_compact_output(tmp_path):
    uri = f"rocksdb://{tmp_path}/ds"
    want = interleaved(tmp_path, uri, runs=2, n=120)
    p = run_cli("compact", uri)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"compacted {uri}: folded 120 documents") and "tables per shard 2 -> 1" in p.stdout
    check(uri, want)


# --- kills -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["w0.fold:2", "docs-folded:1", "docs-switched:1", "docs-dropping:1"])
def test_killed_compaction_then_rerun_or_load(tmp_path, fault):
    uri = f"lmdb://{tmp_path}/ds"
    want = interleaved(tmp_path, uri, runs=3, n=240)
    before = manifest_state(uri)["batches"]
    p = run_cli("compact", uri, "--target-batch-records", "30", "-q", env={"BULKLOAD_FAULT": fault})
    assert p.returncode in (-9, 1), p.stderr  # a killed worker: the coordinator exits 1
    switched = fault in ("docs-switched:1", "docs-dropping:1")
    m = manifest_state(uri)
    assert (m["batches"] != before) == switched
    check(uri, want)  # readers see a consistent dataset either way
    tables = shard_tables(uri)
    assert all(len(t) in (3, 4) for t in tables) or switched  # old 3 (+ the new one), or some dropped
    if fault == "docs-folded:1":  # the next writer drops the new, unreferenced tables
        assert all(len(t) == 4 for t in tables)
        loader.load(f"gen://docs?n=30&seed={SEED}&start=1000", uri, **KW)
        assert all(len(t) == 3 for t in shard_tables(uri))  # the load above all ids shares the top table
        want = DocBatch.concat([want, generate_docs(SEED, 1000, 30)])
        check(uri, want)
    if switched:
        loader.load(f"gen://docs?n=30&seed={SEED}&start=1000", uri, **KW)  # drops the old tables
        assert shard_tables(uri) == [[t for t in ts if t in {b[9] for b in m["batches"]}] for ts in tables]
        want = DocBatch.concat([want, generate_docs(SEED, 1000, 30)])
        check(uri, want)
    rep = compact(uri, target_batch_records=30).to_dict()
    assert rep["status"] == ("nothing-to-do" if switched else "done")
    assert all(len(t) == 1 for t in shard_tables(uri))
    check(uri, want)


def test_killed_before_switch_then_compact_again(tmp_path):
    uri = f"rocksdb://{tmp_path}/ds"
    want = interleaved(tmp_path, uri, runs=2, n=160, fmt="raw")
    p = subprocess.run(
        [tool("bulkload"), "compact", uri, "-q"],
        env=dict(os.environ, BULKLOAD_FAULT="docs-folded:1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    assert all(len(t) == 3 for t in shard_tables(uri))
    rep = compact(uri).to_dict()
    assert all(s["leftovers_dropped"] == 1 for s in rep["shards"])  # the killed run's table
    assert shard_tables(uri) == [[f"docs-{rep['run_id']}"]] * 2
    check(uri, want)


# --- the LMDB table limit --------------------------------------------------------------------------


def test_table_limit_then_compact_then_load(tmp_path):
    uri = f"lmdb://{tmp_path}/ds?max_dbs=3"
    loader.load(f"gen://docs?n=50&seed={SEED}&start=1000", uri, **KW)  # meta, docs-1
    loader.load(f"gen://docs?n=50&seed={SEED}&start=0", uri, **KW)  # below: docs-2
    with pytest.raises(
        UsageError, match=r"or run `bulkload compact DATASET` to fold them into one table per shard, then load again"
    ):
        loader.load(f"gen://docs?n=50&seed={SEED}&start=100", uri, **KW)
    rep = compact(uri).to_dict()
    assert (rep["tables_before"], rep["tables_after"]) == (2, 1)
    loader.load(f"gen://docs?n=50&seed={SEED}&start=100", uri, **KW)  # now it fits
    want = sort_by_id(
        DocBatch.concat([generate_docs(SEED, 1000, 50), generate_docs(SEED, 0, 50), generate_docs(SEED, 100, 50)])
    )
    check(uri, want)


def test_a_killed_load_before_compaction_is_loaded_again_after_it(tmp_path):
    """Compaction drops the tables of unfinished runs (their pending batches are void): the
    rerun of a killed load starts over instead of resuming, and ends complete."""
    uri = f"lmdb://{tmp_path}/ds"
    want = interleaved(tmp_path, uri, runs=2, n=200)
    d = tmp_path / "late"
    late = generate_docs(SEED, 200, 200).take(np.arange(0, 200, 2))  # above the stored ids: the shared table
    write_json_dir(late, d)
    env = dict(os.environ, BULKLOAD_FAULT="checkpoint:2", BULKLOAD_CHECKPOINT_SECONDS="0")
    p = subprocess.run(
        [tool("bulkload"), "load", str(d), uri, "--shards", "2", "--workers", "2", "--batch-records", "20", "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    rep = compact(uri).to_dict()
    assert rep["status"] == "done" and all(len(t) == 1 for t in shard_tables(uri))
    check(uri, want)
    rep = loader.load(str(d), uri, **KW)
    assert rep.records == 100 and not rep.resumed_records
    check(uri, DocBatch.concat([want, late]))


@pytest.fixture(scope="module")
def docs_base(tmp_path_factory):
    """Three interleaved runs (a table each per shard), and the state `bulkload compact`
    leaves on a copy of it: (base dir, the documents, the reference's rows)."""
    base = tmp_path_factory.mktemp("docsbase")
    want = interleaved(base, f"lmdb://{base}/ds", runs=3, n=240)
    ref = tmp_path_factory.mktemp("docsref")
    shutil.copytree(base / "ds", ref / "ds")
    p = run_cli("compact", f"lmdb://{ref}/ds", "--target-batch-records", 30, "--workers", 2, "-q")
    assert p.returncode == 0, p.stderr
    return base, want, folded_rows(f"lmdb://{ref}/ds")


def folded_rows(uri):
    """The batch rows, each with its table named by the compaction run that wrote it."""
    m = manifest_state(uri)
    runs = {r["id"]: r["kind"] for r in m["runs"]}
    return [[*b[:9], runs.get(b[9].removeprefix("docs-"), b[9]), *b[10:]] for b in m["batches"]]


@pytest.mark.parametrize("fault", ["w1.fold:1", "docs-folded:1", "docs-switched:1", "docs-dropping:1"])
def test_killed_compaction_rerun_is_byte_identical_and_leaves_no_rows_files(tmp_path, docs_base, fault):
    base, want, ref_rows = docs_base
    shutil.copytree(base / "ds", tmp_path / "ds")
    uri = f"lmdb://{tmp_path}/ds"
    args = ["compact", uri, "--target-batch-records", 30, "--workers", 2, "-q"]
    p = run_cli(*args, env={"BULKLOAD_FAULT": fault})
    assert p.returncode in (-9, 1), p.stderr
    if fault == "docs-folded:1":  # the new rows are written, not switched to
        assert len(list((tmp_path / "ds").glob(".compact-rows-*"))) == 2
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr
    check(uri, want)
    assert folded_rows(uri) == ref_rows  # the same batches, bytes and checksums as one compaction
    assert not list((tmp_path / "ds").glob(".compact-rows-*"))
    assert all(len(t) == 1 for t in shard_tables(uri))


def test_small_batches_of_disjoint_ids_are_folded_into_batches_of_the_target(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://docs?n=400&seed={SEED}", uri, shards=2, workers=2, batch_records=5, progress="none")
    rep = compact(uri, target_batch_records=50).to_dict()
    assert (rep["batches_before"], rep["batches_after"]) == (80, 8)
    with loader.open(uri) as ds:
        assert sorted(b.docs for b in ds.manifest.batches) == [50] * 8
    check(uri, generate_docs(SEED, 0, 400))
    assert compact(uri, target_batch_records=50).to_dict()["status"] == "nothing-to-do"
