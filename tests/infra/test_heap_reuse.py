"""A worker keeps freed heap for reuse (infra/heap.keep_freed): LMDB's big values are
copied into malloc'ed overflow pages freed at every commit; without it each transaction's
pages come back from the kernel as fresh page faults. Measured by page faults (a count, not a
time): real LMDB transactions in a fresh process, with and without the setting."""

import subprocess
import sys

PROBE = r"""
import os, resource, sys, lmdb
if sys.argv[1] == "keep":
    from loader.infra.heap import keep_freed
    keep_freed()
env = lmdb.open(sys.argv[2], map_size=1 << 30, sync=False, metasync=False)
value = b"x" * (960 * 1024)          # one batch of 10,000 scidb96 records
def txn(i):
    with env.begin(write=True) as t:
        for j in range(16):          # a 16 MB group, as the load's write stage
            t.put(b"%08d" % (i * 16 + j), value)
    with env.begin(write=True) as t:  # the pages go to the free list: the file stays small
        t.drop(env.open_db(), delete=False)
for i in range(3):
    txn(i)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(3, 13):
    txn(i)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(tmp_path, mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(tmp_path / mode)], check=True, capture_output=True, text=True
    )
    return int(out.stdout)


def test_freed_heap_is_reused_by_the_next_lmdb_transaction(tmp_path):
    default, kept = _faults(tmp_path, "default"), _faults(tmp_path, "keep")
    # 10 transactions x 16 MB: ~40,000 faults when every transaction's pages are new
    assert default > 20_000, default
    assert kept < default / 10, (kept, default)
