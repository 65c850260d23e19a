"""The installed `bulkload` command and the tools beside it in the test's virtualenv."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    """The path of an installed command (the virtualenv's first, then PATH's)."""
    p = BIN / name
    return str(p) if p.exists() else (shutil.which(name) or name)


def run_cli(
    *args: object,
    input: str | bytes | None = None,
    check: bool = False,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[Any]:
    """Run the installed `bulkload` command; returns CompletedProcess (text output)."""
    e = dict(os.environ, **(env or {}))
    return subprocess.run(
        [tool("bulkload"), *map(str, args)],
        input=input,
        capture_output=True,
        timeout=timeout,
        check=check,
        env=e,
        text=not isinstance(input, bytes),
    )


#: run by a fresh interpreter: its child's peak RSS. (Measured from pytest itself, the
#: figure would start at pytest's own size: Linux carries a process's peak RSS across
#: fork and exec, and pytest grows to ~1 GB over the suite.)
_MEASURE = """
import json, resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps([p.returncode, p.stdout, p.stderr, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))
"""


def run_measured(args: list[object], timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], int]:
    """(CompletedProcess, peak RSS bytes of the command and its workers: the largest) of
    the real `bulkload` command, started by a small process."""
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, tool("bulkload"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    code, stdout, stderr, maxrss = json.loads(out.stdout)
    return subprocess.CompletedProcess(args, code, stdout, stderr), maxrss * 1024


def compact_peak_rss(uri: str, source: str, batch_records: int, target: int, verified: str) -> int:
    """Peak RSS (bytes; the largest process of the command and its workers) of `bulkload
    compact --target-batch-records TARGET` on a new dataset at ``uri`` loaded from
    ``source`` in batches of ``batch_records``; `bulkload verify` then prints ``verified``."""
    p = run_cli("load", source, uri, "--batch-records", batch_records, "--quiet")
    assert p.returncode == 0, p.stderr
    p, rss = run_measured(["compact", uri, "--target-batch-records", target, "--workers", 2, "--quiet"])
    assert p.returncode == 0, p.stderr
    p = run_cli("verify", uri)
    assert p.returncode == 0 and verified in p.stdout, p.stdout + p.stderr
    return rss
