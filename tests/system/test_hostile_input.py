"""Hostile input: whatever a user types or does to their files, bulkload answers with one
line and the right exit code, writes nothing it should not, and never a traceback.

- mem:// names are one plain path component (nothing lands in /dev/shm or /dev/shm/bulkload);
- outputs (export, query, generate) into devices, FIFOs, symlinks, directories, a full
  device (c 1 7 made in the test's directory: the system's /dev/full is never written);
- no dataset inside another one (load, ingest, finalize, compact);
- a directory as the lock file, a file as the dataset, garbage in BULKLOAD_* variables;
- strict URIs and options (gen:// parameters, store options per backend, counts);
- sources that are devices, sockets or procfs/sysfs files;
- absurd counts: refused up front (no space) in bounded memory (planning O(1) in N:
  tests/loading/test_plan.py);
- a fuzz of bad invocations of every command: exit 1 or 2, one line, no traceback.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from helpers import run_cli, run_measured
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import loader
from loader.cli.main import app
from loader.errors import UsageError
from loader.stores.spec import MEM_NAME, MEM_ROOT, parse_dataset_uri

RUNNER = CliRunner()


def cli(*args, env=None):
    """The CLI in this process (fast: for tables of failing invocations)."""
    return RUNNER.invoke(app, [str(a) for a in args], env=env)


def error_line(result, code: int, *texts: str) -> str:
    """The one error line of a finished invocation (CliRunner result or CompletedProcess)."""
    rc = getattr(result, "returncode", None)
    if rc is None:
        rc = result.exit_code
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert rc == code, (rc, result.stderr, result.stdout)
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("bulkload: error: "), result.stderr
    for t in texts:
        assert t in lines[0], lines[0]
    return lines[0]


def full_device(directory) -> str:
    """A private /dev/full (c 1 7): every write fails with ENOSPC. Tests never touch the
    system's /dev/full, so that a broken one (replaced by a file) cannot hide a failure."""
    path = os.path.join(directory, "full-dev")
    if not os.path.exists(path):
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 7))
    return path


def tree(path) -> dict:
    """Every file and directory under ``path`` with its type, size and mtime (but LMDB's
    reader tables, lock.mdb, which every reader writes: the catalog's is read before the lock)."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            if name == "lock.mdb":
                continue
            p = os.path.join(root, name)
            st_ = os.lstat(p)
            out[os.path.relpath(p, path)] = (stat.S_IFMT(st_.st_mode), st_.st_size, st_.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def grid_ds(tmp_path_factory):
    """A small lmdb dataset with a 2-D array: what export and query read."""
    from loader.arrays.finalize import finalize

    uri = f"lmdb://{tmp_path_factory.mktemp('grid')}/ds"
    loader.load("gen://scidb96?n=1000", uri, shards=2, workers=1)
    finalize(uri, dims="i0:10,i1:100", workers=1)
    return uri


# --- mem:// names --------------------------------------------------------------------------------

LEAK_DIRS = ("/", "/dev", "/dev/shm", MEM_ROOT)
LEAK_NAMES = ("manifest.json", "catalog", ".lock", "shard-000", "arrays", ".plans")


def leaks() -> set[str]:
    return {os.path.join(d, n) for d in LEAK_DIRS for n in LEAK_NAMES if os.path.lexists(os.path.join(d, n))}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=140), st.from_regex(r"[A-Za-z0-9._/-]{0,12}", fullmatch=True)))
@example(".")
@example("..")
@example("")
@example("a/b")
@example("../x")
@example("./x")
@example("x/")
@example("/x")
@example("\0")
@example("a\0b")
@example("x" * 129)
@example("x" * 128)
@example("é")
@example("名前")
@example(".hidden")
@example("..x")
@example("-x_1.v2")
def test_mem_names_are_one_plain_component(name):
    """Every mem:// name is refused (exit 2, saying what a name may be) or creates exactly
    /dev/shm/bulkload/NAME: never manifest.json or shards in /dev/shm, /dev/shm/bulkload, /dev, /."""
    assert not leaks()
    before = set(os.listdir("/dev/shm"))
    path = os.path.join(MEM_ROOT, name) if "\0" not in name else None
    existed = path is not None and os.path.lexists(path)
    try:
        loader.load("gen://scidb96?n=10", f"mem://{name}", shards=1, workers=1)
    except UsageError as e:
        assert e.exit_code == 2
        assert "mem://" in str(e)
        assert path is None or os.path.lexists(path) == existed
    else:
        try:
            assert MEM_NAME.fullmatch(name) and not name.startswith(".")
            assert os.path.isfile(os.path.join(path, "manifest.json"))
            assert os.path.dirname(os.path.realpath(path)) == os.path.realpath(MEM_ROOT)
        finally:
            shutil.rmtree(path, ignore_errors=True)
    assert not leaks()
    assert not {n for n in set(os.listdir("/dev/shm")) - before if n in LEAK_NAMES or n == name}


# --- outputs: devices, FIFOs, symlinks, directories, /dev/full ------------------------------------


class FifoReader(threading.Thread):
    """Reads a FIFO to EOF; `done()` unblocks it if no writer ever came."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.data = path, None
        self.start()

    def run(self):
        with open(self.path, "rb") as f:
            self.data = f.read()

    def done(self) -> bytes | None:
        deadline = time.monotonic() + 10
        while self.is_alive() and time.monotonic() < deadline:
            try:  # a writer that opens and closes ends a reader still waiting in open()
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
            self.join(0.05)
        return self.data


