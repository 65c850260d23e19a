"""The ``limits`` section: the machine's reference limits every bulkload figure is compared
with, measured in the same run - ``bulkload-gen`` to /dev/null, through a pipe, to a file (page
cache, then + fsync: the disk's limit), to /dev/shm, on all cores at once; the C generator
in-process; ``np.save`` + fsync and ``np.load`` of the same bytes (ArcticDB's hardware-limit
method); a cold read of a file evicted from the page cache.

The ``child_*`` functions are the child benchmark processes of this section (run by
`child`); they import numpy themselves, so that a child holds only what its figure measures.

The disk's write limit (``gen-file-fsync``) is not one noisy moment: besides its repeats
here, `disk_sample` adds samples between the interleaved rounds of the versus section and
at the end of the run; its median is over all of them.

Invariants: the files written are on the datasets' file system (the work directory) or in
/dev/shm; a file written by ``bulkload-gen`` must have exactly ``n * 96`` bytes or the
figure fails; every file written is removed after its figure.

Crash behaviour: a killed run may leave ``/dev/shm/bulkload-bench-PID*`` files (and the
work directory, see `runner`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

from .figures import Figure
from .processes import rm, run_gen, run_sampled, settle
from .records import RECORD_SIZE, empty_records, generate_records, record_filler
from .runner import Bench

C_FILL_MAX = 10_000_000
LIMIT_FILE = "limit.bin"  # written by bulkload-gen in the work directory
DISK_LIMIT = "gen-file-fsync"  # the figure every durable load is compared with


def section_limits(b: Bench) -> None:
    _generator_limits(b)
    _file_limits(b)
    _numpy_limits(b)
    rm(b.work / LIMIT_FILE)


def _generator_limits(b: Bench) -> None:
    """bulkload-gen alone: to /dev/null (1 process, all cores), through a pipe."""
    n, gen = b.p.n, b.gen
    f = b.fig(
        "gen-devnull", "limits", "bulkload-gen -> /dev/null", n, note="generation only, no write (SciDB: 2.7 GB/s)"
    )

    def devnull(i):
        with open(os.devnull, "wb") as o:
            p = run_sampled([gen, str(n)], stdout=o)
        return {"seconds": p.wall_s, "peak_tree_rss_bytes": p.peak_tree_rss_bytes}

    b.repeat(f, devnull)

    f = b.fig(
        "gen-parallel-devnull",
        "limits",
        f"{b.cores} x bulkload-gen -> /dev/null (all cores)",
        n,
        note="each process a disjoint record range",
    )
    b.repeat(f, lambda i: {"seconds": parallel_gen(b.gen, n, b.cores, None)})

    f = b.fig("gen-pipe", "limits", "bulkload-gen | cat > /dev/null", n, note="the pipe's limit (for stdin loads)")

    def pipe(i):
        p = run_sampled(["sh", "-c", f"{shlex.quote(gen)} {n} | cat > /dev/null"])
        return {"seconds": p.wall_s}

    b.repeat(f, pipe)


def _file_limits(b: Bench) -> None:
    """bulkload-gen to a file (page cache, + fsync), to /dev/shm, to /dev/shm on all cores."""
    n, gen = b.p.n, b.gen
    path = b.work / LIMIT_FILE
    shm = Path("/dev/shm") / f"bulkload-bench-{os.getpid()}.bin"
    f = b.fig(
        "gen-file", "limits", "bulkload-gen -> file (page cache)", n, note="file on the filesystem of the datasets"
    )
    b.repeat(f, lambda i: gen_to_file(gen, n, path, False))
    b.repeat(disk_limit_figure(b), lambda i: gen_to_file(gen, n, path, True) | {"phase": "limits"})

    f = b.fig(
        "gen-shm", "limits", "bulkload-gen -> /dev/shm (tmpfs)", n, note="single-process write to RAM (SciDB: 1.3 GB/s)"
    )

    def toshm(i):
        rm(shm)
        with open(shm, "wb") as o:
            t = time.perf_counter()
            run_gen(gen, n, o)
            return {"seconds": time.perf_counter() - t}

    b.repeat(f, toshm, teardown=lambda: rm(shm))

    f = b.fig(
        "gen-parallel-shm",
        "limits",
        f"{b.cores} x bulkload-gen -> /dev/shm (all cores)",
        n,
        note="SciDB multi_reference.sh (10.6 GB/s on 32 cores)",
    )
    b.repeat(f, lambda i: {"seconds": parallel_gen(b.gen, n, b.cores, "/dev/shm")})


def _numpy_limits(b: Bench) -> None:
    """The C generator in-process; np.save + fsync, np.load and a cold read of the same bytes."""
    n = b.p.n
    f = b.fig(
        "c-fill",
        "limits",
        "C generator in-process into numpy (1 core)",
        min(n, C_FILL_MAX),
        note="the produce stage's limit",
    )
    b.repeat(f, lambda i: b.child_sample("cfill", n=min(n, C_FILL_MAX)))

    f = b.fig("npsave-fsync", "limits", "np.save + fsync of the same bytes", n, note="ArcticDB's hardware-limit method")
    npy = b.work / "limit.npy"

    def fresh(i: int) -> None:
        rm(npy)
        settle()

    b.repeat(f, lambda i: b.child_sample("npsave", path=str(npy), n=n), setup=fresh)
    f = b.fig("npload", "limits", "np.load (warm page cache)", n, note="ArcticDB's read limit")
    b.repeat(f, lambda i: b.child_sample("npload", path=str(npy)))
    f = b.fig(
        "cold-read",
        "limits",
        "read of a file evicted with posix_fadvise(DONTNEED)",
        n,
        note="the disk's cold read limit",
    )
    b.repeat(
        f,
        lambda i: b.child_sample("coldread", path=str(npy)),
        setup=lambda i: npy.exists() or gen_to_file(b.gen, n, npy, fsync=True),
    )  # np.save not selected
    rm(npy)


def disk_limit_figure(b: Bench) -> Figure | None:
    """The disk's write limit ``gen-file-fsync`` (declared by the first section that needs
    it): the figure to add samples to, or None when it is not selected or not ok."""
    f = b.figures.get(DISK_LIMIT)
    if f is None:
        f = b.fig(
            DISK_LIMIT,
            "limits",
            "bulkload-gen -> file + fsync (disk limit)",
            b.p.n,
            note="file on the filesystem of the datasets, fsync'd: the disk's limit for this "
            "job; sampled before the loads, between the interleaved rounds and at the end "
            "of the run (each sample's phase), the median of them all",
        )
    return f if f is not None and f.status == "ok" else None


def disk_sample(b: Bench, phase: str, path: Path | None = None, keep: bool = False) -> None:
    """One more sample of the disk limit (phase: when it was taken), written to ``path``
    (default: the limits' file); the file is kept when ``keep``. Written untimed when
    the figure is not measured and the file is to be kept."""
    f = disk_limit_figure(b)
    path = path or b.work / LIMIT_FILE
    if f is not None:
        try:
            b.add_sample(f, gen_to_file(b.gen, b.p.n, path, True) | {"phase": phase})
        except Exception as e:  # reported as the figure's failure, the suite goes on
            f.status, f.reason = "failed", f"{type(e).__name__}: {e}"
    elif keep:
        gen_to_file(b.gen, b.p.n, path, True)
    if not keep:
        rm(path)


def gen_to_file(gen: str, n: int, path: Path, fsync: bool) -> dict:
    """One sample: ``bulkload-gen n > path`` (+ fsync), timed from the open file."""
    rm(path)
    settle()
    with open(path, "wb") as o:
        t = time.perf_counter()
        run_gen(gen, n, o, fsync=fsync)
        s = time.perf_counter() - t
    if path.stat().st_size != n * RECORD_SIZE:
        raise RuntimeError(f"{path} has {path.stat().st_size} bytes, expected {n * RECORD_SIZE}")
    return {"seconds": s}


def parallel_gen(gen: str, n: int, k: int, dirname: str | None) -> float:
    """Seconds for ``k`` bulkload-gen processes writing disjoint ranges of ``n`` records, each
    to a file in ``dirname`` (removed afterwards) or to /dev/null."""
    per = -(-n // k)
    files = []
    t = time.perf_counter()
    procs = []
    for w in range(k):
        cnt = max(0, min(per, n - w * per))
        if dirname:
            fp = Path(dirname) / f"bulkload-bench-{os.getpid()}.{w}"
            files.append(fp)
            rm(fp)
            o = open(fp, "wb")  # noqa: SIM115 - the child's stdout, closed once it has ended
        else:
            o = open(os.devnull, "wb")  # noqa: SIM115 - as above
        procs.append((subprocess.Popen([gen, str(cnt), str(w * per)], stdout=o), o))
    for p, o in procs:
        p.wait()
        o.close()
        if p.returncode:
            raise RuntimeError(f"bulkload-gen exited with {p.returncode}")
    s = time.perf_counter() - t
    for fp in files:
        rm(fp)
    return s


# ============================================================================================
# child benchmark processes
# ============================================================================================


def child_cfill(n: int) -> dict:
    fill = record_filler()
    arr = empty_records(n)
    arr.fill(0)  # fault the pages in: measure generation, not page faults
    t = time.perf_counter()
    fill(arr)
    return {"seconds": time.perf_counter() - t}


def child_npsave(path: str, n: int) -> dict:
    import numpy as np  # heavy: only the child that measures np.save holds numpy

    arr = generate_records(n)
    t = time.perf_counter()
    with open(path, "wb") as f:
        np.save(f, arr)
        f.flush()
        os.fsync(f.fileno())
    return {"seconds": time.perf_counter() - t}


def child_npload(path: str) -> dict:
    import numpy as np  # heavy: only the child that measures np.load holds numpy

    t = time.perf_counter()
    a = np.load(path)
    s = time.perf_counter() - t
    del a
    return {"seconds": s}


def child_coldread(path: str) -> dict:
    import numpy as np  # heavy: only the child that measures the read holds numpy

    size = os.path.getsize(path)
    buf = np.empty(size, dtype=np.uint8)
    buf.fill(0)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        got, s = _read_into(fd, buf.data, size)
    finally:
        os.close(fd)
    return {"seconds": s, "bytes_read": got}


def _read_into(fd: int, mv: memoryview, size: int) -> tuple[int, float]:
    """Read up to ``size`` bytes of ``fd`` into ``mv`` in 64 MiB pieces: bytes read, seconds."""
    t = time.perf_counter()
    got = 0
    while got < size:
        k = os.readv(fd, [mv[got : got + (64 << 20)]])
        if k == 0:
            break
        got += k
    return got, time.perf_counter() - t
