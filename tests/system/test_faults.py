"""Fault injection: SIGKILL at scripted points, full stores, file size limits.

Every scenario kills the job (or one worker) at a point chosen by a seeded random
generator (reproducible: SEED below), then checks that the dataset opens, verifies, holds
whole committed units only (a prefix of the uninterrupted result), and that re-running
the same command ends byte-identical to an uninterrupted run (batch rows and records).

Kill points are armed with BULKLOAD_FAULT (see loader/faults.py); checkpoints are made
after every batch (BULKLOAD_CHECKPOINT_SECONDS=0) so that kills land between many
durable states. Long randomized runs: `pytest -m soak tests/system/test_faults.py`.
"""

import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
from helpers import manifest_json, run_cli, tool

import loader
from loader.model.layouts import get_layout
from loader.sources.generators import generate

LAY = get_layout("scidb96")
SEED = 20240605
N = 12_000
B = 500
SHARDS = 3
FILES = [("a.bin", 0, 2600), ("b.bin", 2600, 0), ("c.bin", 2600, 3100), ("d.bin", 5700, 900), ("e.bin", 6600, 4000)]
FAST = {"BULKLOAD_CHECKPOINT_SECONDS": "0"}

COORD_POINTS = ["save", "saved", "checkpoint", "commit"]
WORKER_POINTS = ["flush", "sync", "batch", "w0.flush", "w1.sync", "w1.batch"]


def gen_bytes(start, n):
    return generate(LAY, start, n, impl="c").tobytes()


def load_cmd(uri):
    return [
        "load",
        f"gen://scidb96?n={N}&start=5",
        uri,
        "--batch-records",
        B,
        "--shards",
        SHARDS,
        "--workers",
        2,
        "--quiet",
    ]


def ingest_cmd(uri, d):
    return [
        "ingest",
        uri,
        "--from",
        d,
        "--pattern",
        "*.bin",
        "--batch-records",
        B,
        "--shards",
        SHARDS,
        "--workers",
        2,
        "--quiet",
    ]


def make_dir(d):
    os.makedirs(d, exist_ok=True)
    for name, start, n in FILES:
        with open(os.path.join(d, name), "wb") as f:
            f.write(gen_bytes(start, n))
    return str(d)


def snapshot(uri):
    with loader.open(uri) as ds:
        rep = ds.verify()
        assert rep.ok, rep.problems
        rows = [(b.seq, b.shard, b.first, b.count, b.checksum) for b in ds.manifest.batches]
        return rows, ds.read_records().tobytes(), dict(ds.manifest.files)


def wait_gone(procs, timeout=15):
    _gone, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        p.kill()


