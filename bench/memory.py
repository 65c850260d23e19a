"""In-memory loads (issue 13): a numpy array given to loader.load vs gen:// vs ArcticDB.

    .venv/bin/python bench/memory.py [--n N] [--repeat R] [--workers W] [--shards K] [--dir DIR]
                                     [--out FILE] [--json]

Rows, each run R times, interleaved (one of each per round), each in a fresh process tree,
the dataset removed and the file system synced between runs:

  memory    loader.load(array of N scidb96 records, "lmdb://DIR/ds") - the array is generated
            in the child before the clock starts; the time is the load report's own seconds
            (from load() to the fsynced shards and the committed manifest)
  gen       bulkload load gen://scidb96?n=N lmdb://DIR/ds (the same options), its report's seconds
  arcticdb  ArcticDB lib.write(sym, pd.DataFrame(array)) to lmdb:// (loader/bench/peers.py's
            child: the DataFrame is built before the clock starts); skipped when arcticdb or
            pandas does not import

Figures: median seconds and MB/s (10**6 bytes of 96-byte records), min - max; ratios of
medians in this run: memory / gen (the issue's target: >= 0.95) and memory / arcticdb.
Writes FILE (default bench/results/memory.json) and prints a table (or the JSON with --json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from loader.bench.peers import installed
from loader.bench.processes import rm, run_child, run_sampled, settle, tail, tool, warm_for

HERE = Path(__file__).resolve().parent
RECORD_BYTES = 96
TARGET = 0.95  # memory / gen


def child_memory(n: int, dataset: str, workers: int | None, shards: int | None) -> dict:
    """The `memory` row in this (fresh) process: the load's report."""
    import loader  # heavy: only in the child
    from loader.sources.generators import generate

    arr = generate("scidb96", 0, n)
    return loader.load(arr, dataset, workers=workers, shards=shards).to_dict()


def run_memory(n: int, dataset: str, workers: int | None, shards: int | None) -> float:
    args = json.dumps({"n": n, "dataset": dataset, "workers": workers, "shards": shards})
    p = run_sampled([sys.executable, __file__, "--child", args])
    if p.rc != 0:
        raise RuntimeError(f"memory row failed: {tail(p.err)}")
    return float(json.loads(p.out.strip().splitlines()[-1])["seconds"])


def run_gen(n: int, dataset: str, workers: int | None, shards: int | None) -> float:
    cmd = [tool("bulkload"), "load", f"gen://scidb96?n={n}", dataset, "--json", "-q"]
    cmd += [*(["--workers", str(workers)] if workers else []), *(["--shards", str(shards)] if shards else [])]
    p = run_sampled(cmd)
    if p.rc != 0:
        raise RuntimeError(f"gen row failed: {tail(p.err)}")
    return float(json.loads(p.out)["seconds"])


def run_arcticdb(n: int, path: Path) -> float:
    return float(run_child("arcticdb", path=str(path), n=n)[0]["write_s"])


def figure(seconds: list[float], n: int) -> dict:
    rates = sorted(n * RECORD_BYTES / s / 1e6 for s in seconds)
    return {
        "seconds": [round(s, 4) for s in seconds],
        "median_s": round(statistics.median(seconds), 4),
        "mb_s_median": round(statistics.median(rates), 1),
        "mb_s_min": round(rates[0], 1),
        "mb_s_max": round(rates[-1], 1),
    }


def measure(n: int, repeat: int, workers: int | None, shards: int | None, work: Path) -> dict:
    """Every row, interleaved: {row: figure or {"skipped": why}}, and the ratios."""
    work.mkdir(parents=True, exist_ok=True)
    warm_for(n * RECORD_BYTES)  # each run starts from settled memory (processes.settle)
    ds = work / "ds"
    rows = {
        "memory": lambda: run_memory(n, f"lmdb://{ds}", workers, shards),
        "gen": lambda: run_gen(n, f"lmdb://{ds}", workers, shards),
    }
    skipped = {}
    if installed("arcticdb") and installed("pandas"):
        rows["arcticdb"] = lambda: run_arcticdb(n, ds)
    else:
        skipped["arcticdb"] = {"skipped": "not installed (pip install 'bulkload[peers]')"}
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeat):
        for name, run in rows.items():
            rm(ds)
            settle()
            times[name].append(run())
    rm(work)
    figures = {name: figure(t, n) for name, t in times.items()} | skipped
    ratios = {
        f"memory/{other}": round(figures[other]["median_s"] / figures["memory"]["median_s"], 3)
        for other in rows
        if other != "memory"
    }
    return {
        "benchmark": "memory",
        "records": n,
        "bytes": n * RECORD_BYTES,
        "repeat": repeat,
        "workers": workers,
        "shards": shards,
        "cpus": os.cpu_count(),
        "figures": figures,
        "ratios": ratios,
        "target": {"memory/gen": TARGET, "met": ratios["memory/gen"] >= TARGET},
    }


def print_table(result: dict) -> None:
    print(
        f"in-memory loads: {result['records']:,} scidb96 records ({result['bytes'] / 1e6:,.0f} MB), "
        f"{result['repeat']} interleaved runs each"
    )
    print(f"{'row':<10}{'median s':>10}{'MB/s median':>13}{'min - max':>20}")
    for name, f in result["figures"].items():
        if "skipped" in f:
            print(f"{name:<10}{'skipped: ' + f['skipped']:>43}")
            continue
        print(
            f"{name:<10}{f['median_s']:>10.3f}{f['mb_s_median']:>13,.1f}{f['mb_s_min']:>12,.1f} - {f['mb_s_max']:,.1f}"
        )
    for what, ratio in result["ratios"].items():
        print(
            f"{what:<16}{ratio:>6.3f}"
            + (
                f"  (target >= {TARGET}: {'met' if result['target']['met'] else 'NOT met'})"
                if what == "memory/gen"
                else ""
            )
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000_000, help="records per load (default 20,000,000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row, interleaved (default 3)")
    ap.add_argument("--workers", type=int, default=None, help="workers of both bulkload rows (default: cores)")
    ap.add_argument("--shards", type=int, default=None, help="shards of both bulkload rows (default: cores)")
    ap.add_argument("--dir", default=str(HERE / "out"), help="work directory (default bench/out)")
    ap.add_argument("--out", default=str(HERE / "results" / "memory.json"), help="the JSON result file")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # the memory row's child process
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child_memory(**json.loads(a.child))))
        return 0
    if a.n < 1 or a.repeat < 1:
        ap.error("--n and --repeat must be >= 1")
    result = measure(a.n, a.repeat, a.workers, a.shards, Path(a.dir) / f"memory-{os.getpid()}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    if a.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
