"""loader/docs/access.py: which batches hold an id (`DocIndex`, against brute force), document
ids checked, ids already stored refused per file or for a generator range, the blocks
that hold a range of ids, a batch's documents read back (and checked when whole), and a
failed run's documents dropped from every shard - on real stores."""

from __future__ import annotations

import itertools
import os
import subprocess

import numpy as np
import pytest
from helpers import tool
from hypothesis import given
from hypothesis import strategies as st

import loader
from loader.docs.access import MAX_ID, DocIndex, DocReader, blocks_from, check_id, discard_run, stored_duplicates
from loader.docs.batch import id_of_key, key_of
from loader.docs.blocks import BlockReader
from loader.docs.gen import generate_docs
from loader.docs.json_dir import scan_json_dir, write_json_dir
from loader.docs.sources import GenDocsSource, JsonDirSource
from loader.docs.tables import doc_tables, load_dictionary
from loader.errors import BadFileError, CorruptBatchError, DuplicateIdError, UsageError
from loader.model.manifest import BatchEntry
from loader.stores.spec import parse_dataset_uri

SEED, N = 5, 200
KW = dict(shards=2, workers=1, batch_records=40, progress="none")


def entry(seq, lo, hi, docs=1):
    return BatchEntry(seq, 0, 0, docs, 0, 0, lo, hi, docs, "docs-x", 0)


ranges = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=12)


@given(ranges, st.integers(0, 90), st.integers(0, 30))
def test_doc_index_finds_exactly_the_batches_that_hold_an_id(spans, x, width):
    batches = [entry(seq, lo, lo + n) for seq, (lo, n) in enumerate(spans)] + [entry(99, 5, 5, docs=0)]
    index = DocIndex(batches)
    holding = [b for b in batches if b.docs and b.lo <= x <= b.hi]
    got = index.candidates(x)
    assert sorted(b.seq for b in got) == sorted(b.seq for b in holding)
    assert [(b.lo, b.seq) for b in got] == sorted(((b.lo, b.seq) for b in got), reverse=True)  # newest first
    a, z = x, x + width
    want = sorted((b for b in batches if b.docs and b.lo <= z and b.hi >= a), key=lambda b: (b.lo, b.seq))
    assert [b.seq for b in index.overlapping(a, z)] == [b.seq for b in want]


def test_check_id():
    assert [check_id(v) for v in (0, "42", 7.0, MAX_ID, str(MAX_ID))] == [0, 42, 7, MAX_ID, MAX_ID]
    for bad, why in [
        ("x", "'x' is not an integer"),
        (None, "None is not an integer"),
        ("1.5", "'1.5' is not an integer"),
        (-1, "-1 is out of range"),
        (MAX_ID + 1, f"{MAX_ID + 1} is out of range"),
    ]:
        with pytest.raises(UsageError, match=f"document id {why}"):
            check_id(bad)


def loaded(uri, fmt="block"):
    loader.load(f"gen://docs?n={N}&seed={SEED}", uri, format=fmt, **KW)
    with loader.open(uri) as ds:
        return ds.manifest


@pytest.mark.parametrize("fmt", ["block", "raw"])
def test_stored_ids_are_refused_per_file_or_for_a_range(store_uri, tmp_path, fmt):
    m = loaded(store_uri, fmt)
    spec = parse_dataset_uri(store_uri).with_shards(m.shards)
    write_json_dir(generate_docs(SEED, 150, 100), tmp_path / "in")  # ids 150..249: 150..199 are stored
    listing, _ = scan_json_dir(tmp_path / "in")
    src = JsonDirSource(str(tmp_path / "in"))
    with pytest.raises(
        BadFileError,
        match=r"/150\.json: duplicate id 150: a document with this id is already "
        r"stored in the dataset \(and 49 more bad file\(s\)\); nothing was loaded",
    ):
        stored_duplicates(spec, m, src, listing, [], "fail")
    earlier = [{"path": str(tmp_path / "in" / "0.json"), "reason": "an earlier one"}]
    entries, skipped = stored_duplicates(spec, m, src, listing, earlier, "skip")
    assert entries.ids.tolist() == list(range(200, 250))
    assert [s["path"] for s in skipped] == sorted(
        [earlier[0]["path"]] + [str(tmp_path / "in" / f"{i}.json") for i in range(150, 200)]
    )
    # compare (ingest): handed the stored ids' files; what it returns is bad, the rest is left out
    seen = []
    entries, skipped = stored_duplicates(
        spec, m, src, listing, [], "skip", compare=lambda found: seen.extend(found) or []
    )
    assert [i for i, _ in seen] == list(range(150, 200)) and entries.ids.tolist() == list(range(200, 250))
    assert skipped == []
    # only new ids: nothing read, nothing refused
    assert stored_duplicates(spec, m, src, listing[50:], [], "fail")[0] == listing[50:]
    # a generator: its range overlaps (DuplicateIdError) or not
    with pytest.raises(
        DuplicateIdError,
        match=r"gen://docs\?n=10&start=195&seed=0: ids 195\.\.204 overlap "
        r"documents already stored in .* \(e\.g\. id 195\); nothing was loaded",
    ):
        stored_duplicates(spec, m, GenDocsSource(10, 195), None, [], "fail")
    assert stored_duplicates(spec, m, GenDocsSource(10, 200), None, [], "fail") == (None, [])


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_blocks_from_yields_the_blocks_that_hold_a_range(tmp_path, scheme):
    uri = f"{scheme}://{tmp_path}/ds"
    m = loaded(uri)
    reader = BlockReader()
    b = m.batches[0]
    st = parse_dataset_uri(uri).with_shards(m.shards).open_shard(b.shard, write=False)
    try:
        every = [(bytes(k), bytes(v)) for k, v in st.range(table=b.table)]
        spans = [(int(reader.columns(v)[0][0]), id_of_key(k)) for k, v in every]  # (first, last) id
        gaps = [(a[1] + 1, z[0] - 1) for a, z in itertools.pairwise(spans) if z[0] > a[1] + 1]  # between batches
        assert len(every) > 2 and gaps
        for lo, hi in [
            (0, MAX_ID),
            (spans[1][0], spans[1][0]),
            (spans[0][1], spans[1][0]),
            (spans[1][1] + 1, 10**9),
            (spans[-1][1] + 1, MAX_ID),
            (spans[0][0] + 1, spans[-1][1] - 1),
            *gaps,
            (gaps[0][0], gaps[0][0]),
            (gaps[0][1], gaps[0][1] + 1),
        ]:
            want = [kv for kv, (first, last) in zip(every, spans, strict=True) if last >= lo and first <= hi]
            assert [(bytes(k), bytes(v)) for k, v in blocks_from(st, b.table, lo, hi)] == want, (lo, hi)
    finally:
        st.close()


