"""`bulkload bench`: throughput against the hardware, the way the SciDB binary-load example
and ArcticDB's "hardware limit" notes do it.

Every figure is measured ``repeats`` times in a fresh subprocess (so that its whole process
tree can be sampled for peak RSS), and reported as the median and min-max of the samples in
MB/s (10**6 bytes of 96-byte ``scidb96`` records per second) and records/s, with its ratio to
the matching reference limit measured *in the same run*.

Sections (a suite runs them in this order):

``limits``   reference limits: ``bulkload-gen`` -> /dev/null, -> a pipe, -> a file, -> a file +
             fsync (the disk's limit), -> /dev/shm; all cores generating in parallel; the C
             generator in-process; np.save + fsync / np.load of the same bytes; a cold read
             (file evicted from the page cache with posix_fadvise DONTNEED).
``load``     ``bulkload load`` (the CLI, in a subprocess; the time is the report's own, from
             the start of load() to the committed, fsynced manifest): 1 worker vs all,
             capnp vs Arrow (none/lz4/zstd), lmdb vs rocksdb vs mem, stdin pipe vs in-process.
``scaling``  load over workers 1..cores (shards = cores); finalize likewise when it exists.
``finalize`` ``loader.redimension.finalize`` with 1 and all workers on a fresh copy of a loaded
             dataset each repeat; then the warm latency of a ~1,000-cell box query from Python.
``peers``    naive peers on the same records: py-lmdb one key per record, py-lmdb one key per
             10,000-record blob, rocksdict WriteBatch, the pycapnp builder field by field; and,
             with the ``bulkload[peers]`` extra, ArcticDB write/read to lmdb:// and TileDB
             sparse 2-D write and box read. Peers not installed are "skipped: not installed".
``rss``      (full suite) peak RSS of the whole load job for a large N vs a small N.

Output (``write_outputs``): ``bench.json`` (schema ``bulkload-bench`` version
:data:`SCHEMA_VERSION`), ``bench.md`` (tables), ``throughput.png``, ``scaling.png``,
``rss.png``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..infra.outputs import open_output, output_dir, write_output

SCHEMA = "bulkload-bench"
SCHEMA_VERSION = 1
RECORD_SIZE = 96
LAYOUT = "scidb96"
DIMS = "i0:10,i1:100000"
MB = 1e6

#: parameters of each suite; ``n`` is the record count of the main figures
SUITES: dict[str, dict] = {
    "quick": dict(n=1_000_000, repeats=3, n_naive=200_000, n_builder=20_000, n_tiledb=200_000,
                  n_arctic=None, query_reps=50, rss_n=None,
                  sections=("limits", "load", "scaling", "finalize", "peers")),
    "full": dict(n=20_000_000, repeats=3, n_naive=2_000_000, n_builder=200_000, n_tiledb=2_000_000,
                 n_arctic=None, query_reps=200, rss_n=(2_000_000, 50_000_000),
                 sections=("limits", "load", "scaling", "finalize", "peers", "rss")),
}
SECTIONS = ("limits", "load", "scaling", "finalize", "peers", "rss")

#: packages whose versions go into the JSON
LIBRARIES = ("bulkload", "numpy", "pyarrow", "lmdb", "rocksdict", "pycapnp", "psutil", "xxhash",
             "zstandard", "typer", "rich", "matplotlib", "arcticdb", "tiledb", "pandas")
PEER_PACKAGES = {"arcticdb": "arcticdb", "tiledb": "tiledb", "pandas": "pandas"}


# ============================================================================================
# helpers: tools, process-tree sampling, statistics
# ============================================================================================


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
            procs = [self.root] + self.root.children(recursive=True)
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
    rc: int
    out: str
    err: str
    wall_s: float
    peak_tree_rss_bytes: int
    peak_tree_anon_bytes: int


def run_sampled(cmd: list[str], *, stdout=subprocess.PIPE, stdin=None, cwd=None, env=None,
                timeout: float = 1800, after: Callable[[], None] | None = None) -> Proc:
    """Run ``cmd``, sampling its process tree's RSS; ``after()`` runs inside the timing."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, stdin=stdin, cwd=cwd, env=env)
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
    dec = (lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or ""))
    return Proc(p.returncode, dec(out), dec(err), wall, s.peak_rss, s.peak_anon)


def child_cmd(kind: str, **args) -> list[str]:
    """A child benchmark process: ``python -m loader.bench child KIND ARGS-JSON``."""
    return [sys.executable, "-m", "loader.bench.suite", "child", kind, json.dumps(args)]


def run_child(kind: str, **args) -> tuple[dict, Proc]:
    p = run_sampled(child_cmd(kind, **args))
    if p.rc != 0:
        raise RuntimeError(_tail(p.err) or f"child {kind} exited with {p.rc}")
    return json.loads(p.out.strip().splitlines()[-1]), p


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def stats(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def rm(path: str | Path) -> None:
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def sync() -> None:
    """No dirty pages of a previous run may be flushed during the next one."""
    os.sync()


# ============================================================================================
# machine, versions, git
# ============================================================================================


def filesystem_of(path: str | Path) -> dict:
    import psutil

    real = os.path.realpath(path)
    best = None
    for part in psutil.disk_partitions(all=True):
        mp = part.mountpoint
        if real == mp or real.startswith(mp.rstrip("/") + "/") or mp == "/":
            if best is None or len(mp) > len(best.mountpoint):
                best = part
    out = {"path": real}
    if best is not None:
        out.update(type=best.fstype, device=best.device, mountpoint=best.mountpoint)
    try:
        st = os.statvfs(real)
        out["free_bytes"] = st.f_bavail * st.f_frsize
    except OSError:
        pass
    return out


def machine_info(work_dir: str | Path) -> dict:
    import psutil

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
        "kernel": platform.release(),
        "os": platform.platform(),
        "hostname": platform.node(),
        "python": platform.python_version(),
        "filesystem": filesystem_of(work_dir),
        "shm_filesystem": filesystem_of("/dev/shm") if os.path.isdir("/dev/shm") else None,
        "loadavg_at_start": list(os.getloadavg()),
    }


def library_versions() -> dict:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    try:
        import lmdb

        out["liblmdb"] = ".".join(map(str, lmdb.version()))
    except Exception:
        pass
    try:
        import tiledb

        out["libtiledb"] = ".".join(map(str, tiledb.libtiledb.version()))
    except Exception:
        pass
    return out


def git_info() -> dict:
    repo = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True,
                                text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(status.strip()) if commit else None,
            "changed_files": len(status.splitlines()) if commit else None}


# ============================================================================================
# the plan: figures
# ============================================================================================


