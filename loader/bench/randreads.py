"""The ``random`` section: cold random reads of records and boxes, readahead off vs on vs
np.memmap of the raw records, 1 and 2 threads, with the disk's own limit in the same rounds.
The method, invariants and crash behaviour: docs/design/bench.md."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .figures import Figure
from .limits import gen_to_file
from .loads import load_once
from .processes import evict, rm, run_child
from .records import DIMS, LAYOUT, RECORD_SIZE
from .runner import Bench, Row

TARGETS = {"raoff": "readahead off", "raon": "readahead on", "memmap": "np.memmap of the raw file"}
DISK_READ = 12 * 1024  # bytes of one read of the disk's limit: 128 records
DISK_THREADS = (1, 2, 8)


def workload(n: int, tasks: int = 1000, count: int = 4, span: int = 1, width: int = 1000) -> dict:
    """The random-read parameters for ``n`` records: ``count`` pieces ``n // count`` apart."""
    return {"tasks": tasks, "count": count, "stride": max(1, n // count), "span": span, "width": min(width, n)}


def section_random(b: Bench) -> None:
    n, wl = b.p.n, workload(b.p.n, b.p.random_tasks)
    rows = []
    for mode in ("records", "box"):
        for threads in (1, 2):
            rows += [_row(b, mode, threads, target, wl) for target in TARGETS]
    rows += [_disk_row(b, threads, wl["tasks"] * wl["count"]) for threads in DISK_THREADS]
    rows = [r for r in rows if r is not None]
    if not rows:
        return
    ds, raw = b.work / "random-ds", b.work / "random.bin"
    try:
        prepare(b, n, f"lmdb://{ds}", raw)
    except Exception as e:
        for r in rows:
            r.fail(f"could not prepare the data: {e}")
    b.interleave(rows)
    rm(ds)
    rm(raw)


def prepare(b: Bench, n: int, uri: str, raw: Path) -> None:
    """The dataset (loaded, finalized) and the raw records file of the random reads."""
    load_once(b, n, uri, workers=b.cores)
    run_child("finalize", uri=uri, dims=DIMS, workers=b.cores)
    gen_to_file(b.gen, n, raw, True)


def _row(b: Bench, mode: str, threads: int, target: str, wl: dict) -> Row | None:
    pieces = wl["count"] * wl["span"] if mode == "records" else wl["width"]
    what = (
        f"{wl['count']} x {wl['span']} record(s) {wl['stride']:,} apart"
        if mode == "records"
        else f"box of {wl['width']:,} cells"
    )
    f: Figure | None = b.fig(
        f"random-{mode}-{target}-t{threads}",
        "random",
        f"cold random {mode} reads, {TARGETS[target]}, {threads} thread{'s' if threads > 1 else ''}",
        wl["tasks"] * pieces,
        workers=threads,
        params={"mode": mode, "target": target, **wl},
        note=f"{wl['tasks']:,} tasks of {what}, page cache dropped first; MB/s of the records asked for",
    )
    if f is None:
        return None
    ds, raw = b.work / "random-ds", b.work / "random.bin"
    return Row(
        lambda i: b.child_sample(
            "randreads",
            mode=mode,
            target=target,
            threads=threads,
            uri=f"lmdb://{ds}",
            raw=str(raw),
            n=b.p.n,
            seed=i,
            **wl,
        ),
        [(f, "seconds")],
    )


def _disk_row(b: Bench, threads: int, reads: int) -> Row | None:
    f: Figure | None = b.fig(
        f"random-disk-t{threads}",
        "random",
        f"cold random {DISK_READ // 1024} KiB preads of the raw file (the disk's limit), {threads} "
        f"thread{'s' if threads > 1 else ''}",
        reads * DISK_READ // RECORD_SIZE,
        workers=threads,
        params={"mode": "disk", "target": "disk", "tasks": reads, "read_bytes": DISK_READ},
        note=f"{reads:,} reads at random page-aligned offsets, page cache dropped first, readahead off",
    )
    if f is None:
        return None
    raw = b.work / "random.bin"
    return Row(
        lambda i: b.child_sample("diskreads", raw=str(raw), threads=threads, reads=reads, seed=i), [(f, "seconds")]
    )


# ============================================================================================
# child benchmark processes
# ============================================================================================


def child_randreads(
    mode: str,
    target: str,
    threads: int,
    uri: str,
    raw: str,
    n: int,
    seed: int,
    tasks: int,
    count: int,
    stride: int,
    span: int,
    width: int,
) -> dict:
    import numpy as np  # heavy: only in this child

    rng = np.random.default_rng(seed)
    if mode == "records":
        starts = rng.integers(0, max(1, n - (count - 1) * stride - span + 1), tasks).tolist()
        jobs = [[(s + j * stride, s + j * stride + span) for j in range(count)] for s in starts]
    else:
        jobs = [[(lo, lo + width)] for lo in rng.integers(0, max(1, n - width + 1), tasks).tolist()]
    read, close, files = _reader(mode, target, uri, raw, n)
    try:
        for f in files:
            evict(f)
        got, sample = _timed(threads, jobs, lambda part: _run(read, part), raw)
    finally:
        close()
    return sample | {
        "records": got,
        "read_amplification": round(sample["disk_read_bytes"] / max(1, got * RECORD_SIZE), 3),
        "disk_requests_per_task": round(sample["disk_requests"] / tasks, 2),
    }


def child_diskreads(raw: str, threads: int, reads: int, seed: int) -> dict:
    """``reads`` cold random preads of `DISK_READ` bytes of ``raw`` from ``threads`` threads."""
    import os
    import random

    fd = os.open(raw, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        pages = os.fstat(fd).st_size // 4096 - DISK_READ // 4096
        rng = random.Random(seed)
        offsets = [rng.randrange(pages) * 4096 for _ in range(reads)]
        evict(raw)

        def run(part: list) -> int:
            buf = bytearray(DISK_READ)
            for at in part:
                os.preadv(fd, [buf], at)
            return len(part)

        got, sample = _timed(threads, offsets, run, raw)
    finally:
        os.close(fd)
    return sample | {"reads": got, "disk_requests_per_task": round(sample["disk_requests"] / reads, 2)}


def _timed(threads: int, jobs: list, run, path: str) -> tuple[int, dict]:
    """``run`` over ``jobs`` from ``threads`` threads (each a strided share), timed: (its
    total, {seconds, disk_read_bytes, disk_requests})."""
    before, requests = _read_bytes(), _disk_reads(path)
    t = time.perf_counter()
    if threads == 1:
        got = run(jobs)
    else:
        with ThreadPoolExecutor(threads) as ex:
            got = sum(ex.map(run, [jobs[k::threads] for k in range(threads)]))
    s = time.perf_counter() - t
    return got, {"seconds": s, "disk_read_bytes": _read_bytes() - before, "disk_requests": _disk_reads(path) - requests}


def _run(read, jobs: list) -> int:
    return sum(read(lo, hi) for job in jobs for lo, hi in job)


def _disk_reads(path: str) -> int:
    """Read requests completed so far by the block device holding ``path`` (0 if unknown):
    the whole device's, so nothing else may read from it while a sample is timed."""
    import os

    try:
        dev = os.stat(path).st_dev
        with open(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _reader(mode: str, target: str, uri: str, raw: str, n: int):
    """(read(lo, hi) -> records read, close(), files to evict) for one target."""
    import numpy as np  # heavy: only in this child

    if target == "memmap":
        from ..model.layouts import get_layout  # heavy: only in this child

        mm = np.memmap(raw, dtype=get_layout(LAYOUT).dtype, mode="r", shape=(n,))
        return (lambda lo, hi: len(np.array(mm[lo:hi]))), (lambda: None), [raw]
    from ..read.dataset import open as open_ds  # heavy: numpy, pyarrow; only in this child

    ds = open_ds(f"{uri}?readahead={0 if target == 'raoff' else 1}")
    if mode == "records":
        ds.read_records(0, 1)  # opens the shards (evicted again before the clock starts)
        read = lambda lo, hi: len(ds.read_records(lo, hi))
    else:
        ds.read_box(i0=(0, 10), i1=(0, 1))  # opens the shards and reads the array's index
        read = lambda lo, hi: ds.read_box(i0=(0, 10), i1=(lo, hi)).num_rows
    return read, ds.close, [ds.spec.root]


def _read_bytes() -> int:
    """Bytes this process caused to be read from the storage layer (/proc/self/io)."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))
    except (OSError, StopIteration):
        return 0