@pytest.mark.parametrize("fmt", ["block", "raw", "capnp"])
def test_batch_docs_reads_a_range_back_and_checks_a_whole_batch(store_uri, fmt):
    want = generate_docs(SEED, 0, N)
    loaded(store_uri, fmt)
    with loader.open(store_uri) as ds:
        reader = DocReader(ds)
        for b in ds.manifest.batches:
            got = reader.batch_docs(b, b.lo, b.hi)
            assert got.equals(want.slice(b.lo, b.hi + 1))
            mid = (b.lo + b.hi) // 2
            assert reader.batch_docs(b, mid, mid + 1).equals(want.slice(mid, mid + 2))
        b = ds.manifest.batches[-1]
    st = parse_dataset_uri(store_uri).with_shards(2).open_shard(b.shard, write=True)
    try:  # one stored value of the batch changed: a whole-batch read names the batch
        k, v = next(iter(st.range(key_of(b.hi), None, table=b.table)))
        st.put_sorted([(bytes(k), bytes(v) + b"\0")], table=b.table)
    finally:
        st.close()
    with (
        loader.open(store_uri) as ds,
        pytest.raises(
            CorruptBatchError,
            match=rf"shard {b.shard} batch {b.seq} \(documents {b.lo}\.\.{b.hi}\) of .*: stored bytes changed \(checksum mismatch\)",
        ),
    ):
        DocReader(ds).batch_docs(b, b.lo, b.hi)


@pytest.mark.parametrize("interleaved", [False, True])
def test_discard_run_drops_a_runs_documents_from_every_shard(store_uri, tmp_path, interleaved):
    """The durable batches of a killed directory run: `discard_run` drops them - its keys
    in the table it shares with the committed run (ids above the stored ones), or its own
    table and dictionaries (ids among them) - and nothing committed."""
    every = generate_docs(SEED, 0, 3 * N)
    stored = every.take(np.arange(0, 2 * N, 2))  # the even ids 0 .. 2N-2
    write_json_dir(stored, tmp_path / "stored")
    loader.load(str(tmp_path / "stored"), store_uri, layout="docs", format="raw", **KW)  # raw + zstd on LMDB, mem:
    ids = np.arange(1, 2 * N, 2) if interleaved else np.arange(2 * N, 3 * N)  # a dictionary per (shard, table)
    write_json_dir(every.take(ids), tmp_path / "in")
    env = dict(os.environ, BULKLOAD_FAULT="checkpoint:3", BULKLOAD_CHECKPOINT_SECONDS="0")
    p = subprocess.run(
        [
            tool("bulkload"),
            "load",
            str(tmp_path / "in"),
            store_uri,
            "--layout",
            "docs",
            "--shards",
            "2",
            "--workers",
            "1",
            "--batch-records",
            "40",
            "-q",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    with loader.open(store_uri) as ds:
        m, killed = ds.manifest, ds.manifest.runs[-1]
    spec = parse_dataset_uri(store_uri).with_shards(m.shards)
    committed = m.batches[0].table
    assert (killed.table != committed) == interleaved

    def stored_ids():
        out = set()
        for s in range(m.shards):
            st = spec.open_shard(s, write=False)
            try:
                out |= {id_of_key(k) for t in doc_tables(st) for k, _ in st.range(table=t)}
            finally:
                st.close()
        return out

    assert stored_ids() - set(range(0, 2 * N, 2))  # the killed run's durable batches
    discard_run(spec, m.shards, killed.table, -1 if killed.clear_from is None else killed.clear_from)
    assert stored_ids() == set(range(0, 2 * N, 2))
    for s in range(m.shards):
        st = spec.open_shard(s, write=False)
        try:
            assert (doc_tables(st) == [committed] and load_dictionary(st, killed.table) is None) or not interleaved
            assert (load_dictionary(st, committed) is not None) == (spec.scheme != "rocksdb")
        finally:
            st.close()
    with loader.open(store_uri) as ds:
        assert ds.verify().ok and ds.scan().equals(stored)
    discard_run(spec.with_shards(3), 3, committed)  # the whole of any table; a shard not there is passed over
    for s in range(m.shards):
        st = spec.open_shard(s, write=False)
        try:
            assert doc_tables(st) == [] and load_dictionary(st, committed) is None
        finally:
            st.close()
