"""Load benchmark (issue 3's figures), measured with the suite in loader/bench/.

    .venv/bin/python bench/load.py [--n N] [--repeats R] [--out DIR] [--rss] [--json]

On the 2-core machine, `gen://scidb96?n=20000000` (1.92 GB) into `lmdb://` with 2 shards,
durable at the end of the job (the time is `bulkload load`'s own report: from the start
of load() to the fsynced shards and the committed manifest), each configuration run R times
in a fresh process tree:

  disk limit    bulkload-gen -> a file on the same filesystem + fsync (same run)
  capnp         >= 0.5 x the disk limit
  arrow none    >= 0.35 x the disk limit
  rocksdb capnp >= 0.35 x the disk limit
  mem://        faster than lmdb://
  workers 2 / 1 >= 1.6
  versus        the durable load, the compressed loads (--compressed) and load FILE (warm, cold)
                round-robin with ArcticDB's write (DataFrame build included, and without) and
                TileDB's sparse write, the disk limit sampled between the rounds; ratios
                bulkload / peer (median, per-round min - max) and bytes on disk
  --rss         peak RSS of the whole job (all processes) for n = 50,000,000 vs 2,000,000:
                <= 1 GiB and about the same (takes ~1-2 min more)

Writes DIR/load.json, DIR/load.md and plots (default DIR: bench/results).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from loader.bench import suite as B
from loader.bench.loads import compressed_config

FIGURES = [
    "gen-file-fsync",
    "gen-shm",
    "gen-pipe",
    "cold-read",
    "load-lmdb-capnp-w1",
    "load-lmdb-capnp-w2",
    "load-lmdb-arrow-none",
    "load-rocksdb-capnp",
    "load-mem-capnp",
    # the versus section: interleaved with the peers (ArcticDB, TileDB when installed)
    "load-lmdb-default",
    "load-file-warm",
    "load-file-cold",
    "peer-arcticdb-write-build",
    "peer-arcticdb-write",
    "peer-arcticdb-read",
    "peer-tiledb-write",
    "peer-tiledb-box",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000_000, help="records per load (default 20,000,000)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure (default 3)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--rss", action="store_true", help="also the peak RSS of n=50M vs n=2M loads")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument(
        "--compressed",
        default="capnp:lz4,capnp:zstd",
        help="FORMAT:COMPRESSION loads measured against ArcticDB (default capnp:lz4,capnp:zstd)",
    )
    ap.add_argument("--n-tiledb", type=int, default=None, help="records of the TileDB write (default 2,000,000)")
    a = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    compressed = tuple(x.strip() for x in a.compressed.split(",") if x.strip())
    only = set(FIGURES) | {f"load-lmdb-capnp-w{w}" for w in range(1, cores + 1)}
    only |= {compressed_config(c, cores).id for c in compressed}
    sections = ("limits", "versus", "load", "scaling") + (("rss",) if a.rss else ())
    if a.rss:
        only |= {"rss"}
    log = (lambda s: None) if a.json else (lambda s: print(s, file=sys.stderr, flush=True))
    result = B.run(
        "full",
        n=a.n,
        repeats=a.repeats,
        out=a.out,
        log=log,
        name="load",
        sections=sections,
        only=only,
        n_tiledb=a.n_tiledb,
        compressed=compressed,
        rss_n=(2_000_000, 50_000_000) if a.rss else None,
    )
    # the full suite's rss_n is dropped when n < 20M; --rss asks for it explicitly
    if a.json:
        print(json.dumps(result, indent=1, default=str))
        return 0
    print()
    for t in result["targets"]:
        if t.get("ratio") is not None:
            print(f"{t['status']:<6} {t['ratio']:6.2f} (target {t['target']})  {t['what']}")
    for c in result["comparisons"]:
        rr = c["round_ratio"]
        print(
            f"{c['ratio']:6.2f} x (rounds {rr['min']:.2f} - {rr['max']:.2f})  {c['bulkload']} / {c['peer']}"
            + (f"; bytes on disk {c['disk_bytes_ratio']:.2f} x" if c["disk_bytes_ratio"] else "")
        )
    print(f"wrote {result['outputs']['json']} and {result['outputs']['markdown']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
