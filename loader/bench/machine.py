"""What a benchmark result says about where it ran: the machine (CPU, cores, memory, kernel,
the file systems of the datasets and of /dev/shm, the load average), the versions of
bulkload and every library it measures, and the git commit of the code.

The C library of an optional peer (libtiledb) is probed by `peers.native_versions`.

Invariants: only the parent process (the suite) imports this module, never a child
benchmark process; every probe that can fail on an unusual machine gives ``None`` or leaves
its key out rather than raising.

Crash behaviour: reads only (/proc, statvfs, package metadata, ``git``); writes nothing.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import lmdb
import psutil

#: packages whose versions go into the JSON
LIBRARIES = (
    "bulkload",
    "numpy",
    "pyarrow",
    "lmdb",
    "rocksdict",
    "pycapnp",
    "psutil",
    "xxhash",
    "zstandard",
    "typer",
    "rich",
    "matplotlib",
    "arcticdb",
    "tiledb",
    "pandas",
)


def filesystem_of(path: str | Path) -> dict:
    """The mount that holds ``path``: type, device, mount point, free bytes."""
    real = os.path.realpath(path)
    best = None
    for part in psutil.disk_partitions(all=True):
        mp = part.mountpoint
        if (real == mp or real.startswith(mp.rstrip("/") + "/") or mp == "/") and (
            best is None or len(mp) > len(best.mountpoint)
        ):
            best = part
    out: dict[str, object] = {"path": real}
    if best is not None:
        out.update(type=best.fstype, device=best.device, mountpoint=best.mountpoint)
    try:
        st = os.statvfs(real)
        out["free_bytes"] = st.f_bavail * st.f_frsize
    except OSError:
        pass
    return out


def cpu_model() -> str:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def machine_info(work_dir: str | Path) -> dict:
    return {
        "cpu_model": cpu_model(),
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
    """Installed versions of `LIBRARIES` (None: not installed) and of the LMDB C library."""
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["liblmdb"] = ".".join(map(str, lmdb.version()))
    return out


def git_info() -> dict:
    repo = Path(__file__).resolve().parent.parent
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
        status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {
        "commit": commit,
        "dirty": bool(status.strip()) if commit else None,
        "changed_files": len(status.splitlines()) if commit else None,
    }