@dataclass
class Figure:
    id: str
    group: str  # limits | load | finalize | query | peers | rss
    title: str
    records: int
    kind: str = "throughput"  # throughput | latency | memory
    limit: str | None = None  # id of the matching reference limit
    note: str = ""
    samples: list[dict] = field(default_factory=list)
    status: str = "ok"  # ok | skipped | failed
    reason: str = ""
    workers: int | None = None
    params: dict = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return self.records * RECORD_SIZE

    def secs(self) -> list[float]:
        return [s["seconds"] for s in self.samples if s.get("seconds")]

    def to_dict(self, limits: dict[str, "Figure"]) -> dict:
        d = {"id": self.id, "group": self.group, "title": self.title, "kind": self.kind,
             "status": self.status, "records": self.records, "bytes": self.bytes,
             "workers": self.workers, "params": self.params, "note": self.note,
             "repeats": len(self.samples), "samples": self.samples}
        if self.status != "ok":
            d["reason"] = self.reason
        secs = self.secs()
        d["seconds"] = stats(secs)
        if self.kind == "throughput" and secs:
            d["mb_s"] = stats([self.bytes / s / MB for s in secs])
            d["records_s"] = stats([self.records / s for s in secs])
        elif self.kind == "latency" and secs:
            d["latency_ms"] = stats([s * 1e3 for s in secs])
        rss = [s["peak_tree_rss_bytes"] for s in self.samples if s.get("peak_tree_rss_bytes")]
        anon = [s["peak_tree_anon_bytes"] for s in self.samples if s.get("peak_tree_anon_bytes")]
        rep = [s["report_peak_rss_bytes"] for s in self.samples if s.get("report_peak_rss_bytes")]
        d["peak_tree_rss_bytes"] = stats(rss)
        d["peak_tree_anon_bytes"] = stats(anon)
        if rep:
            d["report_peak_rss_bytes"] = stats(rep)
        d["limit"] = self.limit
        lim = limits.get(self.limit) if self.limit else None
        if lim is not None and lim.status == "ok" and lim.secs() and d.get("mb_s"):
            lm = statistics.median(lim.bytes / s / MB for s in lim.secs())
            d["ratio_to_limit"] = {k: v / lm for k, v in d["mb_s"].items()}
        else:
            d["ratio_to_limit"] = None
        return d


def _mb_s(f: Figure | None) -> float | None:
    if f is None or f.status != "ok" or not f.secs() or f.kind != "throughput":
        return None
    return statistics.median(f.bytes / s / MB for s in f.secs())


# ============================================================================================
# the runner
# ============================================================================================


