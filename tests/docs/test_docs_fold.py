"""loader/docs/fold.py on real shard stores: a fold worker's shard - leftovers dropped (not
the committed or held tables), every document rewritten id-sorted into the new table in
batches of about the target, the rows and figures it returns - and an id stored by two
batches stops the fold with a clear error naming the shard and the id."""

from __future__ import annotations

import os

import numpy as np
import pytest

from loader.docs.batch import id_of_key
from loader.docs.fold import FoldTask, ShardRows, fold_shard
from loader.docs.gen import generate_docs
from loader.docs.layout import DOCS
from loader.docs.tables import doc_tables, range_checksum
from loader.errors import VerifyError
from loader.maintain.merge import read_rows
from loader.model.manifest import BatchEntry
from loader.stores.spec import parse_dataset_uri

from .test_docs_kind import task, write_batches

HEAD = dict(layout=DOCS.to_dict(), format="raw", compression="zstd", shards=1, batch_records=50)


def shard_with_runs(spec, runs):
    """Write each (table, first id, n) run's batches into shard 0; committed rows (seqs in order)."""
    os.makedirs(spec.root, exist_ok=True)
    st = spec.open_shard(0, write=True)
    rows = []
    try:
        for table, start, n in runs:
            for row in write_batches(task(spec, n, table, start=start, b=20, fmt="raw"), st, 0, prepare=False):
                row[0] = len(rows)
                rows.append(tuple(row))
    finally:
        st.close()
    return rows


def fold_task(spec, target, keep=()):
    return FoldTask(
        store=spec,
        worker=0,
        shards=(0,),
        manifest=HEAD | {"scheme": spec.scheme},
        generation=0,
        rows_files=(),
        first_seq=0,
        table="docs-folded",
        target=target,
        keep_tables=keep,
    )


def fold(spec, rows, target, keep=(), report=lambda n: None):
    """fold_shard of shard 0 holding ``rows``: (its ShardFold, the new rows it wrote)."""
    path = os.path.join(spec.root, "rows")
    got = fold_shard(
        fold_task(spec, target, keep), 0, ShardRows.of((BatchEntry(*r) for r in rows), [0])[0], path, report
    )
    return got, list(read_rows([path], got.batches, table="docs-folded"))


def test_fold_shard_rewrites_every_document_id_sorted(store_uri):
    spec = parse_dataset_uri(store_uri).with_shards(1)
    rows = shard_with_runs(spec, [("docs-a", 0, 100), ("docs-b", 1000, 60)])  # committed: two runs' tables
    # not committed: a failed run's tail in docs-a, a table the garbage list holds, a failed run's table
    shard_with_runs(spec, [("docs-a", 100, 20), ("docs-held", 5000, 5), ("docs-left", 6000, 5)])
    seen = []
    got, new = fold(spec, rows, 25, keep=("docs-held",), report=seen.append)
    want = generate_docs(0, 0, 1060).take(np.r_[0:100, 1000:1060])
    # batches of 20 ids that do not overlap: 8 components, folded two by two (40 documents
    # a group, at least the target of 25), each group's 2 windows written as one batch each
    assert (got.documents, got.leftovers_dropped, got.components, got.windows, sum(seen)) == (160, 1, 8, 8, 160)
    assert got.text_bytes == want.text_nbytes and got.splits == 0
    st = spec.open_shard(0, write=False)
    try:
        assert doc_tables(st) == ["docs-a", "docs-b", "docs-folded", "docs-held"]
        assert max(id_of_key(k) for k, _ in st.range(table="docs-a")) == 99  # the tail is gone
        assert [id_of_key(k) for k, _ in st.range(table="docs-folded")] == want.ids.tolist()
        assert [b.seq for b in new] == list(range(len(new)))  # first_seq 0, one shard
        for b in new:
            assert (b.shard, b.first, b.table) == (0, 0, "docs-folded") and 15 <= b.docs <= 25  # about the target
            assert range_checksum(st, b.table, b.lo, b.hi, False) == (b.checksum, b.docs, b.nbytes)
        assert sum(b.docs for b in new) == 160
    finally:
        st.close()


def test_an_id_stored_by_two_batches_stops_the_fold(store_uri):
    spec = parse_dataset_uri(store_uri).with_shards(1)
    rows = shard_with_runs(spec, [("docs-a", 0, 100), ("docs-b", 90, 30)])  # ids 90..99 in both
    with pytest.raises(
        VerifyError,
        match=rf"^shard 0 of {store_uri}: id 90 is stored by two batches; nothing was "
        r"changed - run `bulkload verify` and reload the affected documents$",
    ):
        fold(spec, rows, 1000)
