"""Freed heap is kept for reuse in bulkload's own processes only (infra/heap.py): reading a
zstd-compressed dataset in a process that called `own_process` (the `bulkload` command does)
tunes glibc and stops paying a page fault per page of every batch; a Python program that
merely imports loader keeps glibc's defaults. Measured by page faults (a count, not a time)
in fresh processes reading the same zstd dataset."""

import subprocess
import sys

import loader

PROBE = r"""
import resource, sys
import loader
from loader.infra import heap
if sys.argv[1] == "owned":
    heap.own_process()
with loader.open(sys.argv[2]) as ds:
    ds.verify()                                      # warm: the first batches may fault anyway
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        assert ds.verify().ok
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, heap._kept)
"""


def faults_of(mode: str, uri: str) -> tuple[int, bool]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode, uri], capture_output=True, text=True, check=True)
    n, kept = out.stdout.split()
    return int(n), kept == "True"


def test_only_an_owned_process_keeps_freed_heap_and_it_stops_the_page_faults(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    # zstd: its whole decode (verify) takes fresh buffers each batch (lz4 values decode into reused ones)
    loader.load("gen://scidb96?n=200000", uri, shards=1, batch_records=10000, compression="zstd")
    caller, kept_by_caller = faults_of("caller", uri)
    owned, kept_by_owned = faults_of("owned", uri)
    assert not kept_by_caller and kept_by_owned
    # 60 batches of 960 KB verified: ~2 fresh buffers each by default (~28,000 pages; 5M records:
    # 442,000 page faults and 0.54-0.69 s vs 6,300 and 0.10-0.19 s kept), a few hundred when kept
    assert owned * 10 < caller, (owned, caller)
