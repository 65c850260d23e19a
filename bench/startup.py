"""Start-up benchmark: the wall time of short `bulkload` commands, whole processes.

    .venv/bin/python bench/startup.py [--repeats R] [--n N] [--dir DIR] [--json]
                                      [--bulkload CMD ...]

Commands measured (wall time of the whole process, interpreter start included; median
and min-max of R runs, interleaved so a noisy neighbour slows every command alike; and the
median CPU time, user + system, which a busy machine disturbs less):

  help    bulkload --help
  info    bulkload info lmdb://DIR/info          (a dataset of N records loaded once)
  load    bulkload load -q gen://scidb96?n=N lmdb://DIR/load-K   (a new dataset each run)

Targets (issue 14, target 5): load of 1,000 records <= 0.25 s, info <= 0.15 s,
--help <= 0.15 s. ``--bulkload`` may be given more than once (e.g. the command of another
checkout, ``"env PYTHONPATH=OTHER python -c 'from loader.cli.main import main; main()'"``):
every command runs under each, interleaved, for a before/after comparison in one run.
A warm-up round of every command comes first (not counted); the commands run with
bytecode writing allowed, in the work directory (``python -c`` puts the cwd first on
sys.path).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS_S = {"help": 0.15, "info": 0.15, "load": 0.25}
DEFAULT_BULKLOAD = str(Path(sys.executable).with_name("bulkload"))
#: the commands' environment: bytecode is written (an installed package has it; with
#: PYTHONDONTWRITEBYTECODE=1 an editable checkout would compile every module on every run)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def command_args(name: str, work: Path, n: int, run: int) -> list[str]:
    if name == "help":
        return ["--help"]
    if name == "info":
        return ["info", f"lmdb://{work / 'info'}"]
    return ["load", "-q", f"gen://scidb96?n={n}", f"lmdb://{work / f'load-{run}'}"]


def wall(argv: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds from start to exit of ``argv``, its CPU seconds: user + system of the
    process and the children it waited for); a failed command stops the benchmark."""
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, env=ENV)
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"startup: {shlex.join(argv)} failed ({done.returncode}): {done.stderr.decode().strip()}")
    return seconds, (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)


def measure(bulkloads: list[str], repeats: int, n: int, work: Path) -> dict:
    """{bulkload: {command: [seconds per run]}}, every (command, bulkload) pair interleaved."""
    prefixes = {
        b: [os.path.abspath(w) if i == 0 and os.path.exists(w) else w for i, w in enumerate(shlex.split(b))]
        for b in bulkloads
    }  # the commands run in ``work``: a relative program path is made absolute
    wall(prefixes[bulkloads[0]] + ["load", "-q", f"gen://scidb96?n={n}", f"lmdb://{work / 'info'}"], work)
    samples = {b: {name: [] for name in TARGETS_S} for b in bulkloads}
    for b in bulkloads:  # a warm-up round, not counted: bytecode written, files in the page cache
        for name in TARGETS_S:
            wall(prefixes[b] + command_args(name, work, n, -1), work)
    for old in work.glob("load-*"):
        shutil.rmtree(old)
    for run in range(repeats):
        for name in TARGETS_S:
            for i, b in enumerate(bulkloads):
                argv = prefixes[b] + command_args(name, work, n, run * len(bulkloads) + i)
                samples[b][name].append(wall(argv, work))  # in ``work``: ``python -c`` puts the cwd first
        for old in work.glob("load-*"):
            shutil.rmtree(old)
    return samples


def summary(samples: dict) -> list[dict]:
    rows = []
    for b, by_name in samples.items():
        for name, runs in by_name.items():
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            median = statistics.median(walls)
            rows.append(
                {
                    "bulkload": b,
                    "command": name,
                    "median_s": median,
                    "min_s": min(walls),
                    "max_s": max(walls),
                    "cpu_median_s": statistics.median(cpus),
                    "target_s": TARGETS_S[name],
                    "pass": median <= TARGETS_S[name],
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--n", type=int, default=1000, help="records of the load and of info's dataset")
    ap.add_argument("--dir", default=None, help="directory for the datasets (default: a temporary one)")
    ap.add_argument("--bulkload", action="append", help=f"command prefix (default {DEFAULT_BULKLOAD})")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    bulkloads = a.bulkload or [DEFAULT_BULKLOAD]
    with tempfile.TemporaryDirectory(prefix="bulkload-startup-", dir=a.dir) as tmp:
        rows = summary(measure(bulkloads, a.repeats, a.n, Path(tmp)))
    if a.json:
        print(json.dumps({"repeats": a.repeats, "n": a.n, "rows": rows}, indent=1))
        return
    print(f"start-up, wall of the whole command, median (min-max) of {a.repeats} interleaved runs")
    for r in rows:
        label = r["bulkload"] if len(bulkloads) > 1 else ""
        print(
            f"  {r['command']:<5} {r['median_s']:6.3f} s ({r['min_s']:.3f}-{r['max_s']:.3f}), cpu "
            f"{r['cpu_median_s']:.3f} s  target <= {r['target_s']:.2f} s  {'pass' if r['pass'] else 'SHORT'}  {label}"
        )


if __name__ == "__main__":
    main()