def output_commands(grid_ds):
    return {
        "export-npy": ["export", grid_ds, "--format", "npy", "--out"],
        "export-arrow": ["export", grid_ds, "--format", "arrow", "--out"],
        "export-parquet": ["export", grid_ds, "--format", "parquet", "--out"],
        "query-csv": ["query", grid_ds, "--box", "i0=0:5", "--format", "csv", "--out"],
        "query-npy": ["query", grid_ds, "--box", "i0=0:5", "--format", "npy", "--out"],
        "generate": ["generate", "1000", "--out"],
    }


@pytest.mark.parametrize(
    "command", ["export-npy", "export-arrow", "export-parquet", "query-csv", "query-npy", "generate"]
)
def test_outputs_never_replace_what_is_not_a_regular_file(command, grid_ds, tmp_path):
    args = output_commands(grid_ds)[command]
    regular = tmp_path / "regular"
    assert cli(*args, regular).exit_code == 0
    want = regular.read_bytes()
    assert want

    # a character device (c 1 3 = /dev/null): written as a stream, still the device
    dev = tmp_path / "null-dev"
    os.mknod(dev, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    assert cli(*args, dev).exit_code == 0
    st_ = os.lstat(dev)
    assert stat.S_ISCHR(st_.st_mode) and st_.st_rdev == os.makedev(1, 3)

    # a FIFO: the reader gets exactly the bytes of the file output; still a FIFO
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    r = cli(*args, fifo)
    assert r.exit_code == 0, r.stderr
    assert reader.done() == want
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)

    # a symlink to a file: followed (the file is replaced), the link stays a link
    target = tmp_path / "target"
    target.write_bytes(b"old")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert cli(*args, link).exit_code == 0
    assert link.is_symlink() and os.readlink(link) == str(target) and target.read_bytes() == want

    # a dangling symlink: the file it names is created
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "created")
    assert cli(*args, dangling).exit_code == 0
    assert dangling.is_symlink() and (tmp_path / "created").read_bytes() == want
    bad_link = tmp_path / "bad-link"
    bad_link.symlink_to(tmp_path / "no-dir" / "x")
    error_line(cli(*args, bad_link), 2, "does not exist")
    assert bad_link.is_symlink() and not (tmp_path / "no-dir").exists()

    # a directory: exit 2, left as it was
    d = tmp_path / "dir"
    d.mkdir()
    error_line(cli(*args, d), 2, "is a directory")
    assert d.is_dir() and not list(d.iterdir())

    # a missing parent: exit 2
    error_line(cli(*args, tmp_path / "missing" / "x"), 2, "does not exist")
    assert not (tmp_path / "missing").exists()

    # a full device (c 1 7, as /dev/full): one line, exit 1, still the device
    full = full_device(tmp_path)
    error_line(cli(*args, full), 1, f"cannot write {full}: No space left on device")
    assert stat.S_ISCHR(os.lstat(full).st_mode) and os.lstat(full).st_rdev == os.makedev(1, 7)

    # no temporary file left behind anywhere
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_output_errors_through_the_real_binary(grid_ds, tmp_path):
    """The same one-line errors from the installed command (its real stderr)."""
    full = full_device(tmp_path)
    error_line(run_cli("export", grid_ds, "--out", full, "--format", "npy"), 1, "No space left on device")
    error_line(run_cli("generate", "10", "--out", tmp_path), 2, "is a directory")
    error_line(
        run_cli("query", grid_ds, "--box", "i0=0:5", "--format", "csv", "--out", full), 1, "No space left on device"
    )
    assert stat.S_ISCHR(os.lstat(full).st_mode)


