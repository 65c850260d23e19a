"""Cold random reads (issue 14, target 6), measured with the suite in loader/bench/ (randreads):

    .venv/bin/python bench/random_reads.py [--n N] [--repeats R] [--tasks T] [--out DIR] [--json]

The direct-mmap write-up's method on bulkload's read paths: the page cache of the dataset's
files dropped (fsync + posix_fadvise DONTNEED), then T random strided reads
(`Dataset.read_records` of scattered ranges; random box queries on the finalized array),
from one thread and from two, with the dataset opened ``?readahead=0`` vs ``?readahead=1``
vs ``np.memmap`` of the same raw records file, round-robin, R repeats (median, min-max).
Prints the ratio readahead-off / np.memmap against the target (>= 2 x) and the bytes each
read from the disk per record asked for (the readahead waste).

Writes DIR/random_reads.json and .md (default DIR: bench/results).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from loader.bench import suite as B


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000_000, help="records in the dataset (default 20,000,000)")
    ap.add_argument("--repeats", type=int, default=3, help="samples per figure (default 3)")
    ap.add_argument("--tasks", type=int, default=1000, help="random reads per sample (default 1,000)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    log = (lambda s: None) if a.json else (lambda s: print(s, file=sys.stderr, flush=True))
    result = B.run(
        "full",
        n=a.n,
        repeats=a.repeats,
        out=a.out,
        log=log,
        name="random_reads",
        sections=("random",),
        random_tasks=a.tasks,
    )
    if a.json:
        print(json.dumps(result, indent=1, default=str))
        return 0
    for f in result["figures"].values():
        if f["status"] == "ok":
            amp = [s.get("read_amplification") for s in f["samples"]]
            print(f"{f['id']:<28} {f['mb_s']['median']:9,.1f} MB/s  disk bytes read / bytes asked: {amp}")
    for t in result["targets"]:
        if t["id"].startswith("random-"):
            print(
                f"{t['status']:<13} {t['ratio'] if t['ratio'] is not None else '':>6} (target >= {t['target']})  "
                f"{t['what']}"
            )
    print(f"wrote {result['outputs']['json']} and {result['outputs']['markdown']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
