"""loader/docs/kind.py: the documents' record kind - which table a run writes, the LMDB table
limit, options per format / compression / store, the smallest plausible stored size - and
its worker side on real stores: a batch encoded and put reads back with the checksum of
its manifest row (every format, compression and store), duplicate ids are refused, and a
worker starting on a shard drops what failed runs left (other tables, keys from its
resume point or shared-table clear point on) and nothing else."""

from __future__ import annotations

import os

import pytest

from loader.docs.batch import DocBatch, id_of_key
from loader.docs.gen import generate_docs
from loader.docs.kind import DOC_FIXED_BYTES, DOC_TEXT_BITS, DocsKind
from loader.docs.layout import DOCS
from loader.docs.sources import GenDocsSource, JsonDirSource
from loader.docs.tables import doc_tables, load_dictionary, range_checksum
from loader.errors import DuplicateIdError, UsageError
from loader.kinds import kind_for
from loader.loading.job import Checkpoints
from loader.loading.plan import Plan, Segment
from loader.loading.task import LoadTask, RunTable, WriteSettings
from loader.model.manifest import BatchEntry, Manifest
from loader.stores.spec import parse_dataset_uri


def kind(fmt="block", compression="zstd") -> DocsKind:
    return kind_for(DOCS, fmt, compression)


def entry(lo, hi, table, docs=1):
    return BatchEntry(0, 0, 0, docs, 0, 0, lo, hi, docs, table, 0)


def test_choose_table_shares_the_top_table_only_above_every_stored_id():
    k = kind()
    stored = [entry(0, 99, "docs-a"), entry(100, 500, "docs-b"), entry(600, 700, "docs-c", docs=0)]
    assert k.choose_table("r1", stored, (501, 900)) == ("docs-b", 501)  # above all: append, clear from 501
    assert k.choose_table("r1", stored, (500, 900)) == ("docs-r1", -1)  # meets the top id: a table of its own
    assert k.choose_table("r1", stored, (50, 60)) == ("docs-r1", -1)
    assert k.choose_table("r1", [], (0, 10)) == ("docs-r1", -1)
    assert k.choose_table("r1", stored, None) == ("docs-r1", -1)  # an empty source


def test_the_lmdb_table_limit_is_checked_before_a_run(tmp_path):
    k = kind()
    m = Manifest(
        DOCS.to_dict(),
        "block",
        "zstd",
        "lmdb",
        1,
        100,
        batches=[entry(i * 10, i * 10 + 9, f"docs-{i}") for i in range(6)],
    )
    for base in (f"lmdb://{tmp_path}/ds", "mem://kind-limit"):
        k.check_table_limit(parse_dataset_uri(base + "?max_dbs=7"), m, "docs-5")  # 6 tables + meta
        k.check_table_limit(parse_dataset_uri(base + "?max_dbs=8"), m, "docs-new")  # 7 + meta
        with pytest.raises(
            UsageError,
            match=r"already holds 6 document runs whose ids interleave .* at most "
            r"max_dbs=7 per shard\): open the dataset with \?max_dbs=28",
        ):
            k.check_table_limit(parse_dataset_uri(base + "?max_dbs=7"), m, "docs-new")
    k.check_table_limit(parse_dataset_uri(f"rocksdb://{tmp_path}/ds"), m, "docs-new")  # no such limit


@pytest.mark.parametrize(
    "fmt,compression,scheme,blocks,zdict,options",
    [
        ("block", "zstd", "lmdb", True, False, ()),
        ("block", "zstd", "rocksdb", True, False, ()),
        ("raw", "zstd", "lmdb", False, True, ()),
        ("raw", "zstd", "mem", False, True, ()),
        (
            "capnp",
            "zstd",
            "rocksdb",
            False,
            False,
            (("block_size", "16384"), ("compression", "zstd-dict"), ("zstd_level", "1")),
        ),
        ("raw", "none", "lmdb", False, False, ()),
        ("raw", "none", "rocksdb", False, False, ()),
    ],
)
def test_how_each_format_and_store_compresses(fmt, compression, scheme, blocks, zdict, options):
    k = kind(fmt, compression)
    assert (k.blocks, k.value_compression(scheme), k.store_options(scheme)) == (blocks, zdict, options)


def test_formats_and_compressions_are_checked():
    DocsKind.check(DOCS, "raw", "none")
    with pytest.raises(UsageError, match="format 'arrow' is not one for documents; use block"):
        DocsKind.check(DOCS, "arrow", "zstd")
    with pytest.raises(UsageError, match="compression 'lz4' is not one for documents; use zstd"):
        DocsKind.check(DOCS, "block", "lz4")


def test_min_stored_bytes(tmp_path):
    gen = GenDocsSource(1000)
    assert kind("raw", "none").min_stored_bytes(gen, 1000) == int(1000 * 1000 * 0.9) + 1000 * DOC_FIXED_BYTES
    assert kind().min_stored_bytes(gen, 1000) == int(1000 * 1000 * 0.9 * DOC_TEXT_BITS / 8) + 1000 * DOC_FIXED_BYTES
    assert kind().min_stored_bytes(JsonDirSource(str(tmp_path)), 1000) == 1000 * DOC_FIXED_BYTES
    assert kind().min_stored_bytes(gen, 0) == 0
    # what generated documents really take stays above it
    docs = generate_docs(1, 0, 1000)
    assert docs.text_nbytes + 16 * len(docs) > kind("raw", "none").min_stored_bytes(gen, 1000)