# --- no dataset inside another -------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_no_dataset_inside_another(scheme, tmp_path):
    from loader.arrays.finalize import finalize

    outer = tmp_path / "outer"
    uri = f"{scheme}://{outer}"
    loader.load("gen://scidb96?n=2000", uri, shards=2, workers=1, batch_records=500)
    finalize(uri, dims="i0:10,i1:100", workers=1)
    empty = tmp_path / "incoming"
    empty.mkdir()
    inside = [
        outer / "shard-000" / "inner",
        outer / "arrays" / "inner",
        outer / "inner",
        outer / "shard-001",
        outer / "a" / "b",
    ]
    before = tree(outer)
    for p in inside:
        inner = f"{scheme}://{p}"
        for args in (
            ["load", "gen://scidb96?n=10", inner],
            ["ingest", inner, "--from", empty],
            ["load", "gen://docs?n=10", inner],
        ):
            error_line(cli(*args), 2, "lies inside", str(outer))
        assert tree(outer) == before
    # a dataset that got inside another some other way (e.g. moved there) is not written either
    elsewhere = f"{scheme}://{tmp_path}/elsewhere"
    loader.load("gen://scidb96?n=100", elsewhere, shards=1, workers=1)
    moved = outer / "shard-000" / "moved"
    shutil.move(str(tmp_path / "elsewhere"), moved)
    before = tree(outer)
    for args in (
        ["finalize", f"{scheme}://{moved}", "--dims", "i0:10,i1:100"],
        ["compact", f"{scheme}://{moved}"],
        ["load", "gen://scidb96?n=10", f"{scheme}://{moved}"],
    ):
        error_line(cli(*args), 2, "lies inside")
    assert tree(outer) == before
    shutil.rmtree(moved)
    # a --replace build counts as a dataset too
    sibling = tmp_path / ".outer.replacing"
    sibling.mkdir()
    error_line(cli("load", "gen://scidb96?n=10", f"{scheme}://{sibling}/x"), 2, "lies inside", str(sibling))
    sibling.rmdir()
    # the outer dataset's compaction leaves it whole
    before = {p for p in tree(outer) if not p.startswith("shard-")}
    r = cli("compact", uri, "--force")
    assert r.exit_code == 0, r.stderr
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.records == 2000
    assert {p for p in tree(outer) if not p.startswith("shard-")} >= before - {".lock"}


# --- lock file, dataset path, environment ---------------------------------------------------------


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb", "mem"])
def test_lock_file_that_is_a_directory(scheme, tmp_path):
    name = f"lockdir-{uuid.uuid4().hex[:8]}"
    uri = f"mem://{name}" if scheme == "mem" else f"{scheme}://{tmp_path}/ds"
    root = Path(parse_dataset_uri(uri).root)
    try:
        loader.load("gen://scidb96?n=100", uri, shards=1, workers=1)
        os.unlink(root / ".lock")
        (root / ".lock").mkdir()
        before = tree(root)
        for args in (
            ["load", "gen://scidb96?n=10", uri],
            ["ingest", uri, "--from", tmp_path],
            ["compact", uri],
            ["finalize", uri, "--dims", "i0:10,i1:100"],
        ):
            error_line(run_cli(*args), 2, f"{root / '.lock'} is a directory")
        assert tree(root) == before
        (root / ".lock").rmdir()
        (root / ".lock").symlink_to(tmp_path / "victim")
        error_line(cli("load", "gen://scidb96?n=10", uri), 2, "is a symlink")
        assert not (tmp_path / "victim").exists()
    finally:
        if scheme == "mem":
            shutil.rmtree(root, ignore_errors=True)


def test_dataset_path_that_is_a_file(tmp_path, grid_ds):
    f = tmp_path / "file"
    f.write_bytes(b"not a dataset")
    for scheme in ("lmdb", "rocksdb"):
        uri = f"{scheme}://{f}"
        for args in (
            ["info", uri],
            ["verify", uri],
            ["export", uri, "--out", tmp_path / "x"],
            ["query", uri, "--box", "i0=0:1"],
            ["compact", uri],
            ["finalize", uri],
            ["get", uri, "1"],
        ):
            error_line(run_cli(*args) if args[0] == "info" else cli(*args), 2, "is a file")
        error_line(cli("load", "gen://scidb96?n=10", uri), 2, "not a directory")
    assert f.read_bytes() == b"not a dataset"


