"""Small loads run in-process (loading/execute.py, infra/executors.InProcessExecutor; a
compressed one of fixed-size records: ThreadExecutor, its tasks at once).

- A load of at most `in_process_limit(compression)` bytes (256 MiB uncompressed, 1 GiB
  compressed) whose worker count the caller did not give starts no worker process: its report says ``in_process``, every receipt comes from the
  coordinator's pid; a bigger load, or one given ``--workers``, uses the pool.
- Same result: the in-process load stores the same batch rows and records as the pool.
- Same guarantees: SIGKILL at scripted points (coordinator's and workers' fault points,
  which in-process kill the one process), then the same command, ends byte-identical to
  an uninterrupted load; SIGTERM / SIGINT stop it with exit 128 + N, one line, the run
  ``interrupted``, and the same command resumes it.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import manifest_json, run_cli, tool

import loader
from loader.errors import BulkloadError
from loader.infra import executors
from loader.loading.execute import executor_for, in_process_limit
from loader.loading.job import RunSettings
from loader.model.layouts import get_layout
from loader.sources.generators import generate
from loader.stores.spec import parse_dataset_uri

LAY = get_layout("scidb96")
FAST = {"BULKLOAD_CHECKPOINT_SECONDS": "0"}


def snapshot(uri):
    """(batch rows, every record), once verify passed."""
    with loader.open(uri) as ds:
        assert ds.verify().ok
        rows = [(b.seq, b.shard, b.first, b.count, b.checksum, b.nbytes) for b in ds.manifest.batches]
        return rows, ds.read_records().tobytes()


def load_json(*args, env=None):
    p = run_cli("load", *args, "--json", env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("fmt", ["capnp", "arrow"])
def test_small_load_runs_in_process_and_stores_what_the_pool_stores(store_uri, tmp_path, fmt):
    src = "gen://scidb96?n=2345&start=17"
    rep = loader.load(src, store_uri, shards=3, batch_records=200, format=fmt).to_dict()
    assert rep["in_process"] is True and rep["records"] == 2345 and rep["workers"] >= 1
    pooled = f"lmdb://{tmp_path}/pooled"
    rep = loader.load(src, pooled, shards=3, batch_records=200, format=fmt, workers=2).to_dict()
    assert rep["in_process"] is False
    assert snapshot(store_uri) == snapshot(pooled)
    with loader.open(store_uri) as ds:
        assert ds.read_records().tobytes() == generate(LAY, 17, 2345).tobytes()


@pytest.mark.parametrize("compression, limit", [("none", 256 << 20), ("lz4", 1 << 30), ("zstd", 1 << 30)])
def test_the_limit_is_bytes_of_records_by_compression(tmp_path, compression, limit):
    """Just at the limit: in-process; one byte over it, workers given, or a caller's engine: not."""
    assert in_process_limit(compression) == limit
    spec = parse_dataset_uri(f"lmdb://{tmp_path}/ds")
    settings = RunSettings(
        layout=LAY,
        format="capnp",
        compression=compression,
        shards=2,
        workers=2,
        batch_records=1000,
        workers_given=False,
    )
    small = executors.InProcessExecutor if compression == "none" else executors.ThreadExecutor
    assert type(executor_for(spec, settings, limit)) is small
    assert type(executor_for(spec, settings, limit + 1)) is executors.LocalExecutor
    given = RunSettings(
        layout=LAY, format="capnp", compression=compression, shards=2, workers=2, batch_records=1000, workers_given=True
    )
    assert type(executor_for(spec, given, 1)) is executors.LocalExecutor


def test_threads_of_one_process_produce_their_batches_themselves(tmp_path, monkeypatch):
    """The workers of an in-process threaded run share one process: each produces its
    batches in its own thread (no produce thread: it would add a hand-off a batch and no
    parallelism), whatever their size; tasks run in turn (uncompressed) keep a produce
    thread, which their writes overlap. Both store the generator's records (compressed:
    each thread fills one reused buffer, batch after batch)."""
    from loader.loading import worker

    made = []

    class Counted(worker._Producer):
        def __init__(self, *args, **kwargs):
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(worker, "_Producer", Counted)
    n = 100_000  # 46,829-record batches of 41 bytes (1.92 MB, over INLINE_BATCH_BYTES): 3 in all
    for compression, threads in (("lz4", True), ("none", False)):
        made.clear()
        uri = f"lmdb://{tmp_path}/{compression}"
        rep = loader.load(f"gen://ticks?n={n}", uri, shards=2, compression=compression)
        assert rep.in_process and rep.workers == 2
        assert made == ([] if threads else [1, 1]), compression
        with loader.open(uri) as ds:
            assert ds.read_records().tobytes() == generate("ticks", 0, n).tobytes()


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_small_load_runs_its_tasks_at_once_in_threads(tmp_path, compression):
    """Compressed records are CPU-bound (shuffle and codec, which release the GIL): the tasks
    of a small run go to one thread each, not one after another; uncompressed ones (disk-bound)
    and documents (Python per block) run in turn."""
    spec = parse_dataset_uri(f"lmdb://{tmp_path}/ds")
    settings = RunSettings(
        layout=get_layout("ticks"), format="capnp", compression=compression, shards=2, workers=2, batch_records=1000
    )
    assert type(executor_for(spec, settings, 1)) is executors.ThreadExecutor
    plain = RunSettings(layout=LAY, format="capnp", compression="none", shards=2, workers=2, batch_records=1000)
    assert type(executor_for(spec, plain, 1)) is executors.InProcessExecutor


