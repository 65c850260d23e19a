"""loader/docs/tables.py on real shard stores: the range checksum of every committed batch is
the one in its manifest row; `range_problem` names a changed, missing or extra stored
value; a run's table (and only its dictionary) is dropped whole or from an id on."""

from __future__ import annotations

import os

import numpy as np
import pytest

import loader
from loader.docs.batch import key_of
from loader.docs.blocks import block_count
from loader.docs.gen import generate_docs
from loader.docs.json_dir import write_json_dir
from loader.docs.tables import (
    META_TABLE,
    doc_tables,
    drop_doc_table,
    load_dictionary,
    range_checksum,
    range_problem,
)
from loader.stores.spec import parse_dataset_uri

N, B = 300, 50


def load(uri, fmt, tmp_path):
    """N documents with the even ids 0, 2, ... (a directory of <id>.json files)."""
    write_json_dir(generate_docs(3, 0, 2 * N).take(np.arange(0, 2 * N, 2)), tmp_path / "in")
    loader.load(
        str(tmp_path / "in"), uri, layout="docs", format=fmt, shards=2, workers=1, batch_records=B, progress="none"
    )
    with loader.open(uri) as ds:
        return ds.manifest.batches


def open_shard(uri, s):
    return parse_dataset_uri(uri).with_shards(2).open_shard(s, write=True)


@pytest.mark.parametrize("fmt", ["block", "raw"])
def test_each_batch_range_is_its_manifest_row_and_damage_is_named(store_uri, fmt, tmp_path):
    blocks = fmt == "block"
    batches = load(store_uri, fmt, tmp_path)
    assert sum(b.docs for b in batches) == N
    for b in batches:
        st = open_shard(store_uri, b.shard)
        try:
            assert range_checksum(st, b.table, b.lo, b.hi, blocks) == (b.checksum, b.docs, b.nbytes)
            assert range_problem(st, b, blocks) is None
        finally:
            st.close()
    first, last = batches[0], batches[-1]
    st = open_shard(store_uri, first.shard)
    try:
        k, v = next(iter(st.range(key_of(first.lo), key_of(first.hi + 1), table=first.table)))
        k, v = bytes(k), bytes(v)
        st.put_sorted([(k, v[:-1] + bytes([v[-1] ^ 1]))], table=first.table)  # same size, one bit
        assert (
            range_problem(st, first, blocks)
            == f"checksum mismatch (stored bytes changed) in ids {first.lo}..{first.hi}"
        )
        st.put_sorted([(k, v + b"x")], table=first.table)  # one byte more
        assert (
            range_problem(st, first, blocks) == f"size {first.nbytes + 1} != {first.nbytes} in the manifest "
            f"(ids {first.lo}..{first.hi})"
        )
        st.delete_range(k, k + b"\0", table=first.table)  # a value gone: fewer documents
        problem = range_problem(st, first, blocks)
        assert problem.endswith(f"documents stored under ids {first.lo}..{first.hi}, the manifest says {first.docs}")
        assert int(problem.split()[0]) < first.docs
    finally:
        st.close()
    # a value put under a free (odd) id inside a batch's range: more documents than its row says
    st = open_shard(store_uri, last.shard)
    try:
        _k, v = next(iter(st.range(key_of(last.lo), key_of(last.hi + 1), table=last.table)))
        st.put_sorted([(key_of(last.lo + 1), bytes(v))], table=last.table)  # a copy of the first value
        more = block_count(bytes(v)) if blocks else 1
        assert range_problem(st, last, blocks) == (
            f"{last.docs + more} documents stored under ids {last.lo}..{last.hi}, the manifest says {last.docs}"
        )
    finally:
        st.close()


def test_drop_doc_table_whole_or_from_an_id_and_only_its_dictionary(store_uri):
    spec = parse_dataset_uri(store_uri).with_shards(1)
    os.makedirs(spec.root, exist_ok=True)
    st = spec.open_shard(0, write=True)
    try:
        items = [(key_of(i), b"v%d" % i) for i in range(10)]
        for t in ("docs-a", "docs-ab", "other"):
            st.put_sorted(items, table=t)
        st.put_sorted([(b"docs-a", b"dict-a"), (b"docs-ab", b"dict-ab")], table=META_TABLE)
        assert doc_tables(st) == ["docs-a", "docs-ab"]
        assert (load_dictionary(st, "docs-a"), load_dictionary(st, "docs-b")) == (b"dict-a", None)
        drop_doc_table(st, "docs-ab", clear_from=6)  # shared with committed runs: its keys from 6 on
        assert [bytes(k) for k, _ in st.range(table="docs-ab")] == [key_of(i) for i in range(6)]
        assert load_dictionary(st, "docs-ab") == b"dict-ab"
        drop_doc_table(st, "docs-a")  # the whole table and its dictionary, not docs-ab's
        assert sorted(st.tables()) == sorted(["docs-ab", "other", META_TABLE])
        assert (load_dictionary(st, "docs-a"), load_dictionary(st, "docs-ab")) == (None, b"dict-ab")
        assert len(list(st.range(table="other"))) == 10
        drop_doc_table(st, "docs-ab", clear_from=0)  # from the lowest id on: every key, the table stays
        assert list(st.range(table="docs-ab")) == [] and load_dictionary(st, "docs-ab") == b"dict-ab"
    finally:
        st.close()
