"""The Dask engine against the local pool: the same records loaded both ways, and Dask
with 2 vs 1 worker processes; medians of ``--repeat`` runs and their ratios.

    python bench/dask_engine.py --n 20000000 --shards 2 --out bench/out/dask.json

Each load goes into a fresh LMDB dataset under ``--data``. Dask runs on a LocalCluster
(worker processes, one thread each) started once per worker count, before the timed
loads (its start-up is reported apart). The issue's targets: dask/local >= 0.85,
dask 2 vs 1 worker >= 1.6. Nothing here is a figure unless this script measured it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import loader
from loader.bench.processes import settle, warm_for


def timed_load(source: str, root: Path, shards: int, workers: int, compression: str = "none", **engine) -> float:
    """Seconds of one load into a fresh dataset at ``root``."""
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    rep = loader.load(source, f"lmdb://{root}", shards=shards, workers=workers, compression=compression, **engine)
    seconds = time.perf_counter() - t
    assert rep.records > 0
    return seconds


def figure(seconds: list[float], n: int) -> dict:
    rates = sorted(n * 96 / x / 1e6 for x in seconds)
    return {
        "seconds": [round(x, 3) for x in seconds],
        "median_s": round(statistics.median(seconds), 3),
        "mb_per_s": round(statistics.median(rates), 1),
        "mb_per_s_min": round(rates[0], 1),
        "mb_per_s_max": round(rates[-1], 1),
    }


def run(n: int, shards: int, repeat: int, data: Path, compression: str = "none") -> dict:
    """Both clusters are started first (their start-up reported apart); then each round
    runs the local pool, Dask with 1 worker and Dask with 2 workers, one after the other
    (interleaved, so a noisy minute hits all three alike)."""
    from contextlib import ExitStack

    from distributed import Client, LocalCluster

    source = f"gen://scidb96?n={n}"
    out: dict = {"n": n, "shards": shards, "repeat": repeat, "interleaved": True, "compression": compression}
    with ExitStack() as stack:
        clients = {}
        for nworkers in (1, 2):
            t = time.perf_counter()
            c = stack.enter_context(
                LocalCluster(n_workers=nworkers, threads_per_worker=1, processes=True, dashboard_address=None)
            )
            clients[nworkers] = stack.enter_context(Client(c))
            out[f"cluster_{nworkers}_start_s"] = round(time.perf_counter() - t, 3)
        c = compression
        rows = {
            "local": lambda: timed_load(source, data / "local", shards, 2, c),
            "dask_1": lambda: timed_load(source, data / "dask1", shards, 2, c, client=clients[1]),
            "dask_2": lambda: timed_load(source, data / "dask2", shards, 2, c, client=clients[2]),
        }
        times: dict[str, list[float]] = {k: [] for k in rows}
        warm_for(n * 96)
        for _ in range(repeat):
            for name, fn in rows.items():
                settle()  # no dirty pages of the previous load, settled memory (see settle)
                times[name].append(fn())
                shutil.rmtree(data / name.replace("_", ""), ignore_errors=True)
    out.update({name: figure(t, n) for name, t in times.items()})
    out["dask_vs_local"] = round(out["local"]["median_s"] / out["dask_2"]["median_s"], 3)
    out["dask_2_vs_1"] = round(out["dask_1"]["median_s"] / out["dask_2"]["median_s"], 3)
    out["targets"] = {"dask_vs_local": 0.85, "dask_2_vs_1": 1.6}
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000_000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compression", default="none", help="none (default), lz4 or zstd: lz4 makes a load CPU-bound")
    ap.add_argument("--data", default=None, help="Directory for the datasets (default: a temporary one).")
    ap.add_argument("--out", default=None, help="Write the result as JSON here too.")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.data) as tmp:
        result = run(args.n, args.shards, args.repeat, Path(tmp), args.compression)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return result


if __name__ == "__main__":
    sys.exit(main() and 0)
