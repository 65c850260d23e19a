"""A user generator that ends its process (issue 28 item 9): ``sys.exit``, ``os._exit``, a
segfault, ``abort()`` or a BaseException subclass, in Python or C, in the plan-time probe
call or in the run, in-process by default or with ``--workers 2``: exit 1, one line
naming the generator and the record range, no traceback, the dataset at its last commit."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers import tool

import loader

from .test_user_generators import compile_c, records_of

DYING_PY = """
import ctypes, os, sys
from loader.sources.generators import generate

FROM = int(os.environ["DIE_FROM"])


class Custom(BaseException):
    pass


def _die(how):
    if how == "sys_exit":
        sys.exit(3)
    if how == "os_exit":
        os._exit(3)
    if how == "segfault":
        ctypes.string_at(0)
    if how == "abort":
        os.abort()
    raise Custom("stop here")


def _dying(how):
    def gen(start, n):
        if start + n > FROM:
            _die(how)
        return generate("scidb96", start, n, impl="python")
    return gen


sys_exit, os_exit, segfault, abort, base_exception = map(_dying, ["sys_exit", "os_exit", "segfault", "abort",
                                                                  "base_exception"])
"""

DYING_C = """
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int dies(uint64_t start, uint64_t n) { return start + n > 1000; }
int die_exit(void *buf, uint64_t start, uint64_t n) {
    if (dies(start, n)) _exit(3);
    memset(buf, 0, n * 96);
    return 0;
}
int die_segfault(void *buf, uint64_t start, uint64_t n) {
    volatile uintptr_t zero = 0;
    if (dies(start, n)) *(volatile int *)zero = 1;
    memset(buf, 0, n * 96);
    return 0;
}
int die_abort(void *buf, uint64_t start, uint64_t n) {
    if (dies(start, n)) abort();
    memset(buf, 0, n * 96);
    return 0;
}
"""

PY_WAYS = ["sys_exit", "os_exit", "segfault", "abort", "base_exception"]
WORKERS = {"in-process": [], "workers-2": ["--workers", "2"]}


def load_dying(tmp_path: Path, source: str, workers: list, die_from: int) -> subprocess.CompletedProcess:
    """Load ``source`` (3,000 records in batches of 1,000) onto a dataset of 500 committed records."""
    ds = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=500", ds, shards=1)
    before = records_of(ds)
    p = subprocess.run(
        [tool("bulkload"), "load", source, ds, "--batch-records", "1000", "-q", *workers],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "DIE_FROM": str(die_from)},
    )
    assert records_of(ds) == before  # the dataset stays at its last commit
    return p


def assert_one_line_naming(p: subprocess.CompletedProcess, name: str, records: str) -> None:
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert name in lines[0] and re.search(records, lines[0]), lines[0]
    assert "nothing from this run was committed" in lines[0]


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("phase", ["probe", "run"])
@pytest.mark.parametrize("how", PY_WAYS)
def test_python_generator_that_ends_its_process_is_one_line_exit_1(tmp_path, how, phase, workers):
    (tmp_path / "dying.py").write_text(DYING_PY)
    die_from = 0 if phase == "probe" else 1000  # the probe asks for record 0 only
    p = load_dying(tmp_path, f"gen://dying:{how}?n=3000&layout=scidb96", WORKERS[workers], die_from)
    records = r"for records \[0, 1\)" if phase == "probe" else r"for records \[[12]000, [23]000\)"
    assert_one_line_naming(p, f"gen://dying:{how}?n=3000", records)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("how", ["exit", "segfault", "abort"])
def test_c_generator_that_ends_its_process_is_one_line_exit_1(tmp_path, how, workers):
    (tmp_path / "dying.c").write_text(DYING_C)
    lib = compile_c(tmp_path / "dying.c", tmp_path / "libdying.so")
    p = load_dying(tmp_path, f"gen://c:{lib}:die_{how}?n=3000&layout=scidb96", WORKERS[workers], 1000)
    assert_one_line_naming(p, f"die_{how}?n=3000", r"for records \[[12]000, [23]000\)")
