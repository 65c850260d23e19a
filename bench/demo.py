"""`make demo`: the main job end to end, with a throughput table.

generate -> load (20M scidb96 records into a sharded LMDB dataset under ./data/) ->
verify -> finalize into the SciDB example's 2-D array
``<d0..d9, i2, i3> [i0, chunk 10; i1, chunk 100000]`` -> two box queries, each step a real
`bulkload` command, and the disk's limit measured on the spot (`bulkload-gen` -> a file
on the same filesystem + fsync) before the load, after it and at the end: the ratios use
the median of the three, never one noisy sample.

Then the second workload, market ticks (``--ticks-n``, default 5M: 205 MB): load
``gen://ticks`` -> finalize on time (``--dims ts:1h,size:1000``) -> a one-hour box query
with ISO-8601 bounds, with its own small table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from loader.bench.processes import settle, warm_for

BIN = Path(sys.executable).parent


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, **kw)
    if p.returncode:
        sys.exit(f"demo: step failed with exit code {p.returncode}: {' '.join(cmd)}")
    return p


def disk_limit(n: int, path: Path) -> float:
    """Seconds for bulkload-gen N -> file + fsync on the dataset's filesystem (from settled
    memory, as the load: loader/bench/processes.settle)."""
    settle()
    t = time.perf_counter()
    with open(path, "wb") as f:
        subprocess.run([str(BIN / "bulkload-gen"), str(n)], stdout=f, check=True)
        os.fsync(f.fileno())
    s = time.perf_counter() - t
    path.unlink()
    return s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000_000)
    ap.add_argument("--data", default="data")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--ticks-n", type=int, default=5_000_000, help="gen://ticks records (0: skip the ticks demo)")
    a = ap.parse_args()
    data = Path(a.data)
    data.mkdir(parents=True, exist_ok=True)
    n, nbytes = a.n, a.n * 96
    ds = data / "demo"
    uri = f"lmdb://{ds}?shards={a.shards}"
    shutil.rmtree(ds, ignore_errors=True)
    warm_for(nbytes)  # each timed step starts from settled memory (loader/bench/processes.settle)

    rows = []
    disk = []  # the disk's limit, sampled before the load, after it and at the end: the median of them
    print(f"== reference: the disk's limit for {nbytes / 1e9:.2f} GB (bulkload-gen -> file + fsync), before")
    disk.append(disk_limit(n, data / "limit.bin"))

    print("== load")
    settle()  # the previous run's pages must not be written back during this one; memory settled
    p = sh([str(BIN / "bulkload"), "load", f"gen://scidb96?n={n}", uri, "--json"], stdout=subprocess.PIPE, text=True)
    rep = json.loads(p.stdout)
    rows.append(
        (
            f"bulkload load ({rep['workers']} workers, {rep['shards']} shards, {rep['format']} "
            f"{rep['compression']}, {rep['stored_bytes'] / 1e6:,.0f} MB stored), durable",
            rep["seconds"],
            rep,
        )
    )
    print("== the disk's limit again, after the load")
    disk.append(disk_limit(n, data / "limit.bin"))

    print("== verify")
    t = time.perf_counter()
    sh([str(BIN / "bulkload"), "verify", f"lmdb://{ds}"])
    rows.append(("bulkload verify (read + checksum every batch)", time.perf_counter() - t, None))

    print("== finalize (redimension into 2-D chunks, SciDB's redimension load)")
    p = sh(
        [str(BIN / "bulkload"), "finalize", f"lmdb://{ds}", "--dims", "i0:10,i1:100000", "--json"],
        stdout=subprocess.PIPE,
        text=True,
    )
    rep = json.loads(p.stdout)
    rows.append((f"bulkload finalize --dims i0:10,i1:100000 ({rep['chunks']} chunks)", rep["seconds"], rep))

    queries = []
    mid = max(0, min(n - 1000, n // 2))
    for box, attrs in ((f"i0=2:5,i1={mid}:{mid + 1000}", "d0,d3"), (f"i0=0:10,i1={mid}:{mid + 100}", None)):
        print(f"== query {box}")
        cmd = [str(BIN / "bulkload"), "query", f"lmdb://{ds}", "--box", box] + (["--attrs", attrs] if attrs else [])
        out = sh(cmd, stdout=subprocess.PIPE, text=True).stdout.splitlines()
        print("\n".join([*out[:6], "  ...", *out[-1:]]))
        queries.append((box, attrs, warm_query_ms(f"lmdb://{ds}", box, attrs)))

    sh([str(BIN / "bulkload"), "info", f"lmdb://{ds}"])
    print("== the disk's limit once more, at the end")
    disk.append(disk_limit(n, data / "limit.bin"))
    t_disk = statistics.median(disk)
    rows.insert(
        0,
        (
            f"bulkload-gen -> file + fsync (disk limit, median of {len(disk)}: "
            + ", ".join(f"{nbytes / s / 1e6:,.0f}" for s in disk)
            + " MB/s)",
            t_disk,
            None,
        ),
    )
    print_table(rows, nbytes, t_disk)
    for box, attrs, (ms, cells) in queries:
        print(
            f"query {box}{' --attrs ' + attrs if attrs else ''}: {cells} cells, "
            f"{ms:.3f} ms median warm (loader.open(...).read_box, 50 runs)"
        )
    if a.ticks_n:
        ticks_demo(a.ticks_n, data, a.shards)


#: the ticks demo's array: one-hour rows of ts (one record a second) by size in thousands
TICKS_DIMS = "ts:1h,size:1000"
#: its box: the second hour of the ticks (record 0 is at 2026-01-02T14:30:00Z), sizes 100..299
TICKS_BOX = "ts=2026-01-02T15:30..2026-01-02T16:30,size=100:300"


def ticks_demo(n: int, data: Path, shards: int) -> None:
    """gen://ticks: load -> finalize on time -> a one-hour box; one small table."""
    ds = data / "demo-ticks"
    uri = f"lmdb://{ds}?shards={shards}"
    shutil.rmtree(ds, ignore_errors=True)
    nbytes = n * 41
    rows = []
    print(f"== ticks: load gen://ticks?n={n} ({nbytes / 1e6:,.0f} MB of 41-byte records)")
    settle()
    p = sh([str(BIN / "bulkload"), "load", f"gen://ticks?n={n}", uri, "--json"], stdout=subprocess.PIPE, text=True)
    rep = json.loads(p.stdout)
    rows.append(
        (
            f"bulkload load gen://ticks ({rep['workers']} workers, {rep['stored_bytes'] / 1e6:,.0f} MB stored)",
            rep["seconds"],
        )
    )
    print(f"== ticks: finalize --dims {TICKS_DIMS}")
    p = sh(
        [str(BIN / "bulkload"), "finalize", f"lmdb://{ds}", "--dims", TICKS_DIMS, "--json"],
        stdout=subprocess.PIPE,
        text=True,
    )
    rep = json.loads(p.stdout)
    rows.append((f"bulkload finalize --dims {TICKS_DIMS} ({rep['chunks']} chunks)", rep["seconds"]))
    print(f"== ticks: query --box '{TICKS_BOX}'")
    out = sh(
        [str(BIN / "bulkload"), "query", f"lmdb://{ds}", "--box", TICKS_BOX, "--attrs", "sym,price,venue"],
        stdout=subprocess.PIPE,
        text=True,
    ).stdout.splitlines()
    print("\n".join([*out[:6], "  ...", *out[-1:]]))
    ms, cells = warm_query_ms(f"lmdb://{ds}", TICKS_BOX, None)

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"throughput, {nbytes / 1e9:.2f} GB of ticks records")
    for c in ("step", "seconds", "MB/s"):
        t.add_column(c, justify="right" if c != "step" else "left")
    for name, secs in rows:
        t.add_row(name, f"{secs:.2f}", f"{nbytes / secs / 1e6:,.0f}")
    Console().print(t)
    print(f"query {TICKS_BOX}: {cells} cells, {ms:.3f} ms median warm (loader.open(...).read_box, 50 runs)")


def warm_query_ms(uri: str, box: str, attrs: str | None) -> tuple[float, int]:
    import loader
    from loader.arrays.query import parse_box

    ranges = parse_box(box)
    with loader.open(uri) as ds:
        cols = attrs.split(",") if attrs else None
        t = ds.read_box(attrs=cols, **ranges)
        times = []
        for _ in range(50):
            t0 = time.perf_counter()
            ds.read_box(attrs=cols, **ranges)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), t.num_rows


def print_table(rows, nbytes: int, t_disk: float) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"throughput, {nbytes / 1e9:.2f} GB of scidb96 records")
    for c in ("step", "seconds", "MB/s", "x disk limit"):
        t.add_column(c, justify="right" if c != "step" else "left")
    for name, secs, _ in rows:
        mbs = nbytes / secs / 1e6
        t.add_row(name, f"{secs:.2f}", f"{mbs:,.0f}", f"{t_disk / secs:.2f}")
    Console().print(t)


if __name__ == "__main__":
    main()