class Bench:
    def __init__(self, suite: str = "quick", *, n: int | None = None, repeats: int | None = None,
                 out: str | Path = "bench-results", work: str | Path | None = None,
                 sections: tuple[str, ...] | None = None, only: set[str] | None = None,
                 log: Callable[[str], None] | None = None, **overrides):
        if suite not in SUITES:
            raise ValueError(f"unknown suite {suite!r}; use one of {', '.join(SUITES)}")
        p = dict(SUITES[suite])
        p.update({k: v for k, v in overrides.items() if v is not None})
        if n is not None:
            # scale the secondary sizes down with n (never up past the suite's own)
            scale = n / p["n"]
            for k in ("n_naive", "n_builder", "n_tiledb"):
                p[k] = max(1000, min(p[k], int(p[k] * scale))) if scale < 1 else p[k]
            p["n"] = n
            if p.get("rss_n") and scale < 1:
                p["rss_n"] = None
        if repeats is not None:
            p["repeats"] = repeats
        if p["repeats"] < 1 or p["n"] < 1000:
            raise ValueError("--repeats must be >= 1 and --n >= 1000")
        p["n_arctic"] = p.get("n_arctic") or p["n"]
        self.suite = suite
        self.p = p
        self.sections = tuple(sections or p["sections"])
        self.only = only
        self.cores = os.cpu_count() or 1
        self.out = Path(output_dir(str(out)))
        self.work_parent = Path(output_dir(str(work), "--work")) if work else self.out
        self.log = log or (lambda s: None)
        self.figures: dict[str, Figure] = {}
        self.gen = find_bulkload_gen()
        self.bulkload = tool("bulkload")
        self.mem_names: list[str] = []

    # --- figure bookkeeping -------------------------------------------------------------
    def fig(self, id: str, group: str, title: str, records: int, **kw) -> Figure | None:
        f = Figure(id, group, title, records, **kw)
        self.figures[id] = f
        if self.only is not None and id not in self.only and group not in self.only:
            f.status, f.reason = "skipped", "not selected"
            return None
        return f

    def repeat(self, f: Figure | None, one: Callable[[int], dict], setup: Callable[[int], None] | None = None,
               teardown: Callable[[], None] | None = None) -> None:
        """Run ``one(i)`` ``repeats`` times; it returns a sample dict with "seconds"."""
        if f is None or f.status != "ok":
            return
        try:
            for i in range(self.p["repeats"]):
                if setup:
                    setup(i)
                s = one(i)
                s["loadavg_1m"] = round(os.getloadavg()[0], 2)  # the machine is shared: show it
                f.samples.append({k: (round(v, 6) if isinstance(v, float) else v) for k, v in s.items()})
        except Exception as e:  # a failing figure is reported, the suite goes on
            f.status, f.reason = "failed", f"{type(e).__name__}: {e}"
        finally:
            if teardown:
                try:
                    teardown()
                except Exception:
                    pass
        self._report(f)

    def skip(self, f: Figure | None, reason: str) -> None:
        if f is not None:
            f.status, f.reason = "skipped", reason
            self._report(f)

    def _report(self, f: Figure) -> None:
        d = f.to_dict(self.figures)
        if f.status != "ok":
            self.log(f"{f.id:<28} {f.status}: {f.reason}")
        elif f.kind == "latency":
            st = d["latency_ms"]
            self.log(f"{f.id:<28} {st['median']:9.3f} ms   ({st['min']:.3f} - {st['max']:.3f})")
        elif d.get("mb_s"):
            st = d["mb_s"]
            r = d["ratio_to_limit"]
            extra = f"  {r['median']:.2f}x {f.limit}" if r else ""
            self.log(f"{f.id:<28} {st['median']:9,.0f} MB/s ({st['min']:,.0f} - {st['max']:,.0f}){extra}")

    # --- running -------------------------------------------------------------------------
    def run(self) -> dict:
        t0 = time.perf_counter()
        started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.work = Path(tempfile.mkdtemp(prefix=".bench-work-", dir=self.work_parent))
        machine = machine_info(self.work)
        self.log(f"bulkload bench --suite {self.suite}: n={self.p['n']:,} records "
                 f"({self.p['n'] * RECORD_SIZE / 1e9:.2f} GB), {self.p['repeats']} repeats, "
                 f"{self.cores} cores, work dir {self.work} ({machine['filesystem'].get('type')})")
        try:
            for sec in SECTIONS:
                if sec in self.sections:
                    getattr(self, f"section_{sec}")()
        finally:
            rm(self.work)
            for name in self.mem_names:
                rm(f"/dev/shm/bulkload/{name}")
        machine["loadavg_at_end"] = list(os.getloadavg())
        return self.result(machine, started, time.perf_counter() - t0)

    def result(self, machine: dict, started: str, duration: float) -> dict:
        figs = {k: f.to_dict(self.figures) for k, f in self.figures.items()}
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "suite": self.suite,
            "started": started,
            "duration_s": round(duration, 1),
            "machine": machine,
            "versions": library_versions(),
            "git": git_info(),
            "parameters": {
                "layout": LAYOUT, "record_size": RECORD_SIZE, "mb": "10**6 bytes",
                "cores": self.cores, "shards": self.cores, "dims": DIMS,
                "box": self.box(self.p["n"]), **{k: v for k, v in self.p.items() if k != "sections"},
                "sections": list(self.sections),
                "command": " ".join(shlex.quote(a) for a in sys.argv),
            },
            "figures": figs,
            "targets": self.targets(),
            "skipped": [{"id": k, "status": f.status, "reason": f.reason}
                        for k, f in self.figures.items() if f.status != "ok"],
        }

    # --- section: reference limits ----------------------------------------------------------
    def section_limits(self) -> None:
        n, gen = self.p["n"], self.gen
        path = self.work / "limit.bin"
        shm = Path("/dev/shm") / f"bulkload-bench-{os.getpid()}.bin"

        f = self.fig("gen-devnull", "limits", "bulkload-gen -> /dev/null", n,
                     note="generation only, no write (SciDB: 2.7 GB/s)")

        def devnull(i):
            with open(os.devnull, "wb") as o:
                p = run_sampled([gen, str(n)], stdout=o)
            return {"seconds": p.wall_s, "peak_tree_rss_bytes": p.peak_tree_rss_bytes}
        self.repeat(f, devnull)

        f = self.fig("gen-parallel-devnull", "limits", f"{self.cores} x bulkload-gen -> /dev/null "
                     "(all cores)", n, note="each process a disjoint record range")
        self.repeat(f, lambda i: {"seconds": self._parallel_gen(n, None)})

        f = self.fig("gen-pipe", "limits", "bulkload-gen | cat > /dev/null", n,
                     note="the pipe's limit (for stdin loads)")

        def pipe(i):
            p = run_sampled(["sh", "-c", f"{shlex.quote(gen)} {n} | cat > /dev/null"])
            return {"seconds": p.wall_s}
        self.repeat(f, pipe)

        for fid, title, fsync in (("gen-file", "bulkload-gen -> file (page cache)", False),
                                  ("gen-file-fsync", "bulkload-gen -> file + fsync (disk limit)", True)):
            f = self.fig(fid, "limits", title, n,
                         note="file on the filesystem of the datasets" + (", fsync'd: the disk's "
                                                                          "limit for this job" if fsync else ""))

            def tofile(i, fsync=fsync):
                rm(path)
                sync()
                with open(path, "wb") as o:
                    t = time.perf_counter()
                    run_gen(gen, n, o, fsync=fsync)
                    s = time.perf_counter() - t
                if path.stat().st_size != n * RECORD_SIZE:
                    raise RuntimeError(f"{path} has {path.stat().st_size} bytes, expected {n * RECORD_SIZE}")
                return {"seconds": s}
            self.repeat(f, tofile)

        f = self.fig("gen-shm", "limits", "bulkload-gen -> /dev/shm (tmpfs)", n,
                     note="single-process write to RAM (SciDB: 1.3 GB/s)")

        def toshm(i):
            rm(shm)
            with open(shm, "wb") as o:
                t = time.perf_counter()
                run_gen(gen, n, o)
                return {"seconds": time.perf_counter() - t}
        self.repeat(f, toshm, teardown=lambda: rm(shm))

        f = self.fig("gen-parallel-shm", "limits", f"{self.cores} x bulkload-gen -> /dev/shm (all cores)",
                     n, note="SciDB multi_reference.sh (10.6 GB/s on 32 cores)")
        self.repeat(f, lambda i: {"seconds": self._parallel_gen(n, "/dev/shm")})

        f = self.fig("c-fill", "limits", "C generator in-process into numpy (1 core)", min(n, 10_000_000),
                     note="the produce stage's limit")
        self.repeat(f, lambda i: self._child_sample("cfill", n=min(n, 10_000_000)))

        f = self.fig("npsave-fsync", "limits", "np.save + fsync of the same bytes", n,
                     note="ArcticDB's hardware-limit method")
        npy = self.work / "limit.npy"
        self.repeat(f, lambda i: self._child_sample("npsave", path=str(npy), n=n),
                    setup=lambda i: (rm(npy), sync()))
        f = self.fig("npload", "limits", "np.load (warm page cache)", n, note="ArcticDB's read limit")
        self.repeat(f, lambda i: self._child_sample("npload", path=str(npy)))
        f = self.fig("cold-read", "limits", "read of a file evicted with posix_fadvise(DONTNEED)", n,
                     note="the disk's cold read limit")
        self.repeat(f, lambda i: self._child_sample("coldread", path=str(npy)))
        rm(npy)
        rm(path)

    def _parallel_gen(self, n: int, dirname: str | None) -> float:
        k = self.cores
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
                o = open(fp, "wb")
            else:
                o = open(os.devnull, "wb")
            procs.append((subprocess.Popen([self.gen, str(cnt), str(w * per)], stdout=o), o))
        for p, o in procs:
            p.wait()
            o.close()
            if p.returncode:
                raise RuntimeError(f"bulkload-gen exited with {p.returncode}")
        s = time.perf_counter() - t
        for fp in files:
            rm(fp)
        return s

    def _child_sample(self, kind: str, **args) -> dict:
        res, p = run_child(kind, **args)
        res.setdefault("wall_s", p.wall_s)
        res["peak_tree_rss_bytes"] = p.peak_tree_rss_bytes
        res["peak_tree_anon_bytes"] = p.peak_tree_anon_bytes
        return res

    # --- section: bulkload load -------------------------------------------------------------
    def load_configs(self) -> list[dict]:
        c = self.cores
        cfgs = [
            dict(id="load-lmdb-capnp-w1", title="load lmdb capnp, 1 worker", scheme="lmdb", workers=1,
                 limit="gen-file-fsync", note="SciDB single-process flat load: 37 MB/s"),
            dict(id=f"load-lmdb-capnp-w{c}", title=f"load lmdb capnp, {c} workers (headline)",
                 scheme="lmdb", workers=c, limit="gen-file-fsync",
                 note="SciDB 32-core parallel flat load: 491 MB/s"),
            dict(id="load-lmdb-arrow-none", title="load lmdb arrow (no compression)", scheme="lmdb",
                 workers=c, format="arrow", compression="none", limit="gen-file-fsync"),
            dict(id="load-lmdb-arrow-lz4", title="load lmdb arrow lz4", scheme="lmdb", workers=c,
                 format="arrow", compression="lz4", limit="gen-file-fsync"),
            dict(id="load-lmdb-arrow-zstd", title="load lmdb arrow zstd", scheme="lmdb", workers=c,
                 format="arrow", compression="zstd", limit="gen-file-fsync"),
            dict(id="load-rocksdb-capnp", title="load rocksdb capnp", scheme="rocksdb", workers=c,
                 limit="gen-file-fsync"),
            dict(id="load-mem-capnp", title="load mem:// capnp (LMDB on /dev/shm)", scheme="mem",
                 workers=c, limit="gen-shm"),
            dict(id="load-stdin-capnp", title="bulkload-gen | load - (stdin pipe), lmdb capnp",
                 scheme="lmdb", workers=c, stdin=True, limit="gen-file-fsync",
                 note="durable, so bounded by the disk limit; the pipe's own limit is gen-pipe"),
        ]
        return cfgs

    def _dataset(self, scheme: str, name: str) -> str:
        if scheme == "mem":
            mname = f"bench-{os.getpid()}-{name}"
            if mname not in self.mem_names:
                self.mem_names.append(mname)
            return f"mem://{mname}"
        return f"{scheme}://{self.work / name}"

    def _ds_root(self, uri: str) -> Path:
        scheme, rest = uri.split("://", 1)
        rest = rest.split("?", 1)[0]
        return Path("/dev/shm/bulkload") / rest if scheme == "mem" else Path(rest)

    def load_once(self, n: int, uri: str, *, workers: int, shards: int | None = None,
                  format: str = "capnp", compression: str = "none", stdin: bool = False) -> dict:
        """One `bulkload load` run in a fresh process tree; returns a sample."""
        rm(self._ds_root(uri))
        sync()
        args = [uri, "--json", "--quiet", "--workers", str(workers), "--shards", str(shards or self.cores),
                "--format", format, "--compression", compression]
        if stdin:
            cmd = ["sh", "-c", f"{shlex.quote(self.gen)} {n} | " + " ".join(
                shlex.quote(a) for a in [self.bulkload, "load", "-", *args])]
        else:
            cmd = [self.bulkload, "load", f"gen://{LAYOUT}?n={n}", *args]
        p = run_sampled(cmd)
        if p.rc != 0:
            raise RuntimeError(_tail(p.err) or f"bulkload load exited with {p.rc}")
        rep = json.loads(p.out)
        if rep["records"] != n:
            raise RuntimeError(f"loaded {rep['records']} records, expected {n}")
        return {"seconds": rep["seconds"], "wall_s": p.wall_s,
                "peak_tree_rss_bytes": p.peak_tree_rss_bytes, "peak_tree_anon_bytes": p.peak_tree_anon_bytes,
                "report_peak_rss_bytes": rep.get("peak_rss_bytes"), "stages": rep.get("stages"),
                "stored_bytes": rep.get("stored_bytes"), "workers": rep.get("workers")}

    def section_load(self) -> None:
        n = self.p["n"]
        for cfg in self.load_configs():
            f = self.fig(cfg["id"], "load", cfg["title"], n, limit=cfg["limit"], note=cfg.get("note", ""),
                         workers=cfg["workers"],
                         params={k: cfg.get(k) for k in ("scheme", "format", "compression", "stdin")
                                 if cfg.get(k) is not None} | {"shards": self.cores})
            uri = self._dataset(cfg["scheme"], cfg["id"])
            self.repeat(f, lambda i, cfg=cfg, uri=uri: self.load_once(
                n, uri, workers=cfg["workers"], format=cfg.get("format", "capnp"),
                compression=cfg.get("compression", "none"), stdin=cfg.get("stdin", False)),
                teardown=lambda uri=uri: rm(self._ds_root(uri)))

    # --- section: scaling curve ---------------------------------------------------------------
    def section_scaling(self) -> None:
        n = self.p["n"]
        for w in range(1, self.cores + 1):
            fid = f"load-lmdb-capnp-w{w}"
            if fid in self.figures and self.figures[fid].reason != "not selected":
                continue  # measured (or tried) by the load section
            f = self.fig(fid, "load", f"load lmdb capnp, {w} workers", n, limit="gen-file-fsync",
                         workers=w, params={"scheme": "lmdb", "shards": self.cores})
            uri = self._dataset("lmdb", fid)
            self.repeat(f, lambda i, w=w, uri=uri: self.load_once(n, uri, workers=w),
                        teardown=lambda uri=uri: rm(self._ds_root(uri)))

    # --- section: finalize and box query -------------------------------------------------------
    def box(self, n: int, width: int = 1000) -> dict:
        """i0=0:10, i1=n/4:n/4+width: ``width`` cells (i1 is the record index, one i0 per i1)."""
        lo = n // 4
        return {"i0": [0, 10], "i1": [lo, lo + width]}

    def section_finalize(self) -> None:
        n = self.p["n"]
        ws = list(range(1, self.cores + 1))
        figs = {w: self.fig(f"finalize-w{w}", "finalize", f"finalize --dims {DIMS}, {w} worker"
                            + ("s" if w > 1 else ""), n, limit="gen-file-fsync", workers=w,
                            note="redimension (+ compaction) of the flat load into the 2-D array, "
                                 "durable; SciDB 32-core redimension load: 128 MB/s",
                            params={"dims": DIMS, "duplicates": "error"}) for w in ws}
        q100 = self.fig("query-box", "query", "box query, issue 4's box (i1 width 100), warm, from Python", n,
                        kind="latency", params={"box": self.box(n, 100)},
                        note="Dataset.read_box(i0=(0, 10), i1=(n/4, n/4+100)): the box of issue 4 "
                             "(i0=0:10,i1=5000000:5000100 at n=20M), 100 cells with this generator; "
                             f"sample = median of {self.p['query_reps']} queries in one process")
        q = self.fig("query-box-1000", "query", "box query ~1,000 cells (i1 width 1000), warm, from Python", n,
                     kind="latency", params={"box": self.box(n)},
                     note="Dataset.read_box(i0=(0, 10), i1=(n/4, n/4+1000)): 1,000 cells; "
                          f"sample = median of {self.p['query_reps']} queries in one process")
        queries = [(q100, self.box(n, 100)), (q, self.box(n))]
        try:
            res, _ = run_child("probe_finalize")
        except Exception as e:
            res = {"ok": False, "error": str(e)}
        if not res.get("ok"):
            reason = f"loader.arrays.finalize.finalize not importable ({res.get('error')})"
            for f in [*figs.values(), q100, q]:
                self.skip(f, reason)
            return
        base = self.work / "flat"
        base_uri = f"lmdb://{base}"
        try:
            self.load_once(n, base_uri, workers=self.cores)
        except Exception as e:
            for f in [*figs.values(), q100, q]:
                self.skip(f, f"could not load the input dataset: {e}")
            return
        copy = self.work / "fin"
        for w, f in figs.items():
            def setup(i):
                rm(copy)
                shutil.copytree(base, copy)
                sync()
            self.repeat(f, lambda i, w=w: self._child_sample(
                "finalize", uri=f"lmdb://{copy}", dims=DIMS, workers=w), setup=setup)
        # the box queries, on the last finalized copy (or a fresh one)
        if any(f is not None for f, _ in queries):
            if not copy.exists() or any(f is None or f.status != "ok" for f in figs.values()):
                rm(copy)
                shutil.copytree(base, copy)
                try:
                    run_child("finalize", uri=f"lmdb://{copy}", dims=DIMS, workers=self.cores)
                except Exception as e:
                    for f, _ in queries:
                        self.skip(f, f"finalize failed: {e}")
            for f, box in queries:
                self.repeat(f, lambda i, box=box: self._child_sample(
                    "query", uri=f"lmdb://{copy}", box=box, reps=self.p["query_reps"]))
        rm(copy)
        rm(base)

    # --- section: peers -------------------------------------------------------------------------
    def section_peers(self) -> None:
        nn, nb, nt, na = self.p["n_naive"], self.p["n_builder"], self.p["n_tiledb"], self.p["n_arctic"]
        d = self.work / "peer"
        naive = "records pre-generated in memory, generation not timed; one write transaction, synced"
        for fid, kind, title, recs, note in (
            ("peer-lmdb-per-record", "lmdb_per_record", "py-lmdb put loop, one key per record", nn, naive),
            ("peer-lmdb-blob", "lmdb_blob", "py-lmdb, one key per 10,000-record blob", nn, naive),
            ("peer-rocksdict-writebatch", "rocksdict_wb", "rocksdict WriteBatch (key per record) per 10,000",
             nn, "records pre-generated; raw_mode, flushed at the end"),
            ("peer-pycapnp-builder", "capnp_builder", "pycapnp builder, field by field", nb,
             "rows pre-converted to Python tuples; build + to_bytes, no store"),
        ):
            f = self.fig(fid, "peers", title, recs, limit="gen-file-fsync", note=note, workers=1)
            self.repeat(f, lambda i, kind=kind, recs=recs: self._child_sample(kind, path=str(d), n=recs),
                        setup=lambda i: (rm(d), sync()), teardown=lambda: rm(d))
        # optional peers
        have = {m: _installed(m) for m in PEER_PACKAGES}
        fw = self.fig("peer-arcticdb-write", "peers", "ArcticDB write(DataFrame) to lmdb://", na,
                      limit="gen-file-fsync", note="DataFrame built beforehand, not timed")
        fr = self.fig("peer-arcticdb-read", "peers", "ArcticDB read -> DataFrame from lmdb://", na,
                      limit="npload")
        if not (have["arcticdb"] and have["pandas"]):
            self.skip(fw, "skipped: not installed (pip install 'bulkload[peers]')")
            self.skip(fr, "skipped: not installed (pip install 'bulkload[peers]')")
        elif fw is not None:
            samples: list[dict] = []
            self.repeat(fw, lambda i: _pop_into(samples, self._child_sample("arcticdb", path=str(d), n=na)),
                        setup=lambda i: (rm(d), sync()), teardown=lambda: rm(d))
            if fr is not None:
                fr.samples = [{"seconds": s["read_s"], "peak_tree_rss_bytes": s["peak_tree_rss_bytes"]}
                              for s in samples]
                if fw.status != "ok":
                    fr.status, fr.reason = fw.status, fw.reason
                self._report(fr)
        tw = self.fig("peer-tiledb-write", "peers", "TileDB sparse 2-D write (i0, i1)", nt,
                      limit="gen-file-fsync", note="dims i0 (tile 10), i1 (tile 100000), other fields "
                                                   "as attributes; arrays built beforehand")
        tq = self.fig("peer-tiledb-box", "query", "TileDB box read ~1,000 cells, warm", nt, kind="latency",
                      note=f"same box shape on the TileDB array of {nt:,} records",
                      params={"box": self.box(nt)})
        if not have["tiledb"]:
            self.skip(tw, "skipped: not installed (pip install 'bulkload[peers]')")
            self.skip(tq, "skipped: not installed (pip install 'bulkload[peers]')")
        elif tw is not None:
            samples = []
            self.repeat(tw, lambda i: _pop_into(samples, self._child_sample(
                "tiledb", path=str(d), n=nt, box=self.box(nt), reps=self.p["query_reps"])),
                setup=lambda i: (rm(d), sync()), teardown=lambda: rm(d))
            if tq is not None:
                tq.samples = [{"seconds": s["box_s"], "peak_tree_rss_bytes": s["peak_tree_rss_bytes"]}
                              for s in samples]
                if tw.status != "ok":
                    tq.status, tq.reason = tw.status, tw.reason
                self._report(tq)

    # --- section: memory flat in N ----------------------------------------------------------------
    def section_rss(self) -> None:
        if not self.p.get("rss_n"):
            return
        for n in self.p["rss_n"]:
            f = self.fig(f"rss-load-n{n}", "rss", f"load lmdb capnp, {self.cores} workers, n={n:,}", n,
                         kind="throughput", limit="gen-file-fsync", workers=self.cores,
                         note="peak RSS of the whole job (all processes)")
            uri = self._dataset("lmdb", f"rss{n}")
            self.repeat(f, lambda i, n=n, uri=uri: self.load_once(n, uri, workers=self.cores),
                        teardown=lambda uri=uri: rm(self._ds_root(uri)))

    # --- targets ----------------------------------------------------------------------------------
    def targets(self) -> list[dict]:
        F, c = self.figures, self.cores
        head = F.get(f"load-lmdb-capnp-w{c}")
        out = []

        def ratio(tid, what, num, den, target, *, den_value=None, unit="x", higher=True):
            a = _mb_s(num) if isinstance(num, Figure) or num is None else num
            b = den_value if den_value is not None else (_mb_s(den) if isinstance(den, Figure) or den is None else den)
            if a is None or b is None or b == 0:
                missing = [x.id for x in (num, den) if isinstance(x, Figure) and x.status != "ok"]
                out.append({"id": tid, "what": what, "target": target, "ratio": None, "pass": None,
                            "status": "not measured" + (f" ({', '.join(missing)})" if missing else "")})
                return
            r = a / b if higher else b / a
            out.append({"id": tid, "what": what, "value": round(a, 3), "reference": round(b, 3),
                        "ratio": round(r, 3), "target": target, "pass": r >= target,
                        "status": "pass" if r >= target else "short"})

        ratio("load-vs-disk", "load (lmdb capnp, all workers, durable) / disk limit (gen -> file + fsync)",
              head, F.get("gen-file-fsync"), 0.5)
        ratio("load-vs-arcticdb", "load / ArcticDB write of the same records", head,
              F.get("peer-arcticdb-write"), 1.0)
        ratio("load-vs-naive-lmdb", "Python in-process load / naive py-lmdb per-record loop (MB/s)", head,
              F.get("peer-lmdb-per-record"), 10.0)
        ratio("load-2w-vs-1w", f"load speed-up, {c} workers vs 1", head, F.get("load-lmdb-capnp-w1"), 1.6)
        ratio("arrow-vs-disk", "load arrow (none) / disk limit", F.get("load-lmdb-arrow-none"),
              F.get("gen-file-fsync"), 0.35)
        ratio("rocksdb-vs-disk", "load rocksdb capnp / disk limit", F.get("load-rocksdb-capnp"),
              F.get("gen-file-fsync"), 0.35)
        ratio("mem-vs-lmdb", "load mem:// / load lmdb://", F.get("load-mem-capnp"), head, 1.0)
        fin = F.get(f"finalize-w{c}")
        ratio("finalize-400", f"finalize ({c} workers) / 400 MB/s", fin, None, 1.0, den_value=400.0)
        ratio("finalize-2w-vs-1w", f"finalize speed-up, {c} workers vs 1", fin, F.get("finalize-w1"), 1.6)
        q = F.get("query-box-1000")
        if q is not None and q.status == "ok" and q.secs():
            ms = statistics.median(q.secs()) * 1e3
            out.append({"id": "query-2ms", "what": "box query ~1,000 cells, warm: 2 ms / median latency",
                        "value": round(ms, 4), "reference": 2.0, "ratio": round(2.0 / ms, 3), "target": 1.0,
                        "pass": ms <= 2.0, "status": "pass" if ms <= 2.0 else "short"})
        else:
            out.append({"id": "query-2ms", "what": "box query ~1,000 cells <= 2 ms", "target": 1.0,
                        "ratio": None, "pass": None, "status": "not measured"})
        rss = [F.get(f"rss-load-n{n}") for n in (self.p.get("rss_n") or ())]
        if len(rss) == 2 and all(x is not None and x.status == "ok" for x in rss):
            small, big = (max(s["peak_tree_anon_bytes"] for s in x.samples) for x in rss)
            big_rss = max(s["peak_tree_rss_bytes"] for s in rss[1].samples)
            out.append({"id": "rss-1gib", "what": f"peak RSS (private, all processes) of the n={rss[1].records:,} "
                        "load / 1 GiB", "value": big, "reference": 1 << 30,
                        "ratio": round((1 << 30) / big, 3), "target": 1.0, "pass": big <= (1 << 30),
                        "status": "pass" if big <= (1 << 30) else "short",
                        "note": f"VmRSS incl. file-backed pages: {big_rss / 2**20:,.0f} MiB"})
            out.append({"id": "rss-flat", "what": f"peak private RSS n={rss[1].records:,} / n={rss[0].records:,} "
                        "(memory flat in N: <= 1.25)", "value": big, "reference": small,
                        "ratio": round(big / small, 3), "target": 1.25, "pass": big / small <= 1.25,
                        "status": "pass" if big / small <= 1.25 else "short"})
        return out