def test_documents_keep_the_16_mib_limit(tmp_path):
    from loader.model.layouts import get_layout as layout_of

    spec = parse_dataset_uri(f"lmdb://{tmp_path}/docs")
    docs = RunSettings(
        layout=layout_of("docs"), format="block", compression="zstd", shards=2, workers=2, batch_records=1000
    )
    assert in_process_limit("zstd", keyed=True) == 16 << 20
    assert type(executor_for(spec, docs, 16 << 20)) is executors.InProcessExecutor
    assert type(executor_for(spec, docs, (16 << 20) + 1)) is executors.LocalExecutor


@pytest.mark.parametrize("scheme", ["lmdb"])  # every store runs in-process: the test above
def test_the_cli_reports_in_process_for_small_loads_only(tmp_path, scheme):
    """Records over the uncompressed limit, compressed (the default): in-process; --workers
    given: the pool (the limits themselves: the test above)."""
    over = (256 << 20) // LAY.record_size + 1
    rep = load_json(f"gen://scidb96?n={over}", f"{scheme}://{tmp_path}/over", "--batch-records", 50000)
    assert rep["in_process"] is True and rep["records"] == over and rep["compression"] == "lz4"
    rep = load_json("gen://scidb96?n=100", f"{scheme}://{tmp_path}/given", "--workers", 1)
    assert rep["in_process"] is False
    # appending to a dataset, and a file source: the same rule
    rep = load_json("gen://scidb96?n=100&start=5", f"{scheme}://{tmp_path}/given")
    assert rep["in_process"] is True and rep["status"] == "loaded"
    f = tmp_path / "r.bin"
    f.write_bytes(generate(LAY, 0, 700).tobytes())
    rep = load_json(str(f), f"{scheme}://{tmp_path}/file", "--shards", 2)
    assert rep["in_process"] is True and snapshot(f"{scheme}://{tmp_path}/file")[1] == f.read_bytes()


def run_killed(args, fault):
    env = dict(os.environ, BULKLOAD_FAULT=fault, **FAST)
    p = subprocess.run([tool("bulkload"), *map(str, args)], capture_output=True, text=True, env=env, timeout=120)
    return p.returncode, p.stderr


#: workers' points (the second worker's too: tasks run in turn) and the coordinator's
KILLS = {
    "lmdb": ["batch:2", "w0.flush:2", "w1.sync:1", "checkpoint:2", "saved:4"],
    "rocksdb": ["flush:3", "w1.batch:2", "save:3", "commit:1"],
}


@pytest.mark.parametrize("scheme", sorted(KILLS))
def test_killed_in_process_load_resumes_byte_identical(tmp_path, scheme):
    args = ["gen://scidb96?n=3000&start=9", None, "--shards", 3, "--batch-records", 250, "-q"]
    ref = f"{scheme}://{tmp_path}/ref"
    assert run_cli("load", *[ref if a is None else a for a in args]).returncode == 0
    want = snapshot(ref)
    for i, fault in enumerate(KILLS[scheme]):
        uri = f"{scheme}://{tmp_path}/ds{i}"
        cmd = ["load", *[uri if a is None else a for a in args]]
        code, err = run_killed(cmd, fault)
        assert code == -signal.SIGKILL, (fault, code, err)  # in-process: the point kills the one process
        if os.path.exists(tmp_path / f"ds{i}" / "manifest.json"):
            rows, data = snapshot(uri)
            assert len(rows) in (0, len(want[0])) and (rows, data) == (want[0][: len(rows)], want[1][: len(data)])
        p = run_cli(*cmd, "--json", env=FAST)
        assert p.returncode == 0, (fault, p.stderr)
        rep = json.loads(p.stdout[p.stdout.index("{") :])
        assert rep["in_process"] is True or rep["status"] == "already-loaded", (fault, rep)
        assert snapshot(uri) == want, fault


