"""Documents compaction's memory does not grow with the number of batch rows (issue 29):
the coordinator streams its plan and its switch (the new rows from the workers' rows
files), and a fold worker holds its shards' rows as columns, never as Python objects."""

from helpers import compact_peak_rss

DOCS = 20_000
MIB = 1 << 20


def test_docs_compact_peak_memory_does_not_grow_with_the_batch_count(tmp_path):
    # the same documents as 1,000 and as 20,000 batch rows (one table per shard), folded
    # into the same 20 batches (small batches of disjoint ids are folded together): before
    # streaming, the 19,000 more rows took ~19 MiB more (the coordinator's lists of rows
    # and tasks, the workers' rows); what is left is ~250 bytes a row in a fold worker's
    # columns, the catalog pages read and the data touched
    source, verified = f"gen://docs?n={DOCS}", "20 batches, 20,000 records: ok"
    few, many = (compact_peak_rss(f"lmdb://{tmp_path}/b{n}", source, n, 1000, verified) for n in (DOCS // 1_000, 1))
    assert many - few < 12 * MIB, (few / MIB, many / MIB)