def _pop_into(lst: list, sample: dict) -> dict:
    """Child results that feed two figures: keep the sample, return the first one's."""
    lst.append(sample)
    s = dict(sample)
    s["seconds"] = s.pop("write_s")
    return s


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# ============================================================================================
# child benchmark processes
# ============================================================================================


def _records(n: int):
    import numpy as np

    from ..model.layouts import get_layout
    from ..sources.generators import generate

    arr = np.empty(n, dtype=get_layout(LAYOUT).dtype)
    generate(LAYOUT, 0, n, impl="c", out=arr)
    return arr


def child_cfill(n: int) -> dict:
    import numpy as np

    from ..model.layouts import get_layout
    from ..sources.generators import generate

    arr = np.empty(n, dtype=get_layout(LAYOUT).dtype)
    arr.fill(0)  # fault the pages in: measure generation, not page faults
    t = time.perf_counter()
    generate(LAYOUT, 0, n, impl="c", out=arr)
    return {"seconds": time.perf_counter() - t}


def child_npsave(path: str, n: int) -> dict:
    import numpy as np

    arr = _records(n)
    t = time.perf_counter()
    with open(path, "wb") as f:
        np.save(f, arr)
        f.flush()
        os.fsync(f.fileno())
    return {"seconds": time.perf_counter() - t}