#: a built-in generator's load that takes ~1.5 s in-process (uncompressed, a checkpoint per
#: batch); a user generator cannot stand in: its runs never run in-process (user_gen.py)
SLOW_N = 1_500_000


def poll_until(cond, seconds: float) -> bool:
    """Poll ``cond`` every millisecond until it holds (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.001)
    return False


def _checkpointed(manifest) -> bool:
    """Does the dataset's last run hold durable (checkpointed: pending) batches?"""
    try:
        m = manifest_json(manifest.parent)
    except (OSError, ValueError, BulkloadError):
        return False
    return bool(m["runs"]) and m["runs"][-1]["status"] == "running" and bool(m["runs"][-1].get("pending"))


@pytest.mark.parametrize(
    "signame, compression, batch",
    [
        ("TERM", "none", 20000),
        ("INT", "none", 20000),
        ("TERM", "lz4", 2000),
        ("INT", "lz4", 2000),
        ("TERM", "lz4", 4000),
        ("INT", "lz4", 4000),
    ],
)
def test_stop_signal_stops_an_in_process_load_and_the_same_command_resumes(tmp_path, signame, compression, batch):
    """Uncompressed: the tasks in turn; lz4: a thread each (smaller batches: a checkpoint
    per batch keeps the load under way long enough), which produces its batches itself -
    384 KB ones too (over INLINE_BATCH_BYTES: a produce thread of its own elsewhere)."""
    env = dict(os.environ, **FAST)
    uri = f"lmdb://{tmp_path}/ds"
    cmd = [
        tool("bulkload"),
        "load",
        f"gen://scidb96?n={SLOW_N}",
        uri,
        "--shards",
        "2",
        "--batch-records",
        str(batch),
        "--compression",
        compression,
        "-q",
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    # the moment: the run has checkpointed batches (so it is under way, not finished); the
    # process is stopped there so that the signal lands mid-load however fast the machine
    assert poll_until(lambda: _checkpointed(tmp_path / "ds" / "manifest.json"), 60), "no checkpoint"
    # read before the stop: a process stopped while it holds LMDB's reader-table lock would
    # block this read until SIGCONT (seen once: the test hung for minutes)
    state = manifest_json(tmp_path / "ds")["runs"][-1]["status"]
    p.send_signal(signal.SIGSTOP)
    alive = p.poll() is None
    p.send_signal(getattr(signal, f"SIG{signame}"))
    p.send_signal(signal.SIGCONT)
    assert state == "running" and alive, "the load ended before it could be stopped; raise SLOW_N"
    _, err = p.communicate(timeout=60)
    signo = getattr(signal, f"SIG{signame}")
    assert p.returncode == 128 + signo, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bulkload: error: interrupted by SIG{signame}"), err
    with loader.open(uri) as ds:
        runs = ds.info()["runs"]
        assert runs[-1]["status"] == "interrupted" and ds.manifest.records == 0
    done = subprocess.run([*cmd[:-1], "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    rep = json.loads(done.stdout)
    assert rep["status"] == "resumed" and rep["in_process"] is True and rep["records"] == SLOW_N
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.read_records().tobytes() == generate(LAY, 0, SLOW_N).tobytes()


def test_small_load_from_python_leaves_signal_handlers_alone(tmp_path):
    """In-process tasks do not ignore the stop signals of their host (proc.start_worker).
    The host sets its own handlers first: a shell's background job inherits SIGINT ignored,
    and Python then installs no handler of its own."""
    code = (
        "import signal, loader; on_term = lambda *a: None; signal.signal(signal.SIGTERM, on_term); "
        "signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"r = loader.load('gen://scidb96?n=500', 'lmdb://{tmp_path}/ds'); "
        "assert r.in_process, r; assert signal.getsignal(signal.SIGTERM) is on_term, 'SIGTERM'; "
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, 'SIGINT'; print('ok')"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_a_reader_held_by_the_caller_sends_the_load_to_the_pool(store_uri):
    """An LMDB shard has one environment per process: with the caller's reader open, a small
    load runs in worker processes (as before); once it is closed, in-process again. RocksDB
    readers do not clash with a writer: in-process either way."""
    loader.load("gen://scidb96?n=300", store_uri, batch_records=100)
    with loader.open(store_uri) as ds:
        first = ds.read_records().tobytes()
        rep = loader.load("gen://scidb96?n=300&start=300", store_uri)
        assert rep.in_process is store_uri.startswith("rocksdb")
        assert ds.read_records().tobytes() == first  # the reader's snapshot
    rep = loader.load("gen://scidb96?n=300&start=600", store_uri)
    assert rep.in_process is True
    with loader.open(store_uri) as ds:
        assert ds.verify().ok and ds.read_records().tobytes() == generate(LAY, 0, 900).tobytes()
