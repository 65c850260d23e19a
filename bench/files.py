"""Files benchmark (issue 13): .npy and Arrow IPC sources against the raw file; 1 vs 2 FIFOs.

    .venv/bin/python bench/files.py [--n N] [--repeats R] [--workers W] [--shards K]
                                    [--dir DIR] [--out FILE] [--json]

The same N scidb96 records (default 20,000,000: 1.92 GB) as a raw file, an .npy file and
an Arrow IPC file (uncompressed, record batches of 65,536 rows), each read once first so
that the page cache is warm, then loaded by `bulkload load FILE lmdb://...` into a fresh
dataset (W workers, K shards, durable at the end), the paths interleaved, R runs each;
and N records from FIFOs fed by `bulkload-gen` processes: one FIFO of N records, and two
of N/2 each read in parallel (one feeder thread per pipe). The time is the load's own
report (from the start of load() to the committed manifest). Figures: MB/s (10**6 bytes
of 96-byte records per second), median and min-max of the R runs.

Targets: npy and arrow >= 0.9 x the raw file's MB/s (same run); 2 FIFOs / 1 FIFO is
reported (no target: two generators share the cores with the load).

Writes FILE (default bench/results/files.json) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from loader.bench.processes import tool
from loader.model.layouts import get_layout
from loader.sources.generators import generate

LAYOUT = get_layout("scidb96")
TARGETS = {"npy": ("raw", 0.9), "arrow": ("raw", 0.9)}
CHUNK = 1 << 20  # records written per step while making the files (memory stays flat in N)


def make_files(d: Path, n: int) -> dict[str, str]:
    """The N records as a raw file, an .npy file and an Arrow IPC file in ``d``."""
    import pyarrow as pa

    raw, npy, arrow = d / "records.bin", d / "records.npy", d / "records.arrow"
    header = np.lib.format.open_memmap(npy, mode="w+", dtype=LAYOUT.dtype, shape=(n,))
    with open(raw, "wb") as f, pa.ipc.new_file(str(arrow), LAYOUT.arrow_schema) as w:
        for start in range(0, n, CHUNK):
            block = generate(LAYOUT, start, min(CHUNK, n - start), impl="c")
            f.write(block.tobytes())
            header[start : start + len(block)] = block
            table = pa.table({name: block[name] for name in LAYOUT.names}, schema=LAYOUT.arrow_schema)
            w.write_table(table, max_chunksize=65536)
    header.flush()
    del header
    return {"raw": str(raw), "npy": str(npy), "arrow": str(arrow)}


def warm(path: str) -> None:
    """Read a file once: its pages are in the page cache for the timed loads."""
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass


def load(sources: list[str], dataset: str, args) -> float:
    """Seconds of one `bulkload load SOURCES DATASET` (its report), in a fresh process tree."""
    cmd = [
        tool("bulkload"),
        "load",
        *sources,
        f"lmdb://{dataset}",
        "--workers",
        str(args.workers),
        "--shards",
        str(args.shards),
        "--json",
        "--quiet",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    report = json.loads(p.stdout)
    if report["records"] != args.n:
        raise RuntimeError(f"{' '.join(cmd)} loaded {report['records']} records, not {args.n}")
    return report["seconds"]


def load_fifos(k: int, d: Path, dataset: str, args) -> float:
    """Seconds of loading N records from ``k`` FIFOs, each fed by its own `bulkload-gen`."""
    fifos, writers, share = [], [], -(-args.n // k)
    for i in range(k):
        fifo = d / f"p{i}"
        os.mkfifo(fifo)
        fifos.append(str(fifo))
        n = min(share, args.n - i * share)
        cmd = f'exec "$0" {n} {i * share} > "$1"'
        writers.append(subprocess.Popen(["sh", "-c", cmd, tool("bulkload-gen"), str(fifo)]))
    try:
        return load(fifos, dataset, args)
    finally:
        for w in writers:
            w.wait(timeout=600)
        for f in fifos:
            os.unlink(f)


def measure(args) -> dict:
    """Every path R times, interleaved: {path: [seconds]}."""
    base = Path(args.dir) if args.dir else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    times: dict[str, list[float]] = {p: [] for p in ("raw", "npy", "arrow", "fifo-1", "fifo-2")}
    with tempfile.TemporaryDirectory(dir=base, prefix="bench-files-") as tmp:
        d = Path(tmp)
        files = make_files(d, args.n)
        for _ in range(args.repeats):
            for name, path in files.items():
                warm(path)
                times[name].append(load([path], str(d / f"ds-{name}"), args))
                shutil.rmtree(d / f"ds-{name}")
            for k in (1, 2):
                times[f"fifo-{k}"].append(load_fifos(k, d, str(d / f"ds-fifo{k}"), args))
                shutil.rmtree(d / f"ds-fifo{k}")
    return times


def report_of(times: dict, args) -> dict:
    nbytes = args.n * LAYOUT.record_size
    paths = {}
    for name, secs in times.items():
        rates = sorted(nbytes / s / 1e6 for s in secs)
        paths[name] = {
            "mb_s_median": round(statistics.median(rates), 1),
            "mb_s_min": round(rates[0], 1),
            "mb_s_max": round(rates[-1], 1),
            "seconds": [round(s, 4) for s in secs],
        }
    ratios = {
        f"{name}/raw": round(paths[name]["mb_s_median"] / paths["raw"]["mb_s_median"], 3) for name in ("npy", "arrow")
    }
    ratios["fifo-2/fifo-1"] = round(paths["fifo-2"]["mb_s_median"] / paths["fifo-1"]["mb_s_median"], 3)
    targets = [
        {
            "what": f"{name} / raw file",
            "ratio": ratios[f"{name}/{ref}"],
            "target": t,
            "status": "ok" if ratios[f"{name}/{ref}"] >= t else "MISSED",
        }
        for name, (ref, t) in TARGETS.items()
    ]
    return {
        "benchmark": "files",
        "layout": LAYOUT.name,
        "records": args.n,
        "bytes": nbytes,
        "repeats": args.repeats,
        "workers": args.workers,
        "shards": args.shards,
        "cpus": os.cpu_count(),
        "paths": paths,
        "ratios": ratios,
        "targets": targets,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000_000, help="records per load (default 20,000,000)")
    ap.add_argument("--repeats", "--repeat", type=int, default=3, help="runs per path (default 3)")
    ap.add_argument("--workers", type=int, default=2, help="load workers (default 2)")
    ap.add_argument("--shards", type=int, default=2, help="dataset shards (default 2)")
    ap.add_argument("--dir", default=None, help="directory for the files and datasets (default: the temp dir)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "files.json"))
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    if args.n < 2 or args.repeats < 1:
        ap.error("--n must be >= 2 and --repeats >= 1")
    result = report_of(measure(args), args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(
        f"{args.n:,} scidb96 records ({result['bytes'] / 1e6:,.0f} MB), {args.workers} workers, {args.shards} "
        f"shards, {args.repeats} runs each (medians)"
    )
    print(f"{'path':<10}{'MB/s median':>13}{'min - max':>22}")
    for name, r in result["paths"].items():
        print(f"{name:<10}{r['mb_s_median']:>13,.0f}{r['mb_s_min']:>11,.0f} - {r['mb_s_max']:<8,.0f}")
    for t in result["targets"]:
        print(f"{t['status']:<6} {t['ratio']:6.2f} (target {t['target']})  {t['what']}")
    print(f"       {result['ratios']['fifo-2/fifo-1']:6.2f}               2 FIFOs / 1 FIFO")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