def child_npload(path: str) -> dict:
    import numpy as np

    t = time.perf_counter()
    a = np.load(path)
    s = time.perf_counter() - t
    del a
    return {"seconds": s}


def child_coldread(path: str) -> dict:
    import numpy as np

    size = os.path.getsize(path)
    buf = np.empty(size, dtype=np.uint8)
    buf.fill(0)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        mv = memoryview(buf)
        t = time.perf_counter()
        got = 0
        while got < size:
            k = os.readv(fd, [mv[got:got + (64 << 20)]])
            if k == 0:
                break
            got += k
        s = time.perf_counter() - t
    finally:
        os.close(fd)
    return {"seconds": s, "bytes_read": got}


def child_lmdb_per_record(path: str, n: int) -> dict:
    import lmdb

    raw = _records(n).tobytes()
    os.makedirs(path, exist_ok=True)
    env = lmdb.open(path, map_size=n * 300 + (64 << 20))
    t = time.perf_counter()
    with env.begin(write=True) as txn:
        for i in range(n):
            txn.put(i.to_bytes(8, "big"), raw[i * 96:(i + 1) * 96])
    env.sync(True)
    s = time.perf_counter() - t
    env.close()
    return {"seconds": s}


def child_lmdb_blob(path: str, n: int, b: int = 10_000) -> dict:
    import lmdb

    raw = _records(n).tobytes()
    os.makedirs(path, exist_ok=True)
    env = lmdb.open(path, map_size=n * 200 + (64 << 20))
    t = time.perf_counter()
    with env.begin(write=True) as txn:
        for k, lo in enumerate(range(0, n, b)):
            txn.put(k.to_bytes(8, "big"), raw[lo * 96:min(n, lo + b) * 96], append=True)
    env.sync(True)
    s = time.perf_counter() - t
    env.close()
    return {"seconds": s}