def run_killed(args, fault, extra_env=None):
    """Run the CLI with a fault armed; returns (returncode, stderr); waits for every
    process of the job (workers included) to be gone."""
    env = dict(os.environ, BULKLOAD_FAULT=fault, **FAST, **(extra_env or {}))
    p = subprocess.Popen(
        [tool("bulkload"), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    kids = []
    try:
        proc = psutil.Process(p.pid)
        while p.poll() is None:
            try:
                kids = list({c.pid: c for c in kids + proc.children(recursive=True)}.values())
            except psutil.NoSuchProcess:
                break
            time.sleep(0.02)
    except psutil.NoSuchProcess:
        pass
    _out, err = p.communicate(timeout=120)
    wait_gone(kids)
    return p.returncode, err


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("ref")
    ref_load = f"lmdb://{base}/load"
    p = run_cli(*load_cmd(ref_load))
    assert p.returncode == 0, p.stderr
    d = make_dir(base / "in")
    ref_ingest = f"lmdb://{base}/ingest"
    p = run_cli(*ingest_cmd(ref_ingest, d))
    assert p.returncode == 0, p.stderr
    return {"load": snapshot(ref_load), "ingest": snapshot(ref_ingest)}


def scenarios(seed=SEED, count=24):
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = ("load", "ingest")[i % 2]
        pts = COORD_POINTS + (["hashed"] if kind == "ingest" else [])
        if i % 3 == 2:
            point = rng.choice(WORKER_POINTS)
            n = rng.randint(1, 9)
        else:
            point = rng.choice(pts)
            n = rng.randint(1, 3) if point in ("commit", "hashed") else rng.randint(1, 14)
        out.append((i, kind, f"{point}:{n}"))
    return out


#: the catalog's commit (written, not committed) and the steps of its first build
CATALOG_SCENARIOS = [
    (100, "load", "catalog-commit:1"),
    (101, "load", "catalog-commit:4"),
    (102, "ingest", "catalog-commit:3"),
    (103, "load", "catalog-built:1"),
    (104, "ingest", "catalog-renamed:1"),
    (105, "load", "pointer:1"),
]


@pytest.mark.parametrize("i,kind,fault", scenarios() + CATALOG_SCENARIOS)
def test_kill_then_rerun_is_byte_identical(tmp_path, reference, i, kind, fault):
    uri = f"lmdb://{tmp_path}/ds"
    d = make_dir(tmp_path / "in") if kind == "ingest" else None
    args = load_cmd(uri) if kind == "load" else ingest_cmd(uri, d)
    code, err = run_killed(args, fault)
    assert code in (0, 1, -signal.SIGKILL), err
    if code == 1:  # a worker was killed: the coordinator reports it in one line
        assert "bulkload: error: worker" in err and "killed by signal 9" in err, err
    want_rows, want_bytes, want_files = reference[kind]
    if os.path.exists(tmp_path / "ds" / "manifest.json"):
        rows, data, files = snapshot(uri)
        # whole committed units only: a prefix of the uninterrupted result
        assert rows == want_rows[: len(rows)]
        assert data == want_bytes[: len(data)]
        if kind == "load":
            assert len(rows) in (0, len(want_rows))
        else:
            assert set(files) <= set(want_files)
            assert sum(f["records"] for f in files.values()) * LAY.record_size == len(data)
    p = run_cli(*args, env=FAST)
    assert p.returncode == 0, p.stderr
    assert snapshot(uri)[:2] == (want_rows, want_bytes)
    if i % 4:
        return
    # and once more: nothing to do
    p = run_cli(*args[:-1], "--json", env=FAST)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["status"] in ("already-loaded", "nothing-to-do")
    assert snapshot(uri)[:2] == (want_rows, want_bytes)


def test_resume_keeps_durable_batches_and_appends_after_existing(tmp_path):
    """A worker killed mid-run: the re-run keeps what was durable and writes the rest."""
    uri = f"lmdb://{tmp_path}/ds"
    assert (
        run_cli("load", "gen://scidb96?n=1000&start=0", uri, "--batch-records", B, "--shards", SHARDS, "-q").returncode
        == 0
    )
    args = ["load", "gen://scidb96?n=9000&start=1000", uri, "--workers", 2, "--quiet"]
    code, err = run_killed(args, "w0.flush:6")
    assert code == 1 and "killed by signal 9" in err
    m = manifest_json(tmp_path / "ds")
    run = m["runs"][-1]
    assert run["status"] == "failed" and run["pending"] and len(m["batches"]) == 2
    p = run_cli(*args[:-1], "--json", env=FAST)
    rep = json.loads(p.stdout)
    assert rep["status"] == "resumed" and rep["resumed_records"] > 0
    assert rep["written_records"] + rep["resumed_records"] == 9000 == rep["records"]
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.read_records().tobytes() == gen_bytes(0, 10000)
        assert [r["status"] for r in ds.info()["runs"]] == ["done", "done"]


def test_replace_killed_before_swap_keeps_old_dataset(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    assert run_cli("load", "gen://scidb96?n=3000", uri, "--batch-records", B, "-q").returncode == 0
    args = ["load", "gen://scidb96?n=4000&start=100", uri, "--replace", "--batch-records", 700, "-q"]
    for fault in ("checkpoint:3", "swap:1"):
        code, _ = run_killed(args, fault)
        assert code == -signal.SIGKILL
        with loader.open(uri) as ds:
            assert ds.verify().ok and ds.read_records().tobytes() == gen_bytes(0, 3000)
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.read_records().tobytes() == gen_bytes(100, 4000)
        assert ds.manifest.batch_records == 700
    assert not os.path.exists(tmp_path / ".ds.replacing")


def test_replace_killed_after_swap_is_complete(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    assert run_cli("load", "gen://scidb96?n=3000", uri, "-q").returncode == 0
    args = ["load", "gen://scidb96?n=2000&start=7", uri, "--replace", "-q"]
    code, _ = run_killed(args, "swapped:1")
    assert code == -signal.SIGKILL
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.read_records().tobytes() == gen_bytes(7, 2000)
    p = run_cli("load", "gen://scidb96?n=10&start=2007", uri, "-q")  # an append discards the leftover
    assert p.returncode == 0, p.stderr
    assert not os.path.exists(tmp_path / ".ds.replacing")
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == gen_bytes(7, 2010)


# --- finalize and compact ------------------------------------------------------------------
#
# The base dataset: 10 loads of 400 records (batches of 400 below the 1000-record batch
# size, so compaction merges them) over 2 shards, and an array "grid" (i0:10,i1:100)
# that finalize rebuilds with other dims (so the old build's table is dropped).

FIN = ["finalize", "{ds}", "--dims", "i0:3,i1:700", "--workers", 2, "--no-compact", "-q"]
FIN_SPILL = [*FIN, "--strategy", "spill", "--memory-budget", "64k"]
FIN_SMALL = [*FIN, "--memory-budget", "64k"]  # 64 KiB chunk groups: several puts per shard
FIN_COMPACT = [a for a in FIN if a != "--no-compact"]
COMPACT = ["compact", "{ds}", "--workers", 2, "-q"]

FC_SCENARIOS = [  # (command, fault): coordinator points, then worker points (wN. = worker N only)
    (FIN, "scanned:1"),
    (FIN_SMALL, "w0.chunks:2"),  # a build worker killed after some chunks were written
    (FIN, "w1.synced:1"),
    (FIN, "built:1"),
    (FIN, "indexed:1"),  # index file written, manifest not switched
    (FIN, "switched:1"),  # switched, old build not yet dropped
    (FIN, "dropping:1"),  # old build dropped from one shard of two
    (FIN_SPILL, "w0.spill:2"),
    (FIN_SPILL, "spilled:1"),
    (FIN_COMPACT, "merged:1"),  # finalize's own compaction, before its switch
    (COMPACT, "w1.merge:1"),
    (COMPACT, "merged:1"),  # merged batches and their rows files written, not switched
    (COMPACT, "merge-switched:1"),
    (COMPACT, "deleting:1"),
    (COMPACT, "compact-copied:1"),  # LMDB compacted copy made, not swapped in
    (COMPACT, "compact-swapped:2"),  # second shard swapped, old copy not yet removed
]
# kept out of `make test` for time (close to a point above); run them with -m soak
FC_SOAK = {"scanned:1", "built:1", "w1.synced:1", "spilled:1", "merge-switched:1"}


def fc_state(uri):
    """(records, batch rows, {array: whole-domain box}) after checking verify passes."""
    with loader.open(uri) as ds:
        rep = ds.verify()
        assert rep.ok, rep.problems
        rows = [(b.first, b.count) for b in ds.manifest.batches]
        return ds.read_records().tobytes(), rows, {a: ds.read_box(a) for a in sorted(ds.manifest.arrays)}


@pytest.fixture(scope="module")
def fc_base(tmp_path_factory):
    from loader.arrays.finalize import finalize

    base = tmp_path_factory.mktemp("fcbase")
    uri = f"lmdb://{base}/ds"
    for i in range(10):
        loader.load(f"gen://scidb96?n=400&start={400 * i}", uri, shards=2, workers=1, batch_records=1000)
    finalize(uri, dims="i0:10,i1:100", workers=2, compact=False)
    before = fc_state(uri)
    assert len(before[1]) == 10 and before[0] == gen_bytes(0, 4000)
    refs = {}
    for cmd in {tuple(c) for c, _ in FC_SCENARIOS}:
        d = tmp_path_factory.mktemp("fcref")
        shutil.copytree(base / "ds", d / "ds")
        p = run_cli(*[str(a).format(ds=f"lmdb://{d}/ds") for a in cmd])
        assert p.returncode == 0, p.stderr
        refs[cmd] = fc_state(f"lmdb://{d}/ds")
    return base, before, refs


@pytest.mark.parametrize(
    "cmd,fault",
    [pytest.param(c, f, id=f"{c[0]}-{f}", marks=[pytest.mark.soak] if f in FC_SOAK else []) for c, f in FC_SCENARIOS],
)
def test_finalize_and_compact_killed_then_rerun_is_byte_identical(tmp_path, request, cmd, fault):
    if fault in FC_SOAK and "soak" not in (request.config.getoption("-m") or ""):
        pytest.skip("soak run: select it with -m soak")
    base, before, refs = request.getfixturevalue("fc_base")
    want = refs[tuple(cmd)]
    shutil.copytree(base / "ds", tmp_path / "ds")
    uri = f"lmdb://{tmp_path}/ds"
    args = [str(a).format(ds=uri) for a in cmd]
    code, err = run_killed(args, fault)
    if fault.startswith("w"):  # a worker was killed: the coordinator reports it in one line
        assert code == 1 and "killed by signal 9" in err, (code, err)
    else:
        assert code == -signal.SIGKILL, (code, err)
    # the dataset opens and verifies (arrays included); it holds the state before or after
    # the command, whole: the same records, all old or all new batches, each array whole
    recs, rows, arrays = fc_state(uri)
    assert recs == before[0] == want[0]
    assert rows in (before[1], want[1])
    assert set(arrays) == {"grid"}
    assert arrays["grid"].equals(before[2]["grid"]) or arrays["grid"].equals(want[2]["grid"])
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr
    recs, rows, arrays = fc_state(uri)
    assert (recs, rows) == want[:2]
    assert arrays.keys() == want[2].keys() and all(arrays[a].equals(want[2][a]) for a in arrays)
    root = tmp_path / "ds"
    leftovers = [p for p in os.listdir(root) if p.startswith((".finalize-", ".compact-rows-"))]
    leftovers += [
        p for p in os.listdir(root / "arrays") if p != os.path.basename(manifest_json(root)["arrays"]["grid"]["index"])
    ]
    assert not leftovers
    assert not [p for p in os.listdir(root) if p.endswith((".compacting", ".replaced"))]
    with loader.open(uri) as ds:  # no table of a crashed or replaced build is left behind
        table = ds.manifest.arrays["grid"]["table"]
        assert all(ds.shard(s).tables() == sorted(["batches", table]) for s in range(2))


# --- full stores -------------------------------------------------------------------------


READER = r"""
import sys, time, loader
uri, want = sys.argv[1], int(sys.argv[2])
seen = set()
deadline = time.time() + 60
while time.time() < deadline:
    try:
        ds = loader.open(uri)
    except Exception:
        time.sleep(0.01); continue
    with ds:
        n = ds.records
        if n:
            assert ds.verify().ok
            recs = ds.read_records(max(0, n - 50), n)
            assert len(recs) == min(50, n)
        seen.add(n)
    if n == want:
        break
print(sorted(seen))
"""


def test_lmdb_map_grows_while_a_reader_reads(tmp_path):
    uri = f"lmdb://{tmp_path}/ds?map_size=64k"
    loader.load("gen://scidb96?n=500", uri, shards=1, workers=1, batch_records=100, compression="none")
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, uri, "200500"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    rep = loader.load(
        "gen://scidb96?n=200000&start=500", uri, batch_records=2000, checkpoint_seconds=0
    )  # uncompressed: the dataset's
    out, err = reader.communicate(timeout=90)
    assert reader.returncode == 0, err
    assert rep.map_grows >= 3
    assert 200500 in json.loads(out)
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.read_records().tobytes() == gen_bytes(0, 200500)


def _limit_fsize(nbytes):
    def pre():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes fail with EFBIG instead

    return pre


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_file_size_limit_is_a_clean_error_and_the_rerun_succeeds(tmp_path, scheme):
    uri = f"{scheme}://{tmp_path}/ds"
    # uncompressed: 60,000 records must overrun the 256 KiB limit
    assert run_cli("load", "gen://scidb96?n=2000", uri, "--shards", 2, "--compression", "none", "-q").returncode == 0
    before = snapshot(uri)
    args = [tool("bulkload"), "load", "gen://scidb96?n=60000&start=2000", uri, "--quiet"]
    p = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_fsize(256 << 10),
        env=dict(os.environ, **FAST),
    )
    assert p.returncode == 1, p.stderr
    lines = [
        ln for ln in p.stderr.splitlines() if ln.strip() and "resource_tracker" not in ln and "warnings.warn" not in ln
    ]
    assert len(lines) == 1 and lines[0].startswith("bulkload: error: "), p.stderr
    assert "File too large" in lines[0] or "file size" in lines[0].lower() or "EFBIG" in lines[0], lines[0]
    assert snapshot(uri) == before
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.read_records().tobytes() == gen_bytes(0, 62000)


# --- soak (not in make test) -------------------------------------------------------------


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(5))
def test_soak_many_kills_then_rerun(tmp_path, seed, request):
    """Kill the same load again and again at random points; the final state is exact."""
    if "soak" not in (request.config.getoption("-m") or ""):
        pytest.skip("soak run: select it with -m soak")
    rng = random.Random(seed)
    uri = f"lmdb://{tmp_path}/ds"
    n = 400_000
    args = ["load", f"gen://scidb96?n={n}", uri, "--batch-records", 2000, "--shards", 4, "--workers", 2, "-q"]
    for _ in range(15):
        point = rng.choice(COORD_POINTS + WORKER_POINTS)
        run_killed(args, f"{point}:{rng.randint(1, 120)}")
        with loader.open(uri) if os.path.exists(tmp_path / "ds" / "manifest.json") else _null() as ds:
            if ds is not None:
                assert ds.verify().ok
    assert run_cli(*args).returncode == 0
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.read_records().tobytes() == gen_bytes(0, n)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
