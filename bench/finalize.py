"""Finalize (redimension) and box-query benchmark (issue 4's figures).

    .venv/bin/python bench/finalize.py [--n 20000000] [--repeats 3] [--workers 1,2]
                                       [--dims i0:10,i1:100000] [--store lmdb] [--json]

1. loads ``gen://scidb96?n=N`` into a fresh ``lmdb://`` dataset with 2 shards (untimed);
2. runs ``finalize(..., dims)`` R times per worker count, each on a freshly loaded
   dataset; figure: MB/s of input records
   (N x 96 bytes / wall seconds of the whole call: compaction check, partition into spill
   runs, chunk build and fsync, index and manifest commit), median of R;
3. opens the dataset and times the box ``i0=0:10,i1=5000000:5000100`` (``Dataset.read_box``
   from Python, warm: after one untimed call), Q times: median and p99 in ms.

Targets (2-core machine, N = 20M): >= 400 MB/s with 2 workers, 2 vs 1 workers >= 1.6x,
box query <= 2 ms median.

Long run (documented, not part of CI): ``--n 100000000 --repeats 1 --workers 2 --sample-rss``
samples the whole process tree (this process, the forkserver and every worker) with psutil
every 0.25 s during the load and the finalize, and prints the peak of the summed RSS
(``rss``: resident pages, file-backed ones included) and of the summed private memory
(``uss``: pages of one process only), the out-of-core figure (target <= 2 GiB). It also
reports ``worker_peak_rss_bytes`` (the largest sum over one phase's workers of their
``ru_maxrss``). Needs ~25 GB free where ``--dir`` points.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time


class TreeSampler:
    """Samples the summed RSS and USS of this process and all its descendants."""

    def __init__(self, interval: float = 0.25):
        import threading

        import psutil

        self.psutil = psutil
        self.me = psutil.Process()
        self.interval = interval
        self.current = None
        self.peaks: dict[str, dict] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def phase(self, name) -> None:
        self.current = name

    def _run(self) -> None:
        ps = self.psutil
        while not self.done.wait(self.interval):
            ph = self.current
            if ph is None:
                continue
            rss = uss = 0
            procs = [self.me, *self.me.children(recursive=True)]
            for p in procs:
                try:
                    mi = p.memory_full_info()
                    rss += mi.rss
                    uss += mi.uss
                except (ps.NoSuchProcess, ps.AccessDenied, ProcessLookupError):
                    pass
            pk = self.peaks.setdefault(ph, {"peak_rss_bytes": 0, "peak_uss_bytes": 0, "samples": 0, "max_processes": 0})
            pk["peak_rss_bytes"] = max(pk["peak_rss_bytes"], rss)
            pk["peak_uss_bytes"] = max(pk["peak_uss_bytes"], uss)
            pk["samples"] += 1
            pk["max_processes"] = max(pk["max_processes"], len(procs))

    def stop(self) -> dict:
        self.done.set()
        self.thread.join()
        return self.peaks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--dims", default="i0:10,i1:100000")
    ap.add_argument("--box", default="i0=0:10,i1=5000000:5000100")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--store", default="lmdb", choices=["lmdb", "rocksdb", "mem"])
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--dir", default=None, help="where to put the dataset (default: a temp dir in /tmp)")
    ap.add_argument("--memory-budget", type=int, default=None)
    ap.add_argument("--strategy", default="auto", choices=["auto", "direct", "spill"])
    ap.add_argument(
        "--sample-rss", action="store_true", help="sample the process tree's RSS and USS during load and finalize"
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    sampler = TreeSampler() if a.sample_rss else None

    import loader
    from loader.arrays.finalize import finalize
    from loader.arrays.query import parse_box

    log = (lambda s: None) if a.json else (lambda s: print(s, file=sys.stderr, flush=True))
    base = a.dir or tempfile.mkdtemp(prefix="bulkload-finalize-", dir="/tmp")
    name = f"fin-{os.getpid()}"
    uri = f"mem://{name}" if a.store == "mem" else f"{a.store}://{base}/ds"
    result = {
        "n": a.n,
        "record_bytes": a.n * 96,
        "dims": a.dims,
        "store": a.store,
        "shards": a.shards,
        "repeats": a.repeats,
        "finalize": {},
        "query": {},
    }
    try:

        def fresh():
            if a.store == "mem":
                shutil.rmtree(f"/dev/shm/bulkload/{name}", ignore_errors=True)
            else:
                shutil.rmtree(f"{base}/ds", ignore_errors=True)
            t = time.perf_counter()
            if sampler:
                sampler.phase("load")
            rep = loader.load(f"gen://scidb96?n={a.n}", uri, shards=a.shards)
            log(f"loaded {a.n:,} records in {time.perf_counter() - t:.1f} s ({rep.mb_per_s:,.0f} MB/s)")
            if sampler:
                sampler.phase(None)

        for w in [int(x) for x in a.workers.split(",")]:
            runs = []
            for i in range(a.repeats):
                fresh()  # every finalize starts from a freshly loaded dataset (untimed)
                if sampler:
                    sampler.phase("finalize")
                t = time.perf_counter()
                r = finalize(uri, dims=a.dims, workers=w, memory_budget=a.memory_budget, strategy=a.strategy).to_dict()
                sec = time.perf_counter() - t
                if sampler:
                    sampler.phase(None)
                runs.append(
                    {
                        "seconds": round(sec, 3),
                        "mb_per_s": round(a.n * 96 / sec / 1e6, 1),
                        "strategy": r["strategy"],
                        "windows": r["windows"],
                        "stages": r["stages"],
                        "spill_runs": r["spill_runs"],
                        "worker_peak_rss_bytes": r["worker_peak_rss_bytes"],
                    }
                )
                log(
                    f"finalize workers={w} #{i + 1}: {sec:.2f} s, {a.n * 96 / sec / 1e6:,.0f} MB/s "
                    f"({r['strategy']}: {r['strategy_reason']}) stages {r['stages']}"
                )
            med = statistics.median(x["mb_per_s"] for x in runs)
            result["finalize"][f"w{w}"] = {"median_mb_per_s": med, "runs": runs}
        ws = sorted(result["finalize"])
        if "w1" in result["finalize"] and "w2" in result["finalize"]:
            result["speedup_2_vs_1"] = round(
                result["finalize"]["w2"]["median_mb_per_s"] / result["finalize"]["w1"]["median_mb_per_s"], 2
            )
        box = parse_box(a.box)
        with loader.open(uri) as ds:
            t = time.perf_counter()
            first = ds.read_box(**box)
            cold = time.perf_counter() - t
            lat = []
            for _ in range(a.queries):
                t = time.perf_counter()
                tb = ds.read_box(**box)
                lat.append(time.perf_counter() - t)
            lat.sort()
            result["query"] = {
                "box": a.box,
                "cells": tb.num_rows,
                "first_call_ms": round(cold * 1e3, 3),
                "median_ms": round(statistics.median(lat) * 1e3, 3),
                "p99_ms": round(lat[int(0.99 * (len(lat) - 1))] * 1e3, 3),
                "queries": a.queries,
            }
            assert first.num_rows == tb.num_rows
    finally:
        if sampler:
            result["rss_tree"] = sampler.stop()
        if a.store == "mem":
            shutil.rmtree(f"/dev/shm/bulkload/{name}", ignore_errors=True)
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)

    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"\nfinalize {a.n:,} scidb96 records ({a.n * 96 / 1e9:.2f} GB), --dims {a.dims}, "
        f"{a.store} with {a.shards} shards, median of {a.repeats}"
    )
    print(f"{'workers':>8} {'MB/s':>9} {'seconds':>9}")
    for w in ws:
        f = result["finalize"][w]
        secs = statistics.median(x["seconds"] for x in f["runs"])
        print(f"{w[1:]:>8} {f['median_mb_per_s']:>9,.0f} {secs:>9.2f}")
    if "speedup_2_vs_1" in result:
        print(f"2 vs 1 workers: {result['speedup_2_vs_1']:.2f}x")
    for ph, v in result.get("rss_tree", {}).items():
        print(
            f"peak memory of the process tree during {ph}: RSS {v['peak_rss_bytes'] / 2**30:.2f} GiB, "
            f"private (USS) {v['peak_uss_bytes'] / 2**30:.2f} GiB ({v['samples']} samples, "
            f"up to {v['max_processes']} processes)"
        )
    q = result["query"]
    print(
        f"box {q['box']}: {q['cells']} cells, median {q['median_ms']:.3f} ms, p99 {q['p99_ms']:.3f} ms "
        f"(first call {q['first_call_ms']:.1f} ms, {q['queries']} queries)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