def child_rocksdict_wb(path: str, n: int, b: int = 10_000) -> dict:
    from rocksdict import Options, Rdict, WriteBatch

    raw = _records(n).tobytes()
    db = Rdict(path, Options(raw_mode=True))
    t = time.perf_counter()
    for lo in range(0, n, b):
        wb = WriteBatch(raw_mode=True)
        for i in range(lo, min(n, lo + b)):
            wb.put(i.to_bytes(8, "big"), raw[i * 96:(i + 1) * 96])
        db.write(wb)
    db.flush()
    s = time.perf_counter() - t
    db.close()
    return {"seconds": s}


def child_capnp_builder(path: str, n: int) -> dict:
    from ..model.layouts import get_layout

    lay = get_layout(LAYOUT)
    mod = lay.capnp_module()
    rows = _records(n).tolist()
    names = list(lay.dtype.names)
    t = time.perf_counter()
    msg = mod.Batch.new_message()
    msg.start = 0
    lst = msg.init("records", n)
    for i, row in enumerate(rows):
        r = lst[i]
        for name, v in zip(names, row):
            setattr(r, name, v)
    data = msg.to_bytes()
    s = time.perf_counter() - t
    return {"seconds": s, "message_bytes": len(data)}


def child_arcticdb(path: str, n: int) -> dict:
    import pandas as pd
    from arcticdb import Arctic

    df = pd.DataFrame(_records(n))
    os.makedirs(path, exist_ok=True)
    ac = Arctic(f"lmdb://{path}?map_size={max(1024, n * 96 * 3 // 2**20)}MB")
    lib = ac.get_library("bench", create_if_missing=True)
    t = time.perf_counter()
    lib.write("records", df)
    w = time.perf_counter() - t
    del df
    t = time.perf_counter()
    back = lib.read("records").data
    r = time.perf_counter() - t
    if len(back) != n:
        raise RuntimeError(f"ArcticDB read back {len(back)} rows, expected {n}")
    return {"write_s": w, "read_s": r}


def child_tiledb(path: str, n: int, box: dict, reps: int = 50) -> dict:
    import numpy as np
    import tiledb

    arr = _records(n)
    names = list(arr.dtype.names)
    attrs_names = [x for x in names if x not in ("i0", "i1")]
    cols = {x: np.ascontiguousarray(arr[x]) for x in attrs_names}
    i0, i1 = np.ascontiguousarray(arr["i0"]), np.ascontiguousarray(arr["i1"])
    hi = int(i1.max())
    dom = tiledb.Domain(
        tiledb.Dim(name="i0", domain=(0, 9), tile=10, dtype=np.int32),
        tiledb.Dim(name="i1", domain=(0, max(hi, 1)), tile=min(100_000, max(hi, 1)), dtype=np.int32))
    schema = tiledb.ArraySchema(domain=dom, sparse=True,
                                attrs=[tiledb.Attr(name=x, dtype=arr.dtype[x]) for x in attrs_names])
    tiledb.Array.create(path, schema)
    t = time.perf_counter()
    with tiledb.open(path, "w") as A:
        A[i0, i1] = cols
    w = time.perf_counter() - t
    (a0, b0), (a1, b1) = box["i0"], box["i1"]
    lat = []
    with tiledb.open(path, "r") as A:
        res = A[a0:b0, a1:b1]  # warm-up
        for _ in range(reps):
            t = time.perf_counter()
            res = A[a0:b0, a1:b1]
            lat.append(time.perf_counter() - t)
    return {"write_s": w, "box_s": statistics.median(lat), "box_cells": int(len(res["d0"])),
            "box_latencies_s": lat}


def child_probe_finalize() -> dict:
    try:
        from ..arrays.finalize import finalize  # noqa: F401

        return {"ok": True}
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def child_finalize(uri: str, dims: str, workers: int, array: str = "grid") -> dict:
    from ..arrays.finalize import finalize

    t = time.perf_counter()
    rep = finalize(uri, dims=dims, array=array, duplicates="error", workers=workers, progress="none")
    s = time.perf_counter() - t
    out = {"seconds": s}
    d = rep.to_dict() if hasattr(rep, "to_dict") else (rep if isinstance(rep, dict) else {})
    for k in ("seconds", "mb_per_s", "chunks", "cells", "peak_rss_bytes", "stages", "compact"):
        if k in d:
            out[f"report_{k}"] = d[k]
    if "peak_rss_bytes" in d:
        out["report_peak_rss_bytes"] = d["peak_rss_bytes"]
    return out


