"""Generator benchmark: how fast records of layout scidb96 (and documents) are produced.

    .venv/bin/python bench/generate.py [--n N] [--docs D] [--repeats R] [--dir DIR] [--json]

Paths measured (MB/s = 10**6 bytes/s of 96-byte records; median and min-max of R runs):

  c-fill            C generator in-process (loader.sources._gen) into a preallocated numpy array
  gen-devnull       the `bulkload-gen` program > /dev/null (includes process start)
  gen-file          `bulkload-gen` > a new file in DIR (page cache, no fsync)
  gen-file-fsync    `bulkload-gen` > a new file in DIR, then fsync (the disk's limit)
  python            the numpy generator into a preallocated numpy array

Documents (``gen://docs``, layout docs; MB/s = 10**6 bytes/s of text, plus us per document):

  docs-c            generate_docs(seed, 0, D, impl="c")      (loader.sources._gen, generators/docs_gen.c)
  docs-numpy        generate_docs(seed, 0, D, impl="numpy")  (the vectorised reference)

Targets on the reference 2-core machine: c-fill >= 5000, gen-devnull >= 10000,
python >= 700, docs-c >= 1000 MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loader.bench.processes import find_bulkload_gen, run_gen, timed  # shared with `bulkload bench`
from loader.docs.gen import generate_docs
from loader.model.layouts import get_layout
from loader.sources.generators import generate

TARGETS = {"c-fill": 5000, "gen-devnull": 10000, "python": 700, "docs-c": 1000}
DOCS_SEED = 1


def bench_docs(n: int, repeats: int) -> dict:
    """MB/s of text and us per document of generate_docs, C vs numpy (a fresh batch each run)."""
    nbytes = len(generate_docs(DOCS_SEED, 0, n, impl="c").text)
    out = {"docs": n, "text_bytes": nbytes, "paths": {}}
    for impl in ("c", "numpy"):
        generate_docs(DOCS_SEED, 0, min(n, 1000), impl=impl)  # warm up
        times = timed(lambda: generate_docs(DOCS_SEED, 0, n, impl=impl), repeats)
        rates = sorted(nbytes / t / 1e6 for t in times)
        name = f"docs-{impl}"
        out["paths"][name] = {
            "mb_s_median": round(statistics.median(rates), 1),
            "mb_s_min": round(rates[0], 1),
            "mb_s_max": round(rates[-1], 1),
            "us_per_doc_median": round(statistics.median(times) / n * 1e6, 3),
            "seconds": [round(t, 6) for t in times],
            "target_mb_s": TARGETS.get(name),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2_000_000, help="records per run (default 2,000,000)")
    ap.add_argument(
        "--docs", type=int, default=200_000, help="documents per run of the docs paths (default 200,000; 0 skips them)"
    )
    ap.add_argument("--repeats", type=int, default=5, help="runs per path (default 5)")
    ap.add_argument("--dir", default=None, help="directory for the file paths (default: bench/out)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    if args.n < 1 or args.repeats < 1 or args.docs < 0:
        ap.error("--n and --repeats must be >= 1, --docs >= 0")

    n, repeats = args.n, args.repeats
    layout = get_layout("scidb96")
    nbytes = n * layout.record_size
    gen = find_bulkload_gen()
    outdir = Path(args.dir) if args.dir else Path(__file__).resolve().parent / "out"
    outdir.mkdir(parents=True, exist_ok=True)

    results: dict[str, list[float]] = {}

    arr = np.empty(n, dtype=layout.dtype)
    arr.fill(0)  # fault the pages in once: measure generation, not page faults
    generate("scidb96", 0, n, impl="c", out=arr)
    results["c-fill"] = timed(lambda: generate("scidb96", 0, n, impl="c", out=arr), repeats)

    with open(os.devnull, "wb") as devnull:
        run_gen(gen, n, devnull)
        results["gen-devnull"] = timed(lambda: run_gen(gen, n, devnull), repeats)

    with tempfile.TemporaryDirectory(dir=outdir) as tmp:
        path = Path(tmp) / "records.bin"
        for name, fsync in (("gen-file", False), ("gen-file-fsync", True)):
            times = []
            for _ in range(repeats):
                path.unlink(missing_ok=True)
                os.sync()  # start each run with no dirty pages left by the previous one
                with open(path, "wb") as f:
                    t0 = time.perf_counter()
                    run_gen(gen, n, f, fsync=fsync)
                    times.append(time.perf_counter() - t0)
            results[name] = times
            if path.stat().st_size != nbytes:
                sys.exit(f"bench: {path} has {path.stat().st_size} bytes, expected {nbytes}")

    generate("scidb96", 0, n, impl="python", out=arr)
    results["python"] = timed(lambda: generate("scidb96", 0, n, impl="python", out=arr), repeats)

    report = {
        "benchmark": "generate",
        "layout": "scidb96",
        "records": n,
        "bytes": nbytes,
        "repeats": repeats,
        "cpus": os.cpu_count(),
        "paths": {},
    }
    for name, times in results.items():
        rates = sorted(nbytes / t / 1e6 for t in times)
        report["paths"][name] = {
            "mb_s_median": round(statistics.median(rates), 1),
            "mb_s_min": round(rates[0], 1),
            "mb_s_max": round(rates[-1], 1),
            "seconds": [round(t, 6) for t in times],
            "target_mb_s": TARGETS.get(name),
        }
    if args.docs:
        report["docs"] = bench_docs(args.docs, repeats)

    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"scidb96 generator: {n:,} records ({nbytes / 1e6:,.0f} MB), {repeats} runs each")
        print_paths(report["paths"])
        if args.docs:
            d = report["docs"]
            print(
                f"\ndocs generator: {d['docs']:,} documents ({d['text_bytes'] / 1e6:,.0f} MB of text), "
                f"{repeats} runs each"
            )
            print_paths(d["paths"], per_doc=True)
    return 0


def print_paths(paths: dict, per_doc: bool = False) -> None:
    """The table of measured paths: MB/s median, min - max, [us/doc,] target and verdict."""
    w = 10 if per_doc else 0  # the us/doc column
    print(f"{'path':<16}{'MB/s median':>13}{'min - max':>22}{'us/doc' if per_doc else '':>{w}}{'target':>10}")
    for name, r in paths.items():
        target = r["target_mb_s"]
        mark = "" if target is None else (" ok" if r["mb_s_median"] >= target else " MISSED")
        print(
            f"{name:<16}{r['mb_s_median']:>13,.0f}"
            f"{r['mb_s_min']:>11,.0f} - {r['mb_s_max']:<8,.0f}"
            f"{format(r['us_per_doc_median'], '.2f') if per_doc else '':>{w}}"
            f"{'' if target is None else f'{target:,}':>10}{mark}"
        )


if __name__ == "__main__":
    sys.exit(main())
