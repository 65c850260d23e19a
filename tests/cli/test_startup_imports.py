"""Start-up: the quick commands do not import the heavy libraries they do not use.

Asserted on module names (``python -X importtime`` of the real `bulkload` script, or the
modules loaded when it exits), never on times: ``--help`` (and any command's) and ``info``
(text and ``--json``, LMDB, RocksDB and Arrow datasets) import none of numpy, pyarrow,
pycapnp, pandas, rich, pydantic (typer's value converters: loader/cli/params.py); only a
RocksDB dataset's ``info`` imports rocksdict (its shards are checked). A small ``gen://``
load imports no process pool (multiprocessing), no other kind of source and none of the
modules only some loads use. A bad number is still a one-line usage error. Issue 14,
target 5.
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import tool

import loader
from loader.model.layouts import get_layout
from loader.sources.generators import generate

HEAVY = {"numpy", "pyarrow", "capnp", "rocksdict", "pandas", "pydantic", "rich"}


def imported(*args) -> set[str]:
    """Top-level packages of every module the command imported (it must succeed)."""
    p = subprocess.run(
        [sys.executable, "-X", "importtime", tool("bulkload"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, BULKLOAD_DEBUG="0"),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)", p.stderr, re.M)
    assert "loader.cli.main" in names
    return {n.split(".")[0] for n in names}


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        [],
        ["load", "--help"],
        ["info", "--help"],
        ["finalize", "--help"],
        ["query", "--help"],
        ["bench", "--help"],
    ],
)
def test_help_imports_no_heavy_library(args):
    found = imported(*args) if args else imported("--help")
    assert not found & HEAVY, found & HEAVY


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    base = tmp_path_factory.mktemp("startup")
    out = {}
    for scheme in ("lmdb", "rocksdb"):
        uri = f"{scheme}://{base}/{scheme}"
        loader.load("gen://scidb96?n=3000", uri, shards=2, batch_records=1000)
        loader.load("gen://scidb96?n=10&start=3000", uri)
        out[scheme] = uri
    out["arrow"] = f"lmdb://{base}/arrow"
    loader.load("gen://scidb96?n=100", out["arrow"], format="arrow", compression="zstd")
    return out


@pytest.mark.parametrize("which", ["lmdb", "rocksdb", "arrow"])
@pytest.mark.parametrize("json_out", [False, True])
def test_info_imports_no_heavy_library(datasets, which, json_out):
    found = imported("info", datasets[which], *(["--json"] if json_out else []))
    allowed = {"rocksdict"} if which == "rocksdb" else set()
    assert not found & (HEAVY - allowed), found & (HEAVY - allowed)


def test_a_load_still_imports_what_it_uses(datasets, tmp_path):
    """The guard above is not vacuous: a load imports numpy and lmdb, seen the same way."""
    found = imported("load", "gen://scidb96?n=10", f"lmdb://{tmp_path}/ds", "-q")
    assert {"numpy", "lmdb"} <= found


@pytest.mark.parametrize(
    "args,option,value",
    [
        (["load", "gen://scidb96?n=1", "mem://x", "--shards", "abc"], "--shards", "abc"),
        (["load", "gen://scidb96?n=1", "mem://x", "--workers", "2.5"], "--workers", "2.5"),
        (["finalize", "lmdb:///nonexistent", "--dims", "i0:1,i1:1", "--workers", "x"], "--workers", "x"),
    ],
)
def test_a_bad_number_is_one_usage_line(args, option, value):
    p = subprocess.run([tool("bulkload"), *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(
        f"bulkload: error: Invalid value for '{option}': '{value}' is not a valid integer; "
        f"see 'bulkload {args[0]} --help'"
    ), p.stderr


ENV_GEN = """
import os
from loader.model.layouts import get_layout
from loader.sources.generators import generate

def records(start, n):
    with open(os.environ["SEEN_FILE"], "w") as f:
        f.write(os.environ.get("OPENBLAS_NUM_THREADS", "unset"))
    return generate(get_layout("scidb96"), start, n)