# --- the worker side, on real stores -----------------------------------------------------------


def task(spec, n, table, *, start=0, b=50, keep=(), clear_from=-1, resume=(), fmt="block", compression="zstd"):
    """A real LoadTask of a generated run of n documents from id ``start`` (one worker)."""
    plan = Plan((Segment(GenDocsSource(n, start), n, 0, 0),), b, spec.shards)
    write = WriteSettings(
        store=spec,
        layout=DOCS.to_dict(),
        format=fmt,
        compression=compression,
        checkpoints=Checkpoints(600, 1 << 30),
        table=RunTable(table, keep, clear_from),
    )
    return LoadTask(worker=0, workers=1, plan=plan, write=write, resume=resume)


def write_batches(t, store, s, prepare=True):
    """Produce, encode and put a task's batches of shard s, as a worker does (``prepare``:
    first drop leftovers, as a worker starting on the shard); their rows."""
    k = kind(t.write.format, t.write.compression)
    writer = k.writer(t)
    if prepare:
        writer.prepare(s, store)
    rows = []
    for seq, first, count, source, off in t.planned_batches():
        if seq % t.nshards != s:
            continue
        items, row, _text, _errors = writer.encode(
            seq, first, count, writer.produce(seq, first, count, source, off), s, store
        )
        store.put_sorted(items, table=t.table)
        rows.append(row)
    return rows


@pytest.mark.parametrize(
    "fmt,compression", [("block", "zstd"), ("block", "none"), ("raw", "zstd"), ("raw", "none"), ("capnp", "zstd")]
)
def test_encoded_batches_read_back_with_their_row_checksum(store_uri, fmt, compression):
    spec = parse_dataset_uri(store_uri).with_shards(2)
    os.makedirs(spec.root, exist_ok=True)
    t = task(spec, 230, "docs-run", fmt=fmt, compression=compression)
    for s in range(2):
        st = spec.open_shard(s, write=True)
        try:
            rows = write_batches(t, st, s)
            assert [r[0] % 2 for r in rows] == [s] * len(rows) and rows
            for _seq, shard, first, count, checksum, nbytes, lo, hi, n, table, text in rows:
                want = generate_docs(0, first, count)
                assert (shard, lo, hi, n, table, text) == (
                    s,
                    first,
                    first + count - 1,
                    count,
                    "docs-run",
                    want.text_nbytes,
                )
                assert range_checksum(st, table, lo, hi, fmt == "block") == (checksum, n, nbytes)
            assert (load_dictionary(st, "docs-run") is not None) == kind(fmt, compression).value_compression(
                spec.scheme
            )
        finally:
            st.close()


def test_duplicate_ids_in_a_batch_are_refused(lmdb_uri):
    spec = parse_dataset_uri(lmdb_uri).with_shards(1)
    os.makedirs(spec.root, exist_ok=True)
    writer = kind().writer(task(spec, 10, "docs-run"))
    batch = DocBatch.from_records([(5, 1, b"a"), (3, 1, b"b"), (5, 2, b"c")])
    with pytest.raises(DuplicateIdError, match="duplicate id 5 within this load; nothing was loaded"):
        writer.encode(0, 0, 3, (batch, []), 0, None)


def stored_ids(store, table):
    return [id_of_key(k) for k, _ in store.range(table=table)]


def test_prepare_drops_what_failed_runs_left_and_nothing_else(store_uri):
    spec = parse_dataset_uri(store_uri).with_shards(1)
    os.makedirs(spec.root, exist_ok=True)
    st = spec.open_shard(0, write=True)
    try:
        committed = write_batches(task(spec, 100, "docs-old", fmt="raw"), st, 0)  # ids 0..99, committed
        write_batches(task(spec, 30, "docs-failed", start=500, fmt="raw"), st, 0, False)  # a failed run's table
        write_batches(task(spec, 20, "docs-held", start=700, fmt="raw"), st, 0, False)  # garbage a reader pins
        # a failed run left ids 100..149 in docs-old; a fresh run appending ids 150.. clears from 100 on
        write_batches(task(spec, 50, "docs-old", start=100, fmt="raw"), st, 0, False)
        fresh = task(spec, 50, "docs-old", start=150, fmt="raw", keep=("docs-old", "docs-held"), clear_from=100)
        kind("raw").writer(fresh).prepare(0, st)
        assert doc_tables(st) == ["docs-held", "docs-old"]
        assert stored_ids(st, "docs-old") == list(range(100)) and len(stored_ids(st, "docs-held")) == 20
        assert load_dictionary(st, "docs-failed") is None  # LMDB, mem: it had one
        assert (load_dictionary(st, "docs-old") is not None) == (spec.scheme != "rocksdb")
        assert [r[4] for r in committed] == [range_checksum(st, "docs-old", r[6], r[7], False)[0] for r in committed]
        # a resumed run of its own table: its keys from the first planned batch's id on are leftovers
        write_batches(task(spec, 200, "docs-new", start=1000, fmt="raw"), st, 0, False)
        resumed = task(spec, 200, "docs-new", start=1000, fmt="raw", keep=("docs-old",), resume=(2,))  # seqs 2..
        kind("raw").writer(resumed).prepare(0, st)
        assert doc_tables(st) == ["docs-new", "docs-old"]  # its own table stays; docs-held is not kept now
        assert stored_ids(st, "docs-new") == list(range(1000, 1100))  # batches 0, 1 (50 each) are kept
    finally:
        st.close()
