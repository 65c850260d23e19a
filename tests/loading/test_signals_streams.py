"""Process plumbing: stream sources (FIFOs, /dev/stdin), /dev/shm hygiene, stop signals, and
messages that say what was committed.

- A FIFO, /dev/stdin, /dev/fd/N or /proc/self/fd/N as SOURCE is a stream: read once, like
  ``-``; byte-identical to loading the same records from a file; every load a new run.
- Nothing is left in /dev/shm by any run - finished, failed, interrupted, or with its
  coordinator SIGKILLed - and no traceback is printed. Those tests run bulkload inside a
  private mount namespace whose /dev/shm is a fresh tmpfs (other jobs on the machine create
  and remove entries in the real one); without the privilege for it they count the real
  /dev/shm's bulkload-relevant entries instead.
- SIGTERM, SIGHUP and SIGINT to a real `bulkload` (load, ingest, finalize, compact) at a
  seeded random moment: exit 128 + signal, one line on stderr, the run ``interrupted``, no
  worker left, and the same command resumes to the uninterrupted result. The moment is
  drawn from the measured length of an uninterrupted run (machine speed does not matter).
- A worker SIGKILLed during an ingest: the message says which files were committed, as
  `info` does.
"""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time

import psutil
import pytest
from helpers import manifest_json, run_cli, tool, wait_until

import loader
from loader.errors import BulkloadError
from loader.model.layouts import get_layout
from loader.sources.generators import generate

LAY = get_layout("scidb96")
RS = LAY.record_size
SEED = 20240611
B = 1000
SIGNALS = {"TERM": signal.SIGTERM, "HUP": signal.SIGHUP, "INT": signal.SIGINT}


def gen_bytes(start, n):
    return generate(LAY, start, n, impl="c").tobytes()


def snapshot(uri):
    """(batch rows, every record) after checking verify passes: what must be byte-identical."""
    with loader.open(uri) as ds:
        rep = ds.verify()
        assert rep.ok, rep.problems
        rows = [(b.seq, b.shard, b.first, b.count, b.checksum, b.nbytes) for b in ds.manifest.batches]
        return rows, ds.read_records().tobytes()


def runs_of(uri):
    with loader.open(uri) as ds:
        return ds.info()["runs"]


def one_error_line(err, prefix="bulkload: error: "):
    assert "Traceback" not in err and "Error:" not in err.replace("bulkload: error:", ""), err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    return lines[0][len(prefix) :]


def make_fifo(path):
    os.mkfifo(path)
    return str(path)


def write_in_thread(path, data):
    """A Python writer on the other end of a FIFO."""

    def write():
        with open(path, "wb") as f:
            f.write(data)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def descendants(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def at_least(n: int, procs: list) -> list | None:
    """``procs`` when there are ``n`` or more (a `wait_until` condition), else None."""
    return procs if len(procs) >= n else None


def assert_all_gone(procs, timeout=10):
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [(p.pid, p.cmdline()) for p in alive]


# --- stream sources -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scheme,n,writer",
    [
        ("lmdb", 0, "gen"),
        ("rocksdb", 1, "python"),
        ("mem", 2500, "gen"),
        ("rocksdb", 4321, "gen"),
        ("lmdb", 3000, "python"),
    ],
)
def test_fifo_source_loads_the_same_as_the_file(tmp_path, scheme, n, writer):
    """A FIFO fed by `bulkload-gen N > p &` (SciDB's binary-load example) or by a Python thread."""
    name = f"sig-{os.getpid()}-{n}"
    uri = f"{scheme}://{tmp_path}/fifo" if scheme != "mem" else f"mem://{name}"
    ref = f"lmdb://{tmp_path}/file"
    (tmp_path / "recs.bin").write_bytes(gen_bytes(0, n))
    loader.load(str(tmp_path / "recs.bin"), ref, shards=2, batch_records=B)
    fifo = make_fifo(tmp_path / "p")
    if writer == "gen":
        # bulkload-gen opens the FIFO itself (the shell's `> p`), once bulkload opens the other end
        g = subprocess.Popen(["sh", "-c", f'exec "$0" {n} > "$1"', tool("bulkload-gen"), fifo])
    else:
        g = write_in_thread(fifo, gen_bytes(0, n))
    try:
        p = run_cli("load", fifo, uri, "--shards", 2, "--batch-records", B, "--json", timeout=60)
        assert p.returncode == 0, p.stderr
        assert "Traceback" not in p.stderr
        rep = json.loads(p.stdout)
        assert rep["source"] == fifo and rep["records"] == n
        assert snapshot(uri) == snapshot(ref)
    finally:
        if writer == "gen":
            g.wait(timeout=30)
        if scheme == "mem":
            shutil.rmtree(f"/dev/shm/bulkload/{name}", ignore_errors=True)


