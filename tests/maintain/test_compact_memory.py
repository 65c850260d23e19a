"""Compaction's memory does not grow with the number of batch rows (issue 29): the plan,
the merged rows and the switch are streamed, never held as lists."""

from helpers import compact_peak_rss

RECORDS = 40_000
MIB = 1 << 20


def peak_rss(tmp_path, batch_records: int) -> int:
    """`bulkload compact`'s peak RSS merging RECORDS records stored as batches of ``batch_records``."""
    return compact_peak_rss(
        f"lmdb://{tmp_path}/b{batch_records}",
        f"gen://scidb96?n={RECORDS}",
        batch_records,
        1000,
        "40 batches, 40,000 records: ok",
    )


def test_compact_peak_memory_does_not_grow_with_the_batch_count(tmp_path):
    # the same records as 2,000 and as 40,000 batch rows, merged into the same 40 batches:
    # before streaming, the 38,000 more rows took ~20 MiB more (plan, rows, rewrite lists);
    # what is left grows with the data touched (mapped pages), a few MiB
    few = peak_rss(tmp_path, RECORDS // 2_000)
    many = peak_rss(tmp_path, 1)
    assert many - few < 10 * MIB, (few / MIB, many / MIB)