def child_query(uri: str, box: dict, reps: int = 200, array: str = "grid") -> dict:
    from ..read.dataset import open as open_ds

    ranges = {k: tuple(v) for k, v in box.items()}
    with open_ds(uri) as ds:
        tab = ds.read_box(array=array, **ranges)  # warm-up: opens the shards and the index
        for _ in range(3):
            ds.read_box(array=array, **ranges)
        lat = []
        for _ in range(reps):
            t = time.perf_counter()
            tab = ds.read_box(array=array, **ranges)
            lat.append(time.perf_counter() - t)
    return {"seconds": statistics.median(lat), "cells": tab.num_rows, "latencies_s": lat,
            "p95_s": sorted(lat)[int(0.95 * (len(lat) - 1))]}


CHILDREN = {
    "cfill": child_cfill, "npsave": child_npsave, "npload": child_npload, "coldread": child_coldread,
    "lmdb_per_record": child_lmdb_per_record, "lmdb_blob": child_lmdb_blob,
    "rocksdict_wb": child_rocksdict_wb, "capnp_builder": child_capnp_builder,
    "arcticdb": child_arcticdb, "tiledb": child_tiledb, "probe_finalize": child_probe_finalize,
    "finalize": child_finalize, "query": child_query,
}


def _child_main(argv: list[str]) -> int:
    kind, args = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    res = CHILDREN[kind](**args)
    print(json.dumps(res))
    return 0


# ============================================================================================
# outputs: JSON, Markdown, plots
# ============================================================================================


def _fmt_mb(st: dict | None) -> tuple[str, str]:
    if not st:
        return "", ""
    return f"{st['median']:,.0f}", f"{st['min']:,.0f} – {st['max']:,.0f}"


def _cell(text) -> str:
    return str(text).replace("|", "\\|")


def _fmt_bytes(b: float | None) -> str:
    return "" if not b else f"{b / 2**20:,.0f} MiB"


GROUP_TITLES = {"limits": "Reference limits", "load": "bulkload load", "finalize": "bulkload finalize",
                "query": "Box queries (latency)", "peers": "Peers on the same records",
                "rss": "Memory flat in N"}


def markdown(result: dict, plots: list[str] | None = None) -> str:
    m, p = result["machine"], result["parameters"]
    fs = m["filesystem"]
    lines = [
        f"# bulkload bench — suite `{result['suite']}`",
        "",
        f"- started {result['started']}, took {result['duration_s']:.0f} s; "
        f"git {(result['git'].get('commit') or '?')[:12]}{' (dirty)' if result['git'].get('dirty') else ''}; "
        f"bulkload {result['versions'].get('bulkload')}",
        f"- machine: {m['cpu_model']}, {m['cores']} cores, {m['memory_bytes'] / 2**30:.0f} GiB RAM, "
        f"Linux {m['kernel']}; datasets on {fs.get('type')} ({fs.get('device')}); "
        f"load average at start {', '.join(f'{x:.2f}' for x in m['loadavg_at_start'])}"
        + (f", at end {', '.join(f'{x:.2f}' for x in m['loadavg_at_end'])}" if m.get("loadavg_at_end") else ""),
        f"- n = {p['n']:,} `{p['layout']}` records ({p['n'] * p['record_size'] / 1e9:.2f} GB) unless noted; "
        f"{p['repeats']} repeats; MB = 10^6 bytes of records; median and min – max of the repeats; "
        "ratio = median MB/s / median MB/s of the matching limit measured in this run",
        "",
        "## Targets",
        "",
        "| target | value | reference | ratio | needed | status |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for t in result["targets"]:
        if t.get("ratio") is None:
            lines.append(f"| {_cell(t['what'])} | | | | ≥ {t['target']} | {t['status']} |")
            continue
        needed = f"≤ {t['target']}" if t["id"] == "rss-flat" else f"≥ {t['target']}"
        val, ref = t.get("value"), t.get("reference")
        if t["id"].startswith("rss"):
            val, ref = _fmt_bytes(val), _fmt_bytes(ref)
        elif t["id"] == "query-2ms":
            val, ref = f"{val:.3f} ms", f"{ref} ms"
        else:
            val, ref = f"{val:,.0f} MB/s", f"{ref:,.0f} MB/s"
        mark = "✅ pass" if t["pass"] else "❌ short"
        lines.append(f"| {_cell(t['what'])} | {val} | {ref} | {t['ratio']:.2f} | {needed} | {mark} |")
    figs = result["figures"]
    for group, title in GROUP_TITLES.items():
        rows = [f for f in figs.values() if f["group"] == group]
        if not rows:
            continue
        lines += ["", f"## {title}", ""]
        if group == "query":
            lines += ["| figure | records | latency ms (median) | min – max | cells | peak RSS (tree) | note |",
                      "|---|---:|---:|---:|---:|---:|---|"]
            for f in rows:
                if f["status"] != "ok":
                    lines.append(f"| {_cell(f['title'])} | {f['records']:,} | | | | | {f['status']}: {_cell(f['reason'])} |")
                    continue
                st = f["latency_ms"]
                cells = (f["samples"][0].get("cells") or f["samples"][0].get("box_cells", "")) if f["samples"] else ""
                rss = f["peak_tree_rss_bytes"]
                lines.append(f"| {_cell(f['title'])} | {f['records']:,} | {st['median']:.3f} | {st['min']:.3f} – "
                             f"{st['max']:.3f} | {cells} | {_fmt_bytes(rss and rss['max'])} | {_cell(f['note'])} |")
            continue
        lines += ["| figure | records | MB/s (median) | min – max | M records/s | limit | ratio | "
                  "peak RSS tree (private) | note |",
                  "|---|---:|---:|---:|---:|---|---:|---:|---|"]
        for f in rows:
            if f["status"] != "ok":
                lines.append(f"| {_cell(f['title'])} | {f['records']:,} | | | | | | | {f['status']}: {_cell(f['reason'])} |")
                continue
            med, rng = _fmt_mb(f.get("mb_s"))
            rs = f.get("records_s")
            r = f.get("ratio_to_limit")
            rss, anon = f.get("peak_tree_rss_bytes"), f.get("peak_tree_anon_bytes")
            mem = ""
            if rss:
                mem = _fmt_bytes(rss["max"]) + (f" ({_fmt_bytes(anon['max'])})" if anon else "")
            lines.append(
                f"| {_cell(f['title'])} | {f['records']:,} | {med} | {rng} | "
                f"{rs['median'] / 1e6:,.2f} | {f['limit'] or ''} | {'' if not r else format(r['median'], '.2f')} | "
                f"{mem} | {_cell(f['note'])} |")
    skipped = [s for s in result["skipped"] if s["reason"] != "not selected"]
    if skipped:
        lines += ["", "## Skipped or failed", ""]
        lines += [f"- `{s['id']}`: {s['status']} — {s['reason']}" for s in skipped]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{Path(x).stem}]({Path(x).name})" for x in plots]
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items() if v), ""]
    return "\n".join(lines)