"""


@pytest.mark.parametrize("given,seen", [(None, "1"), ("3", "3")])
def test_the_command_starts_numpy_with_one_blas_thread_unless_told(tmp_path, given, seen):
    """bulkload calls no BLAS routine: the command sets OPENBLAS_NUM_THREADS=1 (start-up),
    unless the user set it; a user generator, run by the load, sees the value."""
    (tmp_path / "envgen.py").write_text(ENV_GEN)
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update(
        PYTHONPATH=str(tmp_path), SEEN_FILE=str(tmp_path / "seen"), **({"OPENBLAS_NUM_THREADS": given} if given else {})
    )
    p = subprocess.run(
        [tool("bulkload"), "load", "gen://envgen:records?n=10&layout=scidb96", f"lmdb://{tmp_path}/ds", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "seen").read_text() == seen


#: the modules that a small gen:// load (in-process, capnp, LMDB) has no use for: the pool
#: (multiprocessing), the other kinds of source (files of a type, Python objects, user
#: generators), the other formats' and stores' libraries, the plug-ins, the arrays and
#: readers, and what only some paths of the standard library need (a swap, a schema file)
NOT_IN_SMALL_LOAD = {
    "multiprocessing",
    "loader.infra.procmem",
    "loader.sources.shared",
    "loader.sources.iterables",
    "loader.sources.arrow_files",
    "loader.sources.npy",
    "loader.sources.typed",
    "loader.sources.user_gen",
    "pyarrow",
    "capnp",
    "rocksdict",
    "blosc2",
    "pandas",
    "pydantic",
    "rich",
    "dask",
    "psutil",
    "hypothesis",
    "loader.docs",
    "loader.arrays",
    "loader.read",
    "socket",
    "hashlib",
    "tempfile",
    "ctypes.util",
    "importlib.resources",
    "importlib.metadata",
}

AT_EXIT = (
    "import atexit, runpy, sys\n"
    "out = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(out, 'w').write('\\n'.join(sorted(sys.modules))))\n"
    "sys.argv.pop(0)\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def loaded_at_exit(tmp_path, *args) -> set[str]:
    """Every module loaded when the real `bulkload` script exits (it must succeed); unlike
    importtime, this also sees modules imported by attribute (``from pkg import mod``)."""
    out = tmp_path / "modules.txt"
    p = subprocess.run(
        [sys.executable, "-c", AT_EXIT, str(out), tool("bulkload"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    names = set(out.read_text().split())
    assert "loader.cli.main" in names
    return names


def unwanted(names: set[str]) -> set[str]:
    return {
        n
        for n in names
        if n in NOT_IN_SMALL_LOAD
        or n.split(".")[0] in NOT_IN_SMALL_LOAD
        or any(n.startswith(m + ".") for m in NOT_IN_SMALL_LOAD)
    }


@pytest.mark.parametrize("records", [1000, 7])
def test_a_small_load_imports_only_what_it_uses(tmp_path, records):
    """A new dataset, then an append to it (which reads its manifest)."""
    ds = f"lmdb://{tmp_path}/ds"
    for start in (0, records):
        names = loaded_at_exit(tmp_path, "load", "-q", f"gen://scidb96?n={records}&start={start}", ds)
        assert not unwanted(names), sorted(unwanted(names))
        assert {"numpy", "lmdb", "loader.sources.generated", "loader.serializers.capnp_framing"} <= names
    with loader.open(ds) as d:
        assert (d.read_records() == generate(get_layout("scidb96"), 0, 2 * records)).all()


def test_the_guard_sees_what_other_loads_import(tmp_path):
    """Not vacuous: a .npy file's load imports its reader (the file types register when a file
    is parsed), and a load with --workers starts the pool; both load what they should."""
    path = tmp_path / "recs.npy"
    np.save(path, generate(get_layout("scidb96"), 0, 50))
    names = loaded_at_exit(tmp_path, "load", "-q", path, f"lmdb://{tmp_path}/npy")
    assert {"loader.sources.npy", "loader.sources.typed"} <= unwanted(names)
    names = loaded_at_exit(tmp_path, "load", "-q", "gen://scidb96?n=50", f"lmdb://{tmp_path}/pool", "--workers", "2")
    assert {"multiprocessing", "multiprocessing.connection"} <= unwanted(names)
    for ds in ("npy", "pool"):
        with loader.open(f"lmdb://{tmp_path}/{ds}") as d:
            assert (d.read_records() == generate(get_layout("scidb96"), 0, 50)).all()


#: an atexit handler in the command's process (the user's code never runs there: a user
#: generator runs in a worker, sources/user_gen.py), registered as Python starts
FREEZE_SITE = """
import atexit, gc, os, sys

def _report():
    if os.path.basename(sys.argv[0]) == "bulkload":
        with open(os.environ["FROZEN_FILE"], "w") as f:
            f.write(str(gc.get_freeze_count()))

atexit.register(_report)
"""


def test_the_command_leaves_its_objects_to_the_exit(tmp_path):
    """Start-up's other end: when the command is done, its objects are frozen (gc.freeze), so
    the interpreter's last collections do not walk them; atexit handlers still run, and the
    load is whole."""
    (tmp_path / "sitecustomize.py").write_text(FREEZE_SITE)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), FROZEN_FILE=str(tmp_path / "frozen"))
    p = subprocess.run(
        [tool("bulkload"), "load", "gen://scidb96?n=10", f"lmdb://{tmp_path}/ds", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert int((tmp_path / "frozen").read_text()) > 10_000
    with loader.open(f"lmdb://{tmp_path}/ds") as d:
        assert d.records == 10


@pytest.mark.parametrize(
    "args,built",
    [
        (["load", "gen://scidb96?n=1", "mem://x"], {"load"}),
        (["info", "--help"], {"info"}),
        (["finalize", "lmdb:///x"], {"finalize"}),
        (["--help"], None),
        ([], None),
        (["lod"], None),
        (["--log-format", "json", "info", "x"], None),
        (["runs", "lmdb:///x"], {"runs"}),
    ],
)
def test_the_command_builds_only_the_command_it_runs(args, built):
    """typer builds a command's parameters from its signature before parsing: `bulkload CMD`
    builds CMD's alone; anything else (help, a group option first, a typo) gets every command."""
    from typer.main import get_command

    from loader.cli.main import app, app_for

    every = set(get_command(app).commands)
    assert set(get_command(app_for(args)).commands) == (every if built is None else built)
    assert len(every) > 10
