"""Time travel (model/catalog_history.py): ``loader.open(uri, as_of=...)`` and
``bulkload info --as-of`` read the dataset as it stood after an earlier commit - by
generation or run id - while its data was not garbage-collected; else
SnapshotExpiredError, one line, naming the oldest readable generation. A reader that pins
a generation keeps it readable through a compaction."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli

import loader
from loader.errors import SnapshotExpiredError
from loader.model.layouts import get_layout
from loader.sources.generators import generate


def gen_bytes(start, n):
    return generate(get_layout("scidb96"), start, n, impl="c").tobytes()


@pytest.fixture
def history(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    gens, runs = [], []
    for i in range(3):
        loader.load(f"gen://scidb96?n=400&start={400 * i}", uri, shards=2, workers=1, batch_records=100)
        with loader.open(uri) as ds:
            gens.append(ds.manifest.generation)
            runs.append(ds.manifest.runs[-1].id)
    return uri, gens, runs


def test_as_of_reads_the_dataset_as_it_stood_after_that_commit(history):
    uri, gens, runs = history
    for i, (g, run) in enumerate(zip(gens, runs, strict=True)):
        for as_of in (g, run, str(g)):
            with loader.open(uri, as_of=as_of) as ds:
                assert ds.records == 400 * (i + 1) and ds.manifest.generation == g
                assert len(ds.manifest.batches) == 4 * (i + 1) and len(ds.manifest.runs) == i + 1
                assert ds.read_records().tobytes() == gen_bytes(0, 400 * (i + 1))
                assert ds.verify().ok
        d = json.loads(run_cli("info", uri, "--as-of", run, "--json").stdout)
        assert (d["records"], d["generation"]) == (400 * (i + 1), g)


def test_a_run_id_of_decimal_digits_names_its_run_not_a_generation(tmp_path, monkeypatch):
    # a run id is 12 hex digits: about 1 in 280 has only decimal ones (seen once in CI)
    import uuid

    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=400", uri, shards=2, workers=1, batch_records=100)
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID("931124938232" + "0" * 20))
    loader.load("gen://scidb96?n=400&start=400", uri, shards=2, workers=1, batch_records=100)
    monkeypatch.undo()
    with loader.open(uri) as ds:
        run, now = ds.manifest.runs[-1].id, ds.manifest.generation
    assert run == "931124938232"
    for as_of in (run, str(now), now):
        with loader.open(uri, as_of=as_of) as ds:
            assert ds.manifest.generation == now and ds.records == 800
    d = json.loads(run_cli("info", uri, "--as-of", run, "--json").stdout)
    assert (d["records"], d["generation"]) == (800, now)


def test_as_of_a_collected_generation_is_expired_naming_the_oldest_readable(history):
    uri, gens, runs = history
    assert run_cli("compact", uri, "--target-batch-records", 1200, "-q").returncode == 0  # deletes the old batches
    with loader.open(uri) as ds:
        now = ds.manifest.generation
        assert ds.records == 1200 and len(ds.manifest.batches) == 1
    with pytest.raises(SnapshotExpiredError, match=r"the oldest readable generation is \d+"):
        loader.open(uri, as_of=gens[-1])
    p = run_cli("info", uri, "--as-of", runs[0])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 1 and len(lines) == 1 and "oldest readable generation" in lines[0], p.stderr
    with pytest.raises(SnapshotExpiredError, match=f"the dataset is at generation {now}"):
        loader.open(uri, as_of=now + 5)
    with pytest.raises(SnapshotExpiredError, match="no commit of run 'nosuchrun'"):
        loader.open(uri, as_of="nosuchrun")


def test_a_pinned_generation_stays_readable_through_a_compaction(history):
    uri, gens, _ = history
    reader = loader.open(uri)  # pins the last generation
    try:
        assert run_cli("compact", uri, "--target-batch-records", 1200, "-q").returncode == 0
        with loader.open(uri, as_of=gens[-1]) as old:
            assert len(old.manifest.batches) == 12 and old.read_records().tobytes() == gen_bytes(0, 1200)
            assert old.verify().ok
    finally:
        reader.close()


def test_keep_snapshots_keeps_the_last_generations_readable_through_compact_and_finalize(history):
    """`--keep-snapshots K` (compact, finalize; kept in the catalog for every later writer)
    keeps the data of the K generations before the current one readable with no reader
    open; 0 gives it back to the collector."""
    uri, gens, _ = history
    assert run_cli("compact", uri, "--target-batch-records", 1200, "--keep-snapshots", 5, "-q").returncode == 0
    assert run_cli("finalize", uri, "--dims", "i0:10,i1:1000", "-q").returncode == 0  # its compaction: no-op
    assert run_cli("compact", uri, "--force", "-q").returncode == 0  # a later writer collects what it may
    for i, g in enumerate(gens[1:], start=1):
        with loader.open(uri, as_of=g) as old:
            assert len(old.manifest.batches) == 4 * (i + 1)
            assert old.read_records().tobytes() == gen_bytes(0, 400 * (i + 1)) and old.verify().ok
    p = run_cli("compact", uri, "--keep-snapshots", -1)
    assert p.returncode == 2 and "--keep-snapshots" in p.stderr and "Traceback" not in p.stderr
    assert run_cli("compact", uri, "--force", "--keep-snapshots", 0, "-q").returncode == 0
    with pytest.raises(SnapshotExpiredError):
        loader.open(uri, as_of=gens[-1])


def test_runs_shows_the_generation_each_readable_commit_is_read_at(history):
    uri, gens, runs = history
    listed = {r.id: r.as_of for r in loader.runs(uri)}
    assert [listed[r] for r in runs] == gens
    assert run_cli("compact", uri, "--target-batch-records", 1200, "-q").returncode == 0
    assert run_cli("compact", uri, "--force", "-q").returncode == 0  # collects the first one's garbage
    found = loader.runs(uri)
    assert [r.as_of for r in found if r.id in runs] == [None, None, None]  # their data is gone
    assert found[0].kind == "compact" and found[0].as_of is not None
    with loader.open(uri, as_of=found[0].as_of) as ds:
        assert ds.read_records().tobytes() == gen_bytes(0, 1200)
    assert "as-of" in run_cli("runs", uri).stdout
