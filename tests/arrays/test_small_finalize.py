"""A small finalize (arrays/finalize.py: SMALL_FINALIZE_BYTES) runs its phases as threads of
the calling process (executors.ThreadExecutor), even with ``workers`` given:

- its array is the pooled finalize's, byte for byte (cells, chunk pieces, their hashes and
  sizes, bounds), on lmdb://, rocksdb:// and mem://, direct and spill, with duplicates;
- every kill point (coordinator and worker points) kills the whole process, and the
  dataset keeps its committed state; the same command then gives the uninterrupted result;
- a reader of the dataset open in the calling process: LMDB keeps the pool (one
  environment per shard per process: the build's writer would fail next to the reader),
  RocksDB runs in-process; both finalize, and the reader keeps reading its snapshot;
- SIGTERM during a small finalize (which starts no process): exit 143, one line, the arrays
  unchanged, and the same command resumes.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time

import psutil
import pytest
from helpers import manifest_json, run_cli, tool

import loader
from loader.arrays import finalize as fin
from loader.arrays.finalize import finalize
from loader.errors import BulkloadError

N = 20_000
DIMS = "i0:10,i1:1000"  # 20 chunks over 2 shards
CLI_FIN = ["--dims", DIMS, "--workers", 2, "--no-compact", "-q"]


def load_small(uri, n=N, shards=2):
    loader.load(f"gen://scidb96?n={n}", uri, shards=shards, workers=2, batch_records=1000)


def array_state(uri, array="grid"):
    """What must be identical between two builds: the manifest summary (less its run), the
    index rows (per piece: cells, bytes, hash, min/max) and every cell."""
    with loader.open(uri) as ds:
        assert ds.verify().ok
        a = {k: v for k, v in ds.manifest.arrays[array].items() if k not in ("run_id", "created", "table", "index")}
        import pyarrow.ipc as ipc

        with ipc.open_file(os.path.join(ds.spec.root, ds.manifest.arrays[array]["index"])) as f:
            rows = f.read_all().to_pydict()
        return a, rows, ds.read_box(array)


def copy_of(uri, tmp_path, name):
    """A copy of dataset ``uri`` (lmdb:// or rocksdb:// only) under ``tmp_path/name``."""
    scheme, root = uri.split("://", 1)
    shutil.copytree(root, tmp_path / name)
    return f"{scheme}://{tmp_path / name}"


@pytest.mark.parametrize(
    "strategy,dims,duplicates",
    [
        ("direct", DIMS, "error"),
        ("spill", DIMS, "error"),
        ("auto", "i0:4,i2:16", "keep"),  # i2 repeats: many records per cell
    ],
)
def test_small_finalize_builds_the_pooled_array(store_uri, tmp_path, monkeypatch, strategy, dims, duplicates):
    load_small(store_uri)
    small = finalize(store_uri, dims=dims, duplicates=duplicates, workers=2, strategy=strategy, compact=False)
    assert small.in_process and small.workers["build"] == 2
    want_small = array_state(store_uri)
    monkeypatch.setattr(fin, "SMALL_FINALIZE_BYTES", 0)  # the same dataset, through the pool
    pooled = finalize(
        store_uri, dims=dims, duplicates=duplicates, workers=2, strategy=strategy, compact=False, force=True
    )  # the same array, up to date: rebuilt on request
    assert not pooled.in_process
    assert array_state(store_uri) == want_small
    assert (small.strategy, small.windows, small.spill_runs, small.workers) == (
        pooled.strategy,
        pooled.windows,
        pooled.spill_runs,
        pooled.workers,
    )


def test_large_or_tight_finalize_keeps_the_pool(tmp_path, monkeypatch):
    uri = f"lmdb://{tmp_path}/ds"
    load_small(uri)
    monkeypatch.setattr(fin, "SMALL_FINALIZE_BYTES", N * 96 - 1)  # one byte too many: the pool
    assert not finalize(uri, dims=DIMS, workers=2, compact=False).in_process
    monkeypatch.setattr(fin, "SMALL_FINALIZE_BYTES", N * 96)
    assert finalize(uri, dims=DIMS, workers=2, compact=False, force=True).in_process  # up to date: force
    # a budget whose buffers hold less than 3x the records: the pool (its budget bounds each worker)
    assert not finalize(uri, dims=DIMS, workers=2, compact=False, memory_budget=4 * N * 96, force=True).in_process


# --- kill points ------------------------------------------------------------------------------


def run_faulted(args, fault):
    """The CLI with BULKLOAD_FAULT=fault: (exit code, stderr, every process it started)."""
    p = subprocess.Popen(
        [tool("bulkload"), *map(str, args)],
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, BULKLOAD_FAULT=fault),
    )
    _, err = p.communicate(timeout=120)
    return p.returncode, err