def plots(result: dict, out: Path, prefix: str = "") -> list[str]:
    """throughput.png, scaling.png, rss.png (each named PREFIX + name) in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    figs = result["figures"]
    colors = {"limits": "#888888", "load": "#1f77b4", "finalize": "#2ca02c", "peers": "#d62728",
              "rss": "#9467bd"}
    rows = [f for f in figs.values() if f["status"] == "ok" and f.get("mb_s") and f["group"] != "rss"]
    # --- throughput bars ------------------------------------------------------------------------
    fig, ax = plt.subplots(figsize=(11, 0.32 * max(len(rows), 4) + 1.6))
    ys = list(range(len(rows)))[::-1]
    for y, f in zip(ys, rows):
        st = f["mb_s"]
        ax.barh(y, st["median"], color=colors.get(f["group"], "#333333"), alpha=0.85,
                xerr=[[st["median"] - st["min"]], [st["max"] - st["median"]]], capsize=3,
                error_kw={"elinewidth": 1})
        ax.text(st["max"] * 1.05, y, f"{st['median']:,.0f}", va="center", fontsize=7)
    ax.set_yticks(ys)
    ax.set_yticklabels([f["title"] + ("" if f["records"] == result["parameters"]["n"] else
                                      f" [n={f['records']:,}]") for f in rows], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("MB/s (log; bars: median, whiskers: min–max)")
    for lid, style in (("gen-file-fsync", "--"), ("gen-shm", ":"), ("gen-pipe", "-.")):
        lf = figs.get(lid)
        if lf and lf["status"] == "ok" and lf.get("mb_s"):
            ax.axvline(lf["mb_s"]["median"], color="black", linestyle=style, linewidth=0.8,
                       label=f"{lf['title']}: {lf['mb_s']['median']:,.0f}")
            if lid == "gen-file-fsync":
                ax.axvline(0.5 * lf["mb_s"]["median"], color="red", linestyle="--", linewidth=0.8,
                           label="target: 0.5 × disk limit")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"bulkload bench ({result['suite']}): {result['parameters']['n']:,} scidb96 records, "
                 f"{result['machine']['cores']} cores", fontsize=9)
    fig.tight_layout()
    p = out / f"{prefix}throughput.png"
    _save_figure(fig, p)
    plt.close(fig)
    made.append(str(p))
    # --- scaling curve ------------------------------------------------------------------------------
    fig, ax = plt.subplots(figsize=(6, 4))
    for series, label, color in (("load-lmdb-capnp-w", "load (lmdb, capnp)", "#1f77b4"),
                                 ("finalize-w", "finalize", "#2ca02c")):
        pts = []
        for f in figs.values():
            if f["id"].startswith(series) and f["id"][len(series):].isdigit() and f["status"] == "ok" \
                    and f.get("mb_s"):
                pts.append((int(f["id"][len(series):]), f["mb_s"]))
        if not pts:
            continue
        pts.sort()
        xs = [w for w, _ in pts]
        med = [s["median"] for _, s in pts]
        ax.errorbar(xs, med, yerr=[[m - s["min"] for m, (_, s) in zip(med, pts)],
                                   [s["max"] - m for m, (_, s) in zip(med, pts)]],
                    marker="o", capsize=3, label=label, color=color)
        ax.plot(xs, [med[0] * w / xs[0] for w in xs], linestyle=":", color=color, label=f"{label}: linear")
    lf = figs.get("gen-file-fsync")
    if lf and lf["status"] == "ok" and lf.get("mb_s"):
        ax.axhline(lf["mb_s"]["median"], color="black", linestyle="--", linewidth=0.8, label="disk limit")
    ax.set_xlabel("workers")
    ax.set_ylabel("MB/s")
    ax.set_xticks(range(1, (result["machine"]["cores"] or 1) + 1))
    ax.set_ylim(bottom=0)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.set_title("scaling over workers (median, min–max)", fontsize=9)
    fig.tight_layout()
    p = out / f"{prefix}scaling.png"
    _save_figure(fig, p)
    plt.close(fig)
    made.append(str(p))
    # --- peak RSS ---------------------------------------------------------------------------------
    mem = [f for f in figs.values() if f["status"] == "ok" and f.get("peak_tree_rss_bytes")
           and f["group"] in ("load", "finalize", "peers", "rss")]
    fig, ax = plt.subplots(figsize=(10, 0.3 * max(len(mem), 4) + 1.4))
    ys = list(range(len(mem)))[::-1]
    ax.barh(ys, [f["peak_tree_rss_bytes"]["max"] / 2**20 for f in mem], color="#bbbbbb",
            label="VmRSS (incl. file-backed / shared pages)")
    ax.barh(ys, [(f.get("peak_tree_anon_bytes") or {}).get("max", 0) / 2**20 for f in mem], color="#9467bd",
            height=0.5, label="private (RSS − shared)")
    ax.set_yticks(ys)
    ax.set_yticklabels([f["title"] + ("" if f["records"] == result["parameters"]["n"] else
                                      f" [n={f['records']:,}]") for f in mem], fontsize=7)
    ax.axvline(1024, color="red", linestyle="--", linewidth=0.8, label="1 GiB")
    ax.set_xlabel("peak RSS of the whole process tree, MiB (max over repeats)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    p = out / f"{prefix}rss.png"
    _save_figure(fig, p)
    plt.close(fig)
    made.append(str(p))
    return made


def _save_figure(fig, path: Path) -> None:
    with open_output(str(path)) as o:
        fig.savefig(o.file, format="png", dpi=110, bbox_inches="tight")


def write_outputs(result: dict, out: str | Path, name: str = "bench") -> dict:
    """Write NAME.json, NAME.md and the plots into ``out``; returns their paths."""
    out = Path(output_dir(str(out)))
    try:
        made = plots(result, out, "" if name == "bench" else f"{name}-")
    except ImportError as e:
        made = []
        result.setdefault("warnings", []).append(f"no plots: matplotlib not installed ({e})")
    result["plots"] = [Path(p).name for p in made]
    jp, mp = out / f"{name}.json", out / f"{name}.md"
    write_output(str(jp), json.dumps(result, indent=1, default=str) + "\n")
    write_output(str(mp), markdown(result, made))
    return {"json": str(jp), "markdown": str(mp), "plots": made}




def run(suite: str = "quick", *, n: int | None = None, repeats: int | None = None,
        out: str | Path = "bench-results", log: Callable[[str], None] | None = None,
        name: str = "bench", **kw) -> dict:
    """Run a suite and write its outputs (NAME.json, NAME.md, plots) into ``out``; returns the
    result, with the paths written under ``outputs``."""
    b = Bench(suite, n=n, repeats=repeats, out=out, log=log, **kw)
    result = b.run()
    result["outputs"] = write_outputs(result, out, name)
    return result


def validate(result: dict) -> list[str]:
    """Problems with a result's shape (the schema test uses this)."""
    bad = []
    for k in ("schema", "schema_version", "suite", "machine", "versions", "git", "parameters", "figures",
              "targets", "skipped"):
        if k not in result:
            bad.append(f"missing {k}")
    if result.get("schema") != SCHEMA or result.get("schema_version") != SCHEMA_VERSION:
        bad.append("wrong schema")
    for k in ("cpu_model", "cores", "memory_bytes", "kernel", "filesystem"):
        if k not in result.get("machine", {}):
            bad.append(f"machine.{k} missing")
    for fid, f in result.get("figures", {}).items():
        for k in ("id", "group", "title", "status", "records", "samples", "seconds", "limit", "ratio_to_limit"):
            if k not in f:
                bad.append(f"figure {fid}: {k} missing")
        if f.get("status") == "ok":
            if f["kind"] == "throughput" and not f.get("mb_s"):
                bad.append(f"figure {fid}: no mb_s")
            if not f["samples"]:
                bad.append(f"figure {fid}: no samples")
        elif not f.get("reason"):
            bad.append(f"figure {fid}: {f.get('status')} without a reason")
    return bad


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        sys.exit(_child_main(sys.argv[2:]))
    sys.exit("usage: bulkload bench (this module's __main__ only runs child benchmark processes)")
