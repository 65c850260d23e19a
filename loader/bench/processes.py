"""Running what the benchmarks measure: the installed programs (bulkload, bulkload-gen), a
process tree sampled for its peak RSS (`run_sampled`), the child benchmark processes
(``python -m loader.bench.child KIND ARGS-JSON``), and the file-system chores between runs.

Invariants: every sampled run is a fresh process tree; its peak RSS is the largest sum over
the root and all its descendants seen every ``interval`` seconds (VmRSS, and VmRSS minus
shared pages); a child prints its result as one JSON line, the last line of its stdout.

Crash behaviour: a run over its timeout is killed and reported as a RuntimeError; a child
that exits non-zero is a RuntimeError carrying the tail of its stderr. `rm` and `sync` only
remove and flush what a benchmark wrote.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..infra import pagecache


def tool(name: str) -> str:
    """A program installed next to this interpreter (bulkload, bulkload-gen), else on PATH."""
    p = Path(sys.executable).parent / name
    if p.exists():
        return str(p)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} is not installed; run `pip install -e .` first")
    return found


def find_bulkload_gen() -> str:
    return tool("bulkload-gen")


def timed(fn: Callable[[], object], repeats: int, setup: Callable[[], object] | None = None) -> list[float]:
    """Seconds of ``fn()`` over ``repeats`` runs (``setup()`` untimed before each)."""
    times = []
    for _ in range(repeats):
        if setup:
            setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def run_gen(gen: str, n: int, out, fsync: bool = False, start: int = 0) -> None:
    """``bulkload-gen N START > out`` (then fsync out): the SciDB example's reference test."""
    r = subprocess.run([gen, str(n), str(start)], stdout=out, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise RuntimeError(f"bulkload-gen failed ({r.returncode}): {r.stderr.decode().strip()}")
    if fsync:
        os.fsync(out.fileno())


class TreeSampler:
    """Samples the summed RSS of a process and all its descendants every ``interval`` s.

    ``peak_rss``: the largest sum of VmRSS seen (file-backed and shared pages included, so
    memory-mapped store pages count); ``peak_anon``: the largest sum of RSS minus shared
    pages (RssAnon: the private memory the job really holds).
    """

    def __init__(self, pid: int, interval: float = 0.02):
        # lazy: child benchmark processes import this module, psutil would add ~2 MB to their RSS
        import psutil

        self._psutil = psutil
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak_rss = 0
        self.peak_anon = 0
        self.peak_procs = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        ps = self._psutil
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except ps.Error:
            return
        rss = anon = 0
        for p in procs:
            try:
                m = p.memory_info()
            except ps.Error:
                continue
            rss += m.rss
            anon += max(0, m.rss - getattr(m, "shared", 0))
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_anon = max(self.peak_anon, anon)
        self.peak_procs = max(self.peak_procs, len(procs))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self._sample()
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


@dataclass
class Proc:
    """What one sampled run gave: exit code, decoded stdout / stderr, wall time, peak RSS."""

    rc: int
    out: str
    err: str
    wall_s: float
    peak_tree_rss_bytes: int
    peak_tree_anon_bytes: int


def run_sampled(
    cmd: list[str],
    *,
    stdout=subprocess.PIPE,
    stdin=None,
    cwd=None,
    env=None,
    timeout: float = 1800,
    after: Callable[[], None] | None = None,
) -> Proc:
    """Run ``cmd``, sampling its process tree's RSS; ``after()`` runs inside the timing.

    By default in an empty directory: an older bulkload (``--before``) run from a checkout
    imported that checkout's ``loader`` in its workers (its forkserver put the current
    directory first on its path), so "before" measured today's workers."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, stdin=stdin, cwd=cwd or neutral_dir(), env=env)
    with TreeSampler(p.pid) as s:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise RuntimeError(f"timed out after {timeout:.0f} s: {' '.join(cmd)}") from None
        if after is not None and p.returncode == 0:
            after()
    wall = time.perf_counter() - t0
    return Proc(p.returncode, _decoded(out), _decoded(err), wall, s.peak_rss, s.peak_anon)


def _decoded(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def child_cmd(kind: str, **args) -> list[str]:
    """A child benchmark process: ``python -m loader.bench.child KIND ARGS-JSON``."""
    return [sys.executable, "-m", "loader.bench.child", kind, json.dumps(args)]


def run_child(kind: str, **args) -> tuple[dict, Proc]:
    """Run one child benchmark in a fresh, sampled process; its JSON result and the run."""
    p = run_sampled(child_cmd(kind, **args))
    if p.rc != 0:
        raise RuntimeError(tail(p.err) or f"child {kind} exited with {p.rc}")
    return json.loads(p.out.strip().splitlines()[-1]), p


def tail(text: str, lines: int = 3) -> str:
    """The last ``lines`` lines of a program's stderr, on one line."""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


@functools.cache
def neutral_dir() -> str:
    """An empty directory of this process's: the working directory of the commands it times."""
    import atexit
    import tempfile

    d = tempfile.mkdtemp(prefix="bulkload-bench-cwd-")
    atexit.register(shutil.rmtree, d, True)
    return d


def rm(path: str | Path) -> None:
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


#: bytes of memory `settle` touches before each sample (0: none); set by the entry points
#: from the records a sample moves (`warm_for`)
WARM = {"bytes": 0}


def warm_for(nbytes: int) -> None:
    """Before each sample, touch memory for a run moving ``nbytes`` of records: three times
    that (records in memory, their new page-cache pages, the writers' buffers), at most half
    of what is available. See `settle`."""
    import psutil  # lazy: child benchmark processes import this module (see TreeSampler)

    WARM["bytes"] = int(min(3 * nbytes, psutil.virtual_memory().available // 2))


def settle() -> None:
    """Start every sample from the same state: no dirty pages of a previous run left to be
    flushed during this one (``sync``), and free memory the kernel can hand out at once.

    The second matters on virtual machines that give free memory back to their host (free
    page reporting, DAMON pageout; this benchmark machine does both): the first touch of
    such a page is a fault in the host, and a run that needs more fresh pages than the one
    before it (a 2 GB array held in memory while 2 GB of store pages are written) measured
    2-3 x slower for that alone. Touching ``WARM["bytes"]`` once and freeing them before
    each sample puts every row on an equal footing, as on a machine that keeps its memory."""
    os.sync()
    size = WARM["bytes"]
    if size > 0:
        import numpy as np  # heavy: only where a benchmark warms memory

        block = np.empty(size, dtype=np.uint8)
        block[::4096] = 1  # one write per page: the page is faulted in
        del block


def _files(path: str | Path) -> list[Path]:
    """``path`` if it is a file, else the regular files under it (symlinks left out)."""
    p = Path(path)
    return [p] if p.is_file() else [q for q in p.rglob("*") if q.is_file() and not q.is_symlink()]


def disk_bytes(path: str | Path) -> int:
    """Bytes allocated on disk (st_blocks) by the files under ``path`` (or the file): what a
    dataset really takes, whatever the apparent size of a sparse or pre-sized file."""
    return sum(q.stat().st_blocks * 512 for q in _files(path))


def cached_fraction(path: str | Path) -> float:
    """The part (0..1) of the file ``path`` in the page cache now (mincore(2) of a map of it).
    This machine's kernel pages out memory not touched for ~30 s (DAMON), page cache too:
    a file read a minute ago may be partly on disk again."""
    cached, pages = pagecache.cached_pages(path)
    return cached / pages if pages else 1.0


def evict(path: str | Path) -> None:
    """Drop the page cache of the file(s) under ``path`` (fsync, then posix_fadvise DONTNEED,
    checked with mincore and retried): the next read of them comes from the disk."""
    for q in _files(path):
        pagecache.evict(q)