@pytest.mark.parametrize(
    "var,value",
    [
        ("BULKLOAD_CHECKPOINT_SECONDS", "abc"),
        ("BULKLOAD_CHECKPOINT_SECONDS", "-1"),
        ("BULKLOAD_CHECKPOINT_SECONDS", "nan"),
        ("BULKLOAD_CHECKPOINT_SECONDS", "inf"),
        ("BULKLOAD_CHECKPOINT_BYTES", "abc"),
        ("BULKLOAD_CHECKPOINT_BYTES", "-5"),
        ("BULKLOAD_CHECKPOINT_BYTES", "1.5"),
        ("BULKLOAD_FAULT", "abc:x"),
        ("BULKLOAD_FAULT", ":3"),
        ("BULKLOAD_FAULT", "flush:0"),
        ("BULKLOAD_FAULT", "a:²"),
        ("BULKLOAD_DEBUG", "maybe"),
    ],
)
def test_environment_garbage_is_exit_2_naming_the_variable(var, value, tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    error_line(run_cli("load", "gen://scidb96?n=10", uri, env={var: value}), 2, var)
    assert not (tmp_path / "ds").exists()
    for args in (["ingest", uri, "--from", tmp_path], ["info", uri]):
        error_line(cli(*args, env={var: value}), 2, var)
    if var != "BULKLOAD_DEBUG":  # the Python API reads them too
        os.environ[var] = value
        try:
            with pytest.raises(UsageError, match=var):
                loader.load("gen://scidb96?n=10", uri)
        finally:
            del os.environ[var]
    assert not (tmp_path / "ds").exists()


def test_unexpected_errors_are_one_line_or_a_traceback_on_request(tmp_path, monkeypatch):
    """The last resort: an error no part of bulkload anticipated (here a ValueError deep in
    the query) is one line, exit 1; BULKLOAD_DEBUG=1 shows its traceback instead."""
    import loader.arrays.query as q

    def boom(*a, **k):
        raise ValueError("deep inside\nsecond line")

    monkeypatch.setattr(q, "parse_box", boom)
    line = error_line(cli("query", "lmdb://x", "--box", "i0=0:1"), 1, "ValueError: deep inside; second line")
    assert "BULKLOAD_DEBUG=1" in line
    r = cli("query", "lmdb://x", "--box", "i0=0:1", env={"BULKLOAD_DEBUG": "1"})
    assert r.exit_code == 1 and isinstance(r.exception, ValueError)


# --- URIs and options ----------------------------------------------------------------------------

BAD_OPTIONS = [
    ("gen://scidb96?n=abc&n=2", "", [], "given more than once"),
    ("gen://scidb96?n=5&n=5", "", [], "given more than once"),
    ("gen://scidb96?n=5&start=1&start=1", "", [], "given more than once"),
    ("gen://scidb96?n=5&foo=1", "", [], "unknown parameter"),
    ("gen://docs?n=5&impl=c", "", [], "unknown parameter"),
    ("gen://docs?n=5&seed=1&seed=2", "", [], "given more than once"),
    ("gen://scidb96?n=5", "?foo=bar", [], "unknown option(s) foo"),
    ("gen://scidb96?n=5", "?block_size=4096", ["lmdb", "mem"], "unknown option(s) block_size"),
    ("gen://scidb96?n=5", "?map_size=64m", ["rocksdb"], "unknown option(s) map_size"),
    ("gen://scidb96?n=5", "?shards=2&shards=2", [], "given more than once"),
    ("gen://scidb96?n=5", "?map_size=abc", ["lmdb", "mem"], "map_size"),
    ("gen://scidb96?n=5", "?max_dbs=0", ["lmdb", "mem"], "max_dbs"),
    ("gen://scidb96?n=5", "?compression=brotli", ["rocksdb"], "compression"),
    ("gen://scidb96?n=5", "?shards=0", [], "shards must be between 1 and 1024"),
]


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb", "mem"])
@pytest.mark.parametrize("source,query,only,text", BAD_OPTIONS)
def test_uris_are_strict(scheme, source, query, only, text, tmp_path):
    if only and scheme not in only:
        pytest.skip("an option of this backend")
    name = f"strict-{uuid.uuid4().hex[:8]}"
    uri = (f"mem://{name}" if scheme == "mem" else f"{scheme}://{tmp_path}/ds") + query
    line = error_line(cli("load", source, uri), 2, text)
    if "unknown option" in text:
        assert "takes shards" in line  # the known ones are listed
    assert not (tmp_path / "ds").exists() and not os.path.exists(os.path.join(MEM_ROOT, name))


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_dataset_paths_must_be_printable_utf8(scheme, tmp_path):
    """A path of non-UTF-8 bytes failed inside the workers after the dataset was created."""
    for name in (os.fsdecode(b"bad-\xff"), "tab\there", "new\nline"):
        error_line(run_cli("load", "gen://scidb96?n=10", f"{scheme}://{tmp_path}/{name}"), 2, "printable UTF-8")
    assert os.listdir(tmp_path) == []


COUNT_OPTIONS = {
    "load": ["--shards", "--workers", "--batch-records"],
    "ingest": ["--shards", "--workers", "--batch-records"],
    "finalize": ["--workers"],
    "compact": ["--workers", "--target-batch-records"],
}


@pytest.mark.parametrize("value", ["0", "-1", str(10**30), "1.5", "abc", ""])
def test_counts_are_checked_on_every_command(value, tmp_path, grid_ds):
    src = tmp_path / "in"
    src.mkdir()
    new = f"lmdb://{tmp_path}/ds"
    before = tree(Path(parse_dataset_uri(grid_ds).root))
    for command, options in COUNT_OPTIONS.items():
        for opt in options:
            args = {
                "load": ["load", "gen://scidb96?n=10", new],
                "ingest": ["ingest", new, "--from", src],
                "finalize": ["finalize", grid_ds, "--dims", "i0:10,i1:100"],
                "compact": ["compact", grid_ds],
            }[command]
            error_line(cli(*args, opt, value), 2, opt if value.lstrip("-").isdigit() else "")
    assert not (tmp_path / "ds").exists()
    assert tree(Path(parse_dataset_uri(grid_ds).root)) == before


@pytest.mark.parametrize(
    "key,value,text",
    [
        ("job.shards", "0", "--shards"),
        ("job.workers", "0", "--workers"),
        ("job.batch_records", "0", "--batch-records"),
        ("job.shards", "-1", "--shards"),
        ("job.batch_records", str(10**12), "--batch-records"),
        ("finalize.workers", "0", "--workers"),
        ("job.shards", "abc", "shards"),
    ],
)
def test_counts_are_checked_in_pipelines(key, value, text, tmp_path):
    p = tmp_path / "job.toml"
    p.write_text(
        f'[job]\ndataset = "lmdb://{tmp_path}/ds"\n[load]\nsource = "gen://scidb96?n=100"\n'
        '[finalize]\ndims = "i0:10,i1:100"\n'
    )
    if key.startswith("finalize"):  # a dataset for the finalize step to refuse (its load step: nothing to do)
        assert cli("run", p, "--set", "finalize.enabled=false", "--quiet").exit_code == 0
    before = tree(tmp_path)
    error_line(cli("run", p, "--set", f"{key}={value}", "--quiet"), 2, text)
    after = tree(tmp_path)
    assert {k: v for k, v in after.items() if k != "ds/.lock"} == {k: v for k, v in before.items() if k != "ds/.lock"}


def test_sources_that_are_not_files_of_records(tmp_path):
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    chr_dev = tmp_path / "zero-dev"
    os.mknod(chr_dev, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    blk_dev = tmp_path / "blk-dev"
    os.mknod(blk_dev, stat.S_IFBLK | 0o600, os.makedev(7, 200))
    sys_file = next(
        p
        for p in ("/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/uevent_seqnum", "/sys/power/state")
        if os.path.exists(p)
    )
    cases = [
        ("/dev/zero", "a character device"),
        ("/dev/null", "a character device"),
        (chr_dev, "a character device"),
        (blk_dev, "a block device"),
        (sock_path, "a socket"),
        ("/proc/cpuinfo", "procfs"),
        ("/proc/self/status", "procfs"),
        (sys_file, "sysfs"),
    ]
    try:
        for src, kind in cases:
            error_line(cli("load", src, f"lmdb://{tmp_path}/ds"), 2, str(src), kind)
            error_line(cli("load", src, f"lmdb://{tmp_path}/ds", "--layout", "docs"), 2, kind)
        error_line(run_cli("load", "/dev/zero", f"rocksdb://{tmp_path}/ds"), 2, "a character device")
        error_line(cli("ingest", f"lmdb://{tmp_path}/ds", "--from", "/proc/self"), 2, "procfs")
    finally:
        sock.close()
    assert not (tmp_path / "ds").exists()


# --- absurd counts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source,extra",
    [
        ("gen://scidb96?n=1e15", []),
        ("gen://scidb96?n=9223372036854775807", []),
        ("gen://scidb96?n=1e15", ["--format", "arrow", "--compression", "zstd"]),
        ("gen://docs?n=1e15", []),
    ],
)
def test_absurd_counts_are_refused_up_front_in_bounded_memory(source, extra, tmp_path):
    t0 = time.monotonic()
    p, rss = run_measured(["load", source, f"lmdb://{tmp_path}/ds", *extra])
    assert time.monotonic() - t0 < 30
    error_line(p, 1, "needs at least", "free on /")
    assert rss < 400 << 20, rss
    assert not (tmp_path / "ds").exists()


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize(
    "source,extra",
    [
        ("gen://scidb96?n=200000", ["--compression", "none"]),  # 18.3 MiB of records
        ("gen://scidb96?n=200000", ["--format", "arrow"]),
        ("gen://scidb96?n=3e9", []),  # compressed by default: 268 GiB / 32768 (the most any codec compresses)
        ("gen://scidb96?n=3e9", ["--format", "arrow", "--compression", "zstd"]),  # 268 GiB / 32768
        ("gen://docs?n=20000", []),  # ~15 MiB of text at its entropy
        ("gen://docs?n=20000", ["--compression", "none"]),
    ],
)
def test_a_load_that_cannot_fit_is_refused_before_writing(source, extra, tmpfs):
    line = error_line(
        cli("load", source, f"lmdb://{tmpfs}/ds", *extra),
        1,
        "needs at least",
        f"free on {tmpfs}",
        "nothing was written",
    )
    assert "8.0 MiB free" in line
    assert os.listdir(tmpfs) == []
    r = cli("load", "gen://scidb96?n=1000", f"lmdb://{tmpfs}/ds", "--shards", "1", "--workers", "1")
    assert r.exit_code == 0, r.stderr  # what fits is loaded


def test_resume_needs_only_the_space_of_what_is_left(tmp_path, monkeypatch):
    """The estimate subtracts the interrupted run's durable batches and is 0 for a
    finished source: re-running a finished load is never refused for space."""
    from loader.infra import space

    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=5000", uri, shards=1, workers=1, compression="none")
    seen = []
    real = space.check_space
    monkeypatch.setattr(
        space, "check_space", lambda root, needed, what: (seen.append(needed), real(root, needed, what))
    )
    rep = loader.load("gen://scidb96?n=5000", uri, shards=1, workers=1)
    assert rep.status == "already-loaded" and seen == [0]
    loader.load("gen://scidb96?n=5000&start=5000", uri, shards=1, workers=1)
    assert seen[-1] == 5000 * 96


# --- a fuzz of bad invocations ---------------------------------------------------------------------

SAFE_TEXT = st.text(st.characters(blacklist_characters="/~\0", blacklist_categories=("Cs",)), max_size=20).filter(
    lambda s: not s.startswith("-")
)


def bad_invocations(ds: str, tmp: str) -> dict[str, list[list[str]]]:
    """Per command: invocations each holding at least one element that must fail."""
    out_dir, fifo_free, full = tmp, f"{tmp}/no-dir/x", full_device(tmp)
    new = f"lmdb://{tmp}/new-ds"
    return {
        "load": [
            ["load", "gen://scidb96?n=abc", new],
            ["load", "gen://scidb96?n=1&n=2", new],
            ["load", "gen://x?n=1", new],
            ["load", "gen://scidb96?n=1", "mem://.."],
            ["load", "gen://scidb96?n=1", "lmdb://x?foo=1"],
            ["load", "gen://scidb96?n=1", new, "--shards", "0"],
            ["load", "/dev/zero", new],
            ["load", "/proc/cpuinfo", new],
            ["load", "gen://scidb96?n=1e15", new],
            ["load", "gen://scidb96?n=1", new, "--format", "xml"],
            ["load", "gen://scidb96?n=1", ds, "--shards", "5"],
            ["load", "gen://scidb96?n=1", f"{ds.split('?')[0]}/shard-000/x"],
            ["load", tmp, new],
            ["load", "gen://scidb96?n=1", new, "--on-bad-file", "maybe"],
            ["load", "-", "mem://a/b"],
        ],
        "ingest": [
            ["ingest", new, "--from", f"{tmp}/nope"],
            ["ingest", new, "--from", tmp, "--pattern", ""],
            ["ingest", new, "--from", tmp, "--workers", "-2"],
            ["ingest", "mem://.", "--from", tmp],
        ],
        "info": [["info", "lmdb://"], ["info", "mem://"], ["info", f"lmdb://{tmp}/nope"], ["info", "zarr://x"]],
        "verify": [["verify", "mem://no-such"], ["verify", "rocksdb://?shards=1"]],
        "export": [
            ["export", ds, "--out", out_dir],
            ["export", ds, "--out", full],
            ["export", ds, "--out", fifo_free],
            ["export", ds, "--out", f"{tmp}/x", "--format", "xml"],
            ["export", "mem://a/b", "--out", f"{tmp}/x"],
        ],
        "query": [
            ["query", ds, "--box", "i0=5"],
            ["query", ds, "--box", "i0=0:1", "--format", "xml"],
            ["query", ds, "--box", "i0=0:1", "--array", "nope"],
            ["query", ds, "--box", "zz=0:1"],
            ["query", ds, "--box", "i0=0:1", "--out", full, "--format", "csv"],
            ["query", ds, "--box", "i0=0:1", "--attrs", "nope"],
        ],
        "finalize": [
            ["finalize", ds, "--dims", "i0:0,i1:1"],
            ["finalize", ds, "--dims", "d0:5,i1:1"],
            ["finalize", ds, "--duplicates", "some"],
            ["finalize", ds, "--memory-budget", "inf"],
            ["finalize", ds, "--strategy", "fast"],
            ["finalize", ds, "--workers", "0"],
        ],
        "compact": [
            ["compact", ds, "--workers", "0"],
            ["compact", ds, "--target-batch-records", "-1"],
            ["compact", "lmdb://x?shards=zero"],
        ],
        "generate": [
            ["generate", "-1"],
            ["generate", "1e30"],
            ["generate", "5", "--impl", "java"],
            ["generate", "5", "--out", full],
            ["generate", "5", "--out", out_dir],
            ["generate", "5", "--layout", "nope"],
        ],
        "get": [["get", ds, "1"], ["get", "mem://nope", "x"]],
        "run": [["run", f"{tmp}/none.toml"], ["run", "/dev/null"], ["run", "/etc/hostname", "--set", "x"]],
        "bench": [["bench", "--suite", "nope"], ["bench", "--n", "5"], ["bench", "--out", "/etc/hostname"]],
    }


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory, grid_ds):
    tmp = str(tmp_path_factory.mktemp("fuzz"))
    return tmp, bad_invocations(grid_ds, tmp)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_bad_invocations_never_trace_back(fuzz_env, data):
    tmp, table = fuzz_env
    command = data.draw(st.sampled_from(sorted(table)))
    args = list(data.draw(st.sampled_from(table[command])))
    for _ in range(data.draw(st.integers(0, 2))):  # noise: extra words, anywhere after the command
        args.insert(data.draw(st.integers(1, len(args))), data.draw(SAFE_TEXT))
    if data.draw(st.booleans()):
        args.insert(0, data.draw(st.sampled_from(["--log-format", "--log-format=json"])))
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        r = cli(*args)
    finally:
        os.chdir(cwd)
    assert r.exception is None or isinstance(r.exception, SystemExit), (args, repr(r.exception))
    assert r.exit_code in (1, 2), (args, r.exit_code, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout, args
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("bulkload: error:")]) <= 1, r.stderr


def test_every_bad_invocation_through_the_real_binary(fuzz_env):
    """One of each command's bad invocations from the installed command: its real stderr."""
    _tmp, table = fuzz_env
    for _command, invocations in sorted(table.items()):
        p = run_cli(*invocations[0])
        assert p.returncode in (1, 2), (invocations[0], p.returncode, p.stderr)
        assert "Traceback" not in p.stderr, p.stderr