@pytest.mark.parametrize("scheme,whole,tail", [("lmdb", 0, 50), ("rocksdb", 1234, 1), ("lmdb", 3000, 95)])
def test_fifo_partial_trailing_record_names_the_offset_and_commits_nothing(tmp_path, scheme, whole, tail):
    uri = f"{scheme}://{tmp_path}/ds"
    loader.load("gen://scidb96?n=700", uri, shards=2)
    before = snapshot(uri)
    fifo = make_fifo(tmp_path / "p")
    write_in_thread(fifo, gen_bytes(0, whole) + b"\x07" * tail)
    p = run_cli("load", fifo, uri, "--batch-records", B, "--quiet", timeout=60)
    assert p.returncode == 1
    msg = one_error_line(p.stderr)
    assert f"{fifo}: partial record at byte offset {whole * RS} ({tail} trailing bytes" in msg
    assert snapshot(uri) == before
    assert runs_of(uri)[-1]["status"] == "failed" and runs_of(uri)[-1]["source"] == fifo


@pytest.mark.parametrize("path", ["/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "-"])
def test_stdin_paths_are_streams_and_every_load_is_a_new_run(tmp_path, path):
    uri = f"lmdb://{tmp_path}/ds"
    data = gen_bytes(0, 2345)
    for _i in (1, 2):
        p = run_cli("load", path, uri, "--shards", 2, "--batch-records", B, "--json", input=data)
        assert p.returncode == 0, p.stderr
        rep = json.loads(p.stdout)
        assert rep["source"] == path and rep["status"] == "loaded" and rep["records"] == 2345
        assert b"Traceback" not in p.stderr and b"KeyError" not in p.stderr, p.stderr
    runs = runs_of(uri)
    assert [r["status"] for r in runs] == ["done", "done"] and runs[0]["id"] != runs[1]["id"]
    assert snapshot(uri)[1] == data + data


def test_a_fifo_is_loaded_again_by_every_run(tmp_path):
    uri = f"rocksdb://{tmp_path}/ds"
    fifo = make_fifo(tmp_path / "p")
    for i in range(2):
        write_in_thread(fifo, gen_bytes(100 * i, 1500))
        p = run_cli("load", fifo, uri, "--shards", 2, "--batch-records", B, "--quiet", timeout=60)
        assert p.returncode == 0, p.stderr
    assert [r["status"] for r in runs_of(uri)] == ["done", "done"]
    assert snapshot(uri)[1] == gen_bytes(0, 1500) + gen_bytes(100, 1500)


def test_unopened_descriptor_is_a_usage_error(tmp_path):
    p = run_cli("load", "/dev/fd/57", f"lmdb://{tmp_path}/ds")
    assert p.returncode == 2
    assert "/dev/fd/57" in one_error_line(p.stderr)


def test_documents_cannot_come_from_a_fifo(tmp_path):
    fifo = make_fifo(tmp_path / "p")
    p = run_cli("load", fifo, f"lmdb://{tmp_path}/ds", "--layout", "docs")
    assert p.returncode == 2 and "layout docs cannot be read from a stream" in one_error_line(p.stderr)


@pytest.mark.parametrize("layout", ["scidb96", "docs"])
def test_ingest_skips_a_fifo_in_the_directory(tmp_path, layout):
    """Nobody writes to the FIFO: opening it would hang the ingest forever."""
    d = tmp_path / "in"
    d.mkdir()
    if layout == "docs":
        for i in (1, 2):
            (d / f"{i}.json").write_text(json.dumps({"text": f"doc {i}", "created_at": 1}))
        make_fifo(d / "3.json")
    else:
        (d / "a.bin").write_bytes(gen_bytes(0, 300))
        make_fifo(d / "b.bin")
        (d / "c.bin").write_bytes(gen_bytes(300, 200))
    p = run_cli("ingest", f"lmdb://{tmp_path}/ds", "--from", d, "--layout", layout, "--json", timeout=60)
    assert p.returncode == 0, p.stderr
    files = json.loads(p.stdout)["files"]
    assert [f["name"] for f in files] == (["1.json", "2.json"] if layout == "docs" else ["a.bin", "c.bin"])


# --- /dev/shm ------------------------------------------------------------------------------------

SHM_RELEVANT = re.compile(r"psm_|sem\.mp-|bulkload-shm-|mp-")


class ShmView:
    """Runs commands in a private mount namespace whose /dev/shm is a fresh tmpfs (a holder
    process keeps it), so that its entries are exactly what these commands left there."""

    def __init__(self, tmp_path):
        self.holder = subprocess.Popen(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                "mount -t tmpfs -o size=512m tmpfs /dev/shm && echo ready && exec sleep 3600",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ok = self.holder.stdout.readline().strip() == "ready"
        if not ok:  # no privilege for a mount namespace: look at the real /dev/shm
            self.holder.wait(timeout=10)
            self.holder = None

    def argv(self, args):
        return (["nsenter", "-t", str(self.holder.pid), "-m", "--"] if self.holder else []) + list(map(str, args))

    def popen(self, args, **kw):
        return subprocess.Popen(self.argv(args), **kw)

    def run(self, args, input=None, timeout=120):
        return subprocess.run(self.argv(args), input=input, capture_output=True, timeout=timeout)

    def entries(self):
        root = f"/proc/{self.holder.pid}/root/dev/shm" if self.holder else "/dev/shm"
        names = set(os.listdir(root))
        names.discard("bulkload")  # mem:// datasets live there, on purpose
        return names if self.holder else {n for n in names if SHM_RELEVANT.match(n)}

    def close(self):
        if self.holder:
            self.holder.kill()
            self.holder.wait()


@pytest.fixture
def shm(tmp_path):
    view = ShmView(tmp_path)
    yield view
    view.close()


def bl(*args):
    return [tool("bulkload"), *args]


def gen_pipe(view, n):
    return view.popen([tool("bulkload-gen"), n], stdout=subprocess.PIPE)


def shm_scenario(view, tmp_path, name):
    """Run scenario ``name``; returns the stderr texts of the bulkload commands it ran."""
    uri = f"lmdb://{tmp_path}/ds"
    errs = []
    if name in ("stdin", "stdin-partial", "fifo"):
        if name == "fifo":
            fifo = make_fifo(tmp_path / "p")
            write_in_thread(fifo, gen_bytes(0, 50_000))
            p = view.run(bl("load", fifo, uri, "--quiet"))
        else:
            data = gen_bytes(0, 50_000) + (b"xyz" if name == "stdin-partial" else b"")
            p = view.run(bl("load", "-", uri, "--quiet"), input=data)
        assert p.returncode == (1 if name == "stdin-partial" else 0), p.stderr
        errs.append(p.stderr.decode())
    elif name == "pool":  # every pool of the package: load, finalize (scan/partition/build), compact
        for args in (
            ["load", "gen://scidb96?n=30000", uri, "--batch-records", 700, "--shards", 2],
            ["load", "gen://scidb96?n=30000&start=30000", uri],
            ["finalize", uri, "--dims", "i0:5,i1:500"],
            ["finalize", uri, "--dims", "i0:3,i1:1000", "--array", "g2", "--strategy", "spill"],
            ["compact", uri, "--target-batch-records", 20000, "--force"],
        ):
            p = view.run(bl(*args, "--quiet"))
            assert p.returncode == 0, p.stderr
            errs.append(p.stderr.decode())
    elif name in ("stdin-sigint", "stdin-sigkill"):
        g = gen_pipe(view, 100_000_000)
        p = view.popen(bl("load", "-", uri, "--quiet", "--batch-records", B), stdin=g.stdout, stderr=subprocess.PIPE)
        g.stdout.close()
        wait_for_run(tmp_path / "ds", "load")
        time.sleep(random.Random(SEED).uniform(0.2, 0.6))
        kids = descendants(p.pid)
        p.send_signal(signal.SIGINT if name == "stdin-sigint" else signal.SIGKILL)
        _, err = p.communicate(timeout=60)
        g.kill()
        g.wait()
        assert_all_gone(kids)
        if name == "stdin-sigint":
            assert p.returncode == 130 and "interrupted by SIGINT" in one_error_line(err.decode())
        else:
            assert p.returncode == -signal.SIGKILL
            # the next run on the dataset (a new one from a stream) leaves nothing either
            q = view.run(bl("load", "-", uri, "--quiet"), input=gen_bytes(0, 3000))
            assert q.returncode == 0, q.stderr
            errs.append(q.stderr.decode())
            assert loader.open(uri).records == 3000
    return errs


@pytest.mark.parametrize("name", ["stdin", "fifo", "stdin-partial", "stdin-sigint", "stdin-sigkill", "pool"])
def test_no_run_leaves_anything_in_dev_shm(shm, tmp_path, name):
    before = shm.entries()
    errs = shm_scenario(shm, tmp_path, name)
    # a resource tracker of a dead run may still be unlinking: what it leaves after 10 s stays
    wait_until(lambda: shm.entries() == before, 10, f"/dev/shm back to its entries before the {name} runs")
    for err in errs:
        assert "Traceback" not in err and "KeyError" not in err and "leaked" not in err, err


# --- stop signals ---------------------------------------------------------------------------------

N_LOAD = 1_000_000
INGEST_FILES = [(f"f{i:02d}.bin", i * 100_000, 100_000) for i in range(10)]
#: what each command says it committed when a signal stopped it (or that it had just finished)
OUTCOME = {
    "load": r"nothing from this run was committed; re-run the same command to resume it",
    "ingest": r"(none of its 10 file\(s\) was committed; re-run the same command to resume|"
    r"(?P<files>\d+) of 10 file\(s\) \((?P<records>[\d,]+) records\) were committed; re-run the "
    r"same command to load the rest)",
    "finalize": r"the arrays are unchanged; re-run the same command to finalize",
    "compact": r"no record changed \(compaction only rewrites them\); re-run the same command to compact",
}


def wait_for_run(root, kind, timeout=60):
    """Wait until the manifest of ``root`` shows a ``running`` run of ``kind``."""

    def running() -> bool:
        try:
            return any(r.get("kind") == kind and r.get("status") == "running" for r in manifest_json(root)["runs"])
        except (OSError, ValueError, KeyError, BulkloadError):
            return False

    wait_until(running, timeout, f"a running {kind} run in {root}", every=0.005)


def command(kind, uri, d):
    return {
        "load": ["load", f"gen://scidb96?n={N_LOAD}", uri, "--shards", 2, "--batch-records", 5000],
        "ingest": ["ingest", uri, "--from", d, "--shards", 2, "--batch-records", 5000],
        "finalize": ["finalize", uri, "--dims", "i0:10,i1:5000", "--no-compact"],
        "compact": ["compact", uri, "--target-batch-records", 50_000],
    }[kind] + ["--quiet"]


def timed(args, root, kind, env=None):
    """Run a command to its end; (stderr, seconds from its run's start to its exit)."""
    p = subprocess.Popen(bl(*map(str, args)), stderr=subprocess.PIPE, text=True, env=env)
    wait_for_run(root, kind)
    t = time.monotonic()
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return err, time.monotonic() - t


@pytest.fixture(scope="module")
def signal_base(tmp_path_factory):
    """Per command: a directory to run it on (copied per test) and the uninterrupted result."""
    base = tmp_path_factory.mktemp("sigbase")
    d = base / "in"
    d.mkdir()
    for name, start, n in INGEST_FILES:
        (d / name).write_bytes(gen_bytes(start, n))
    # finalize / compact start from a dataset of small batches
    seed = base / "seed"
    seed.mkdir()
    assert (
        run_cli(
            "load", f"gen://scidb96?n={N_LOAD}", f"lmdb://{seed}/ds", "--shards", 2, "--batch-records", 5000, "--quiet"
        ).returncode
        == 0
    )
    out = {}
    for kind in ("load", "ingest", "finalize", "compact"):
        ref = base / f"ref-{kind}"
        ref.mkdir()
        if kind in ("finalize", "compact"):
            shutil.copytree(seed / "ds", ref / "ds")
        uri = f"lmdb://{ref}/ds"
        _, seconds = timed(command(kind, uri, d), ref / "ds", kind)
        out[kind] = (seconds, state(uri, kind))
    return base, d, out


def state(uri, kind):
    rows, records = snapshot(uri)
    if kind != "finalize":
        return rows, records
    with loader.open(uri) as ds:
        a = dict(ds.manifest.arrays["grid"])
        for volatile in ("run_id", "created", "table", "index"):
            a.pop(volatile)
        return rows, records, a, ds.read_box("grid")


def signal_scenarios():
    rng = random.Random(SEED)
    return [
        pytest.param(kind, sig, rng.uniform(0.1, 0.6), id=f"{kind}-SIG{sig}")
        for kind in ("load", "ingest", "finalize", "compact")
        for sig in SIGNALS
    ]


@pytest.mark.parametrize("kind,sig,at", signal_scenarios())
def test_stop_signal_interrupts_the_run_and_the_same_command_resumes(tmp_path, signal_base, kind, sig, at):
    base, d, refs = signal_base
    seconds, want = refs[kind]
    uri = f"lmdb://{tmp_path}/ds"
    args = bl(*map(str, command(kind, uri, d)))
    for attempt in range(4):  # a busy machine may run it faster than the reference: an earlier moment
        shutil.rmtree(tmp_path / "ds", ignore_errors=True)
        if kind in ("finalize", "compact"):
            shutil.copytree(base / "seed" / "ds", tmp_path / "ds")
        p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        wait_for_run(tmp_path / "ds", kind)
        time.sleep(at * seconds / 2**attempt)  # a moment within the run, drawn from its measured length
        kids = descendants(p.pid)
        p.send_signal(SIGNALS[sig])
        _, err = p.communicate(timeout=120)
        finished_first = (
            p.returncode in (0, -SIGNALS[sig])
            and not err
            and [r for r in runs_of(uri) if r["kind"] == kind][-1]["status"] == "done"
        )
        if not finished_first:
            break
    assert p.returncode == 128 + SIGNALS[sig], (p.returncode, err)
    msg = one_error_line(err)
    assert_all_gone(kids)  # no worker (nor forkserver) outlives the job
    last = [r for r in runs_of(uri) if r["kind"] == kind][-1]
    if re.fullmatch(f"interrupted by SIG{sig}; run {last['id']} had finished.*", msg):
        assert last["status"] == "done"  # it came during the commit, which was written whole
        assert state(uri, kind) == want
        return
    said = re.fullmatch(f"interrupted by SIG{sig}; {OUTCOME[kind]}", msg)
    assert said, msg
    assert last["status"] == "interrupted" and last["error"] == msg
    if kind == "ingest":  # what it says was committed is what is
        with loader.open(uri) as ds:
            files = [e for e in ds.manifest.files.values() if e["run"] == last["id"]]
            assert (len(files), ds.records) == (
                (int(said["files"]), int(said["records"].replace(",", ""))) if said["files"] else (0, 0)
            )
    again = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert state(uri, kind) == want


@pytest.mark.parametrize("kind", ["load", "stdin"])
def test_sigterm_to_the_whole_process_group_is_an_interruption(tmp_path, kind):
    """What systemd does: SIGTERM to every process of the job, workers included."""
    uri = f"lmdb://{tmp_path}/ds"
    g = None
    if kind == "stdin":
        g = subprocess.Popen([tool("bulkload-gen"), "100000000"], stdout=subprocess.PIPE)
        p = subprocess.Popen(
            bl("load", "-", uri, "--quiet", "--workers", "2"),
            stdin=g.stdout,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        g.stdout.close()
    else:
        p = subprocess.Popen(
            bl("load", "gen://scidb96?n=100000000", uri, "--quiet", "--workers", "2"),
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    wait_for_run(tmp_path / "ds", "load")
    kids = wait_until(lambda: at_least(4, descendants(p.pid)), 30, "the tracker, the forkserver and 2 workers")
    time.sleep(0.2)  # a moment into the load: a signal during the start-up is test_early_signals' subject
    os.killpg(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    if g is not None:
        g.kill()
        g.wait()
    assert p.returncode == 143, err
    assert one_error_line(err).startswith("interrupted by SIGTERM; nothing from this run was committed"), err
    assert_all_gone(kids)
    assert runs_of(uri)[-1]["status"] == "interrupted" and loader.open(uri).records == 0


@pytest.mark.parametrize("sig", sorted(SIGNALS))
def test_a_stop_signal_after_the_command_ended_leaves_its_exit_code(tmp_path, sig):
    """Once the command has returned, its outcome is decided: a stop signal during the
    interpreter's exit (here from an atexit handler, which runs after bulkload's own exit
    code) neither kills the process nor changes its exit code."""
    import sys

    uri = f"lmdb://{tmp_path}/ds"
    code = (
        "import atexit, os, signal, sys\n"
        f"atexit.register(lambda: os.kill(os.getpid(), signal.SIG{sig}))\n"
        f"sys.argv = ['bulkload', 'load', 'gen://scidb96?n=1000', {uri!r}, '--quiet']\n"
        "from loader.cli.main import main\n"
        "main()\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stderr) == (0, "")
    assert runs_of(uri)[-1]["status"] == "done" and loader.open(uri).records == 1000


def test_signals_during_the_cleanup_do_not_abort_it(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    p = subprocess.Popen(bl("load", "gen://scidb96?n=100000000", uri, "--quiet"), stderr=subprocess.PIPE, text=True)
    wait_for_run(tmp_path / "ds", "load")
    kids = wait_until(lambda: at_least(4, descendants(p.pid)), 30, "the tracker, the forkserver and 2 workers")
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        try:
            p.send_signal(s)
        except ProcessLookupError:
            break
        time.sleep(0.01)  # the subject: signals 10 ms apart, during the cleanup of the first
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert one_error_line(err).startswith("interrupted by SIGTERM")
    assert_all_gone(kids)
    assert runs_of(uri)[-1]["status"] == "interrupted"


def test_import_and_api_install_no_signal_handlers(tmp_path):
    code = (
        "import signal; before = [signal.getsignal(s) for s in (2, 15, 1)]; import loader; "
        f"loader.load('gen://scidb96?n=2000', 'lmdb://{tmp_path}/ds', workers=2, shards=2); "
        "assert [signal.getsignal(s) for s in (2, 15, 1)] == before, 'changed'"
    )
    p = subprocess.run(
        [os.path.join(os.path.dirname(tool("bulkload")), "python"), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr


# --- honest messages --------------------------------------------------------------------------------


def test_worker_killed_during_ingest_names_the_committed_files(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for i in range(10):
        (d / f"f{i}.bin").write_bytes(gen_bytes(i * 5000, 5000))
    uri = f"lmdb://{tmp_path}/ds"
    env = dict(os.environ, BULKLOAD_FAULT="w1.sync:30", BULKLOAD_CHECKPOINT_SECONDS="0")
    args = ("ingest", uri, "--from", d, "--shards", 2, "--workers", 2, "--batch-records", 500, "--quiet")
    p = subprocess.run(bl(*map(str, args)), capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1
    msg = one_error_line(p.stderr)
    m = re.fullmatch(
        r"worker 1 \(pid \d+\) was killed by signal 9 before it finished; (\d+) of 10 file\(s\) "
        r"\(([\d,]+) records\) were committed; re-run the same command to load the rest",
        msg,
    )
    assert m, msg
    nfiles, nrec = int(m.group(1)), int(m.group(2).replace(",", ""))
    with loader.open(uri) as ds:
        run = ds.info()["runs"][-1]
        files = [f for f, e in ds.manifest.files.items() if e["run"] == run["id"]]
        assert run["status"] == "failed" and run["error"] == msg
        assert (len(files), ds.records, run["records"]) == (nfiles, nrec, nrec)
    assert nfiles > 0  # the old message said "nothing from this run was committed"
    again = run_cli("ingest", uri, "--from", d, "--quiet")
    assert again.returncode == 0 and loader.open(uri).records == 50_000


def test_worker_killed_during_load_says_nothing_was_committed(tmp_path):
    uri = f"rocksdb://{tmp_path}/ds"
    env = {"BULKLOAD_FAULT": "w0.flush:3", "BULKLOAD_CHECKPOINT_SECONDS": "0"}
    p = run_cli(
        "load", "gen://scidb96?n=20000", uri, "--shards", 2, "--workers", 2, "--batch-records", 500, "--quiet", env=env
    )
    assert p.returncode == 1
    msg = one_error_line(p.stderr)
    assert re.fullmatch(
        r"worker 0 \(pid \d+\) was killed by signal 9 before it finished; nothing from this "
        r"run was committed; re-run the same command to resume it",
        msg,
    ), msg
    assert loader.open(uri).records == 0 and runs_of(uri)[-1]["error"] == msg


@pytest.fixture
def own_handlers():
    """stop_on_signals() leaves the stop signals ignored once one came (the CLI then exits):
    give pytest its handlers back."""
    saved = {s: signal.getsignal(s) for s in SIGNALS.values()}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize("sig", SIGNALS)
def test_a_signal_during_a_commit_is_raised_after_it(own_handlers, sig):
    from loader.errors import Interrupted
    from loader.infra.interrupts import held, stop_on_signals

    done = []
    with pytest.raises(Interrupted) as exc, stop_on_signals(), held(lambda: "run R had finished"):
        os.kill(os.getpid(), SIGNALS[sig])
        time.sleep(0.05)  # the handler runs in here: the signal is held, not raised
        done.append("manifest written")
    assert done == ["manifest written"]
    assert exc.value.signo == SIGNALS[sig] and str(exc.value) == f"interrupted by SIG{sig}; run R had finished"
    assert exc.value.exit_code == 128 + SIGNALS[sig]
    os.kill(os.getpid(), signal.SIGTERM)  # later signals are ignored while the command reports


def test_a_held_signal_wins_over_the_error_it_caused(own_handlers):
    """E.g. a group-wide SIGTERM kills the forkserver while a worker is being started."""
    from loader.errors import Interrupted
    from loader.infra.interrupts import held, stop_on_signals

    with pytest.raises(Interrupted) as exc, stop_on_signals(), held(lambda: "unused"):
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.05)  # the handler runs in here: the signal is held, not raised
        raise EOFError("unexpected EOF")
    assert str(exc.value) == "interrupted by SIGHUP" and isinstance(exc.value.__cause__, EOFError)
