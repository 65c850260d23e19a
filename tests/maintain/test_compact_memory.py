"""Compaction's memory does not grow with the number of batch rows (issue 29): the plan,
the merged rows and the switch are streamed, never held as lists."""

from helpers import run_cli, run_measured

RECORDS = 40_000
MIB = 1 << 20


def compact_peak_rss(tmp_path, batch_records: int) -> int:
    """Peak RSS (bytes; the largest process of the command and its workers) of `bulkload
    compact` merging a dataset of RECORDS records stored as batches of ``batch_records``."""
    uri = f"lmdb://{tmp_path}/b{batch_records}"
    p = run_cli("load", f"gen://scidb96?n={RECORDS}", uri, "--batch-records", batch_records, "--quiet")
    assert p.returncode == 0, p.stderr
    p, rss = run_measured(["compact", uri, "--target-batch-records", 1000, "--workers", 2, "--quiet"])
    assert p.returncode == 0, p.stderr
    p = run_cli("verify", uri)
    assert p.returncode == 0 and "40 batches, 40,000 records: ok" in p.stdout, p.stdout + p.stderr
    return rss


def test_compact_peak_memory_does_not_grow_with_the_batch_count(tmp_path):
    # the same records as 2,000 and as 40,000 batch rows, merged into the same 40 batches:
    # before streaming, the 38,000 more rows took ~20 MiB more (plan, rows, rewrite lists);
    # what is left grows with the data touched (mapped pages), a few MiB
    few = compact_peak_rss(tmp_path, RECORDS // 2_000)
    many = compact_peak_rss(tmp_path, 1)
    assert many - few < 10 * MIB, (few / MIB, many / MIB)