@pytest.fixture(scope="module")
def fault_base(tmp_path_factory):
    """Per store: a dataset with an array built (so a kill leaves an old build to keep) and
    the state an uninterrupted rebuild gives, per strategy."""
    out = {}
    for scheme in ("lmdb", "rocksdb"):
        base = tmp_path_factory.mktemp(f"fault-{scheme}")
        uri = f"{scheme}://{base}/ds"
        load_small(uri)
        finalize(uri, dims="i0:10,i1:500", workers=2, compact=False)
        before = array_state(uri)
        refs = {}
        for strategy in ("direct", "spill"):
            ref = copy_of(uri, tmp_path_factory.mktemp(f"ref-{scheme}"), f"ref-{strategy}")
            p = run_cli("finalize", ref, *CLI_FIN, "--strategy", strategy, "--json")
            assert p.returncode == 0, p.stderr
            assert json.loads(p.stdout)["in_process"] is True
            refs[strategy] = array_state(ref)
        out[scheme] = (uri, before, refs)
    return out


FAULTS = [  # (store, strategy, fault): coordinator points, then worker points hit in a task thread
    ("lmdb", "direct", "scanned:1"),
    ("lmdb", "direct", "built:1"),
    ("lmdb", "direct", "indexed:1"),
    ("lmdb", "direct", "switched:1"),
    ("lmdb", "direct", "chunks:1"),
    ("lmdb", "direct", "synced:2"),
    ("lmdb", "spill", "spill:1"),
    ("lmdb", "spill", "spilled:1"),
    ("rocksdb", "direct", "chunks:1"),
    ("rocksdb", "direct", "indexed:1"),
]


@pytest.mark.parametrize("scheme,strategy,fault", FAULTS, ids=[f"{s}-{g}-{f}" for s, g, f in FAULTS])
def test_kill_point_in_a_small_finalize_keeps_the_committed_state(tmp_path, fault_base, scheme, strategy, fault):
    src, before, refs = fault_base[scheme]
    uri = copy_of(src, tmp_path, "ds")
    args = ["finalize", uri, *CLI_FIN, "--strategy", strategy]
    code, err = run_faulted(args, fault)
    assert code == -signal.SIGKILL, (code, err)  # the whole process: its tasks were threads of it
    state = array_state(uri)
    assert state == before or (fault == "switched:1" and state == refs[strategy])
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr
    assert array_state(uri) == refs[strategy]
    root = uri.split("://", 1)[1]
    assert not [f for f in os.listdir(root) if f.startswith(".finalize-")]
    with loader.open(uri) as ds:  # no table of the killed build is left behind
        table = ds.manifest.arrays["grid"]["table"]
        assert all(ds.shard(s).tables() == sorted(["batches", table]) for s in range(2))


# --- a reader open in this process --------------------------------------------------------------


@pytest.mark.parametrize("scheme,in_process", [("lmdb", False), ("rocksdb", True)])
def test_finalize_next_to_a_reader_of_this_process(tmp_path, scheme, in_process):
    uri = f"{scheme}://{tmp_path}/ds"
    load_small(uri)
    finalize(uri, dims="i0:10,i1:500", workers=2, compact=False)
    with loader.open(uri) as ds:
        old = ds.read_box("grid")  # the reader's shards are open now
        rep = finalize(uri, dims=DIMS, workers=2, compact=False)
        assert rep.in_process is in_process and rep.cells == N
        assert ds.read_box("grid").equals(old)  # its snapshot: the build it pinned
        assert len(ds.read_records()) == N
    with loader.open(uri) as ds:
        assert ds.manifest.arrays["grid"]["dims"][1]["chunk"] == 1000 and ds.read_box("grid").num_rows == N


# --- SIGTERM --------------------------------------------------------------------------------------


def running_finalize(root) -> bool:
    try:
        return any(r["kind"] == "finalize" and r["status"] == "running" for r in manifest_json(root)["runs"])
    except (OSError, ValueError, KeyError, BulkloadError):
        return False


def test_sigterm_during_a_small_finalize_keeps_the_arrays(tmp_path, fault_base):
    src, before, refs = fault_base["lmdb"]
    args = [tool("bulkload"), "finalize", None, *map(str, CLI_FIN)]
    for _attempt in range(20):  # stop it while its run is `running` (a fast machine may finish first)
        shutil.rmtree(tmp_path / "ds", ignore_errors=True)
        uri = copy_of(src, tmp_path, "ds")
        args[2] = uri
        p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        running = False
        while p.poll() is None and not (running := running_finalize(tmp_path / "ds")):
            time.sleep(0.001)
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGSTOP)  # hold it inside the run, then stop it there
        # not read again while it is stopped: a process stopped holding LMDB's reader-table
        # lock would block the read until SIGCONT
        stopped_inside = running and p.poll() is None
        if stopped_inside:  # threads only: no forkserver, no worker process
            assert psutil.Process(p.pid).children(recursive=True) == []
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
            os.kill(p.pid, signal.SIGCONT)
        _, err = p.communicate(timeout=60)
        if stopped_inside:
            break
    assert stopped_inside, "never caught the run in progress"
    assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    if "had finished" in err:  # the signal came during the commit, which was written whole
        assert array_state(uri) == refs["direct"]
        return
    assert lines[0].endswith("interrupted by SIGTERM; the arrays are unchanged; re-run the same command to finalize"), (
        err
    )
    assert array_state(uri) == before
    with loader.open(uri) as ds:
        assert ds.manifest.runs[-1].status == "interrupted"
    assert not [f for f in os.listdir(tmp_path / "ds") if f.startswith(".finalize-")]
    p = run_cli(*args[1:])
    assert p.returncode == 0, p.stderr
    assert array_state(uri) == refs["direct"]
