"""Outputs and standard output (issue 28, items 1, 14 and 12's full stdout).

- no output lands in a dataset: every writer (export, query, generate, a pipeline's [query]
  out, bench's directories, the Python API's ``out=``) refuses with exit 2 a path that
  resolves - directly, through a symlink, through ``..``, through a bind mount - into the
  dataset it reads, another dataset (LMDB or RocksDB), a shard of one, or a ``--replace``
  build; the datasets stay byte-identical and verify;
- ``--out -`` (and ``/dev/stdout``, ``/dev/fd/1``) writes the data to standard output,
  byte-identical to the file output; the status line goes to stderr; no file named ``-``;
- a full standard output is the one-line disk-full error (exit 1), a closed one (``| head``)
  a quiet exit 0; never a traceback or an "unexpected error".

Real stores, the real `bulkload` binary, real bind mounts (root; skipped only on EPERM).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import run_cli, tool

import loader
from loader.errors import OutputInDatasetError

from .test_hostile_input import full_device  # a private /dev/full (c 1 7)

INSIDE = "is inside the dataset directory"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """base/ds (lmdb, 2 shards, finalized: what export and query read), base/other (another
    dataset, rocksdb) and base/.old.replacing (a --replace build)."""
    from loader.arrays.finalize import finalize

    base = tmp_path_factory.mktemp("outputs")
    ds = base / "ds"
    loader.load("gen://scidb96?n=2000", f"lmdb://{ds}", shards=2, workers=1, progress="none")
    finalize(f"lmdb://{ds}", dims="i0:10,i1:1000", workers=1, progress="none")
    loader.load("gen://scidb96?n=500", f"rocksdb://{base / 'other'}", shards=1, workers=1, progress="none")
    (base / ".old.replacing").mkdir()
    return base


def snapshot(d: Path) -> dict:
    """Every name under ``d`` with the content hash of each regular file (LMDB's reader
    table lock.mdb and the reader pins change with every reader: left out)."""
    out = {}
    for root, dirs, files in os.walk(d):
        dirs[:] = [x for x in dirs if x != ".readers"]
        for name in dirs + files:
            p = Path(root, name)
            st = os.lstat(p)
            digest = None
            if stat.S_ISREG(st.st_mode) and name != "lock.mdb":
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            out[str(p.relative_to(d))] = (stat.S_IFMT(st.st_mode), digest)
    return out


def intact(site: Path, before: dict) -> None:
    assert snapshot(site) == before
    for uri in (f"lmdb://{site / 'ds'}", f"rocksdb://{site / 'other'}"):
        assert loader.verify(uri).ok, uri


@contextmanager
def bind_mount(src: Path, dst: Path):
    dst.mkdir()
    r = subprocess.run(["mount", "--bind", str(src), str(dst)], capture_output=True, text=True)
    if r.returncode != 0:
        dst.rmdir()
        if "permission denied" in r.stderr.lower() or "not permitted" in r.stderr.lower() or os.geteuid() != 0:
            pytest.skip(f"mount --bind is not permitted here (EPERM): {r.stderr.strip()}")
        raise AssertionError(f"mount --bind failed: {r.stderr}")
    try:
        yield dst
    finally:
        subprocess.run(["umount", str(dst)], check=True)
        dst.rmdir()


@contextmanager
def alias(kind: str, base: Path):
    """An output path of ``kind`` that resolves into a dataset (or a --replace build)."""
    ds = base / "ds"
    if kind == "direct":
        yield ds / "manifest.json"
    elif kind == "shard-file":
        yield ds / "shard-000" / "data.mdb"
    elif kind == "new-name":
        yield ds / "arrays" / "new.bin"
    elif kind == "dir-symlink":
        (base / "lnk").symlink_to(ds)
        try:
            yield base / "lnk" / "manifest.json"
        finally:
            (base / "lnk").unlink()
    elif kind == "file-symlink":
        (base / "out.bin").symlink_to(ds / "manifest.json")
        try:
            yield base / "out.bin"
        finally:
            (base / "out.bin").unlink()
    elif kind == "dotdot":
        (base / "sub").mkdir()
        try:
            yield Path(f"{base}/sub/../ds/shard-001/data.mdb")
        finally:
            (base / "sub").rmdir()
    elif kind == "bind-root":
        with bind_mount(ds, base / "mnt") as m:
            yield m / "manifest.json"
    elif kind == "bind-shard":
        with bind_mount(ds / "shard-000", base / "mnt") as m:
            yield m / "fresh.bin"
    elif kind == "other-dataset":
        yield base / "other" / "manifest.json"
    elif kind == "other-shard":
        yield base / "other" / "shard-000" / "fresh.bin"
    elif kind == "replacing":
        yield base / ".old.replacing" / "manifest.json"
    else:
        raise AssertionError(kind)


ALIASES = [
    "direct",
    "shard-file",
    "new-name",
    "dir-symlink",
    "file-symlink",
    "dotdot",
    "bind-root",
    "bind-shard",
    "other-dataset",
    "other-shard",
    "replacing",
]


def writers(base: Path) -> dict[str, list[str]]:
    uri = f"lmdb://{base / 'ds'}"
    return {
        "export": ["export", uri, "--format", "npy", "--out"],
        "export-arrow": ["export", uri, "--out"],
        "query": ["query", uri, "--box", "i0=0:5", "--format", "csv", "--out"],
        "generate": ["generate", "100", "--out"],
    }


def refused(r, path) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bulkload: error: --out "), r.stderr
    assert INSIDE in lines[0] and str(path) in lines[0], lines[0]


@pytest.mark.parametrize("kind", ALIASES)
def test_no_command_writes_into_a_dataset_however_the_path_is_spelled(site, kind):
    before = snapshot(site)
    with alias(kind, site) as out:
        for _name, args in writers(site).items():
            refused(run_cli(*args, out), out)
    intact(site, before)


@pytest.mark.parametrize("kind", ["direct", "dir-symlink", "dotdot", "bind-shard", "other-shard"])
def test_the_python_api_writes_into_no_dataset(site, kind):
    from loader.bench.plan import make_plan

    before = snapshot(site)
    uri = f"lmdb://{site / 'ds'}"
    with alias(kind, site) as out:
        with pytest.raises(OutputInDatasetError, match=INSIDE):
            loader.export(uri, out=str(out), format="npy")
        with pytest.raises(OutputInDatasetError, match=INSIDE):
            loader.query(uri, "i0=0:5", format="csv", out=str(out))
        with pytest.raises(OutputInDatasetError, match=INSIDE):  # bench's --out and --work directories
            make_plan("quick", out=str(out.parent / "bench-results"))
        with pytest.raises(OutputInDatasetError, match=INSIDE):
            make_plan("quick", out=str(site / "bench-ok"), work=str(out.parent / "work"))
    intact(site, before)


def test_a_pipeline_query_out_inside_a_dataset_is_refused_before_any_step(site, tmp_path):
    before = snapshot(site)
    for dataset, out in (
        (tmp_path / "new", tmp_path / "new" / "manifest.json"),
        (tmp_path / "new", site / "ds" / "shard-000" / "q.csv"),
    ):
        toml = tmp_path / "p.toml"
        toml.write_text(
            textwrap.dedent(f"""\
            dataset = "lmdb://{dataset}"
            [load]
            source = "gen://scidb96?n=100"
            [finalize]
            dims = "i0:10,i1:1000"
            [query]
            box = "i0=0:5"
            out = "{out}"
            """)
        )
        r = run_cli("run", toml)
        assert r.returncode == 2, r.stderr
        assert INSIDE in r.stderr and "[query] out" in r.stderr and "Traceback" not in r.stderr
        assert not dataset.exists()  # refused before the load step
    intact(site, before)


def test_outputs_beside_a_dataset_are_still_written(site):
    """Not a dataset: the directory holding datasets, a lone manifest.json elsewhere."""
    before = snapshot(site)
    plain = site / "plain"
    plain.mkdir(exist_ok=True)
    (plain / "manifest.json").write_text("{}")  # a common name: no sign of a dataset alone
    for target in (site / "export.npy", plain / "export.npy"):
        r = run_cli("export", f"lmdb://{site / 'ds'}", "--format", "npy", "--out", target)
        assert r.returncode == 0, r.stderr
        assert target.stat().st_size > 2000 * 96
        target.unlink()
    shutil.rmtree(plain)
    intact(site, before)


# --- standard output ------------------------------------------------------------------------------

STDOUT_WRITERS = {
    "export-arrow": ["export", "{ds}", "--format", "arrow"],
    "export-parquet": ["export", "{ds}", "--format", "parquet"],
    "export-npy": ["export", "{ds}", "--format", "npy"],
    "export-capnp": ["export", "{ds}", "--format", "capnp"],
    "query-csv": ["query", "{ds}", "--box", "i0=0:5", "--format", "csv"],
    "query-npy": ["query", "{ds}", "--box", "i0=0:5", "--format", "npy"],
    "query-arrow": ["query", "{ds}", "--box", "i0=0:5", "--format", "arrow"],
    "generate": ["generate", "5000", "--start", "7"],
}


def bulkload(args, cwd, **kw):
    kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kw}
    return subprocess.run([tool("bulkload"), *map(str, args)], cwd=cwd, timeout=120, **kw)


@pytest.mark.parametrize("writer", list(STDOUT_WRITERS))
def test_dash_and_dev_stdout_carry_exactly_the_file_output(site, writer, tmp_path):
    args = [a.format(ds=f"lmdb://{site / 'ds'}") for a in STDOUT_WRITERS[writer]]
    r = bulkload([*args, "--out", tmp_path / "file.out"], tmp_path)
    assert r.returncode == 0, r.stderr
    want = (tmp_path / "file.out").read_bytes()
    assert want
    for spelling in ("-", "/dev/stdout", "/dev/fd/1"):
        r = bulkload([*args, "--out", spelling], tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stdout == want, spelling  # the data, nothing else
        if writer.startswith("export"):
            assert f"exported 2,000 records to {spelling}" in r.stderr.decode()
    assert sorted(os.listdir(tmp_path)) == ["file.out"]  # no file named "-"

    # stdout a regular file a shell's > opened: written in place (not renamed over), status on stderr
    with open(tmp_path / "redirected", "wb") as f:
        ino = os.fstat(f.fileno()).st_ino
        r = bulkload([*args, "--out", "/dev/stdout"], tmp_path, stdout=f, stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "redirected").read_bytes() == want and os.stat(tmp_path / "redirected").st_ino == ino


def test_export_json_report_goes_to_stderr_when_the_data_is_on_stdout(site, tmp_path):
    r = bulkload(["export", f"lmdb://{site / 'ds'}", "--format", "npy", "--out", "-", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stderr)["records"] == 2000
    assert r.stdout[:6] == b"\x93NUMPY" and len(r.stdout) > 2000 * 96


FULL_STDOUT = {
    "generate": ["generate", "100000"],
    "generate-dash": ["generate", "100", "--out", "-"],
    "export-dash": ["export", "{ds}", "--format", "npy", "--out", "-"],
    "export-dev-stdout": ["export", "{ds}", "--format", "arrow", "--out", "/dev/stdout"],
    "query": ["query", "{ds}", "--box", "i0=0:5", "--format", "csv"],
    "info": ["info", "{ds}"],
    "info-json": ["info", "{ds}", "--json"],
    "verify": ["verify", "{ds}"],
    "help": ["--help"],
}


@pytest.mark.parametrize("command", list(FULL_STDOUT))
def test_a_full_stdout_is_the_one_line_disk_full_error(site, command, tmp_path):
    args = [a.format(ds=f"lmdb://{site / 'ds'}") for a in FULL_STDOUT[command]]
    before = snapshot(site)
    with open(full_device(tmp_path), "wb") as full:
        r = bulkload(args, tmp_path, stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == "bulkload: error: cannot write standard output: No space left on device"
    intact(site, before)


@pytest.mark.parametrize(
    "command",
    [
        "generate 2000000",
        "export {ds} --format npy --out -",
        "export {ds} --format arrow --out /dev/stdout",
        "query {ds} --box i0=0:10 --format csv",
        "query {ds} --box i0=0:10 --format npy",
        "info {ds} --json",
    ],
)
def test_a_closed_stdout_pipe_ends_quietly_with_exit_0(site, command):
    bash = shutil.which("bash")
    cmd = command.format(ds=f"lmdb://{site / 'ds'}")
    r = subprocess.run(
        [bash, "-c", f"'{tool('bulkload')}' {cmd} | head -c 10 > /dev/null; echo rc=${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.stdout.split() == ["rc=0"], r
    assert r.stderr == ""


def test_binary_data_is_never_written_to_a_terminal(site):
    """--out - on a terminal: binary formats refused (exit 2), as without --out."""
    import pty

    ds = f"lmdb://{site / 'ds'}"
    for args in (
        ["export", ds, "--format", "npy", "--out", "-"],
        ["generate", "10"],
        ["query", ds, "--box", "i0=0:5", "--format", "npy", "--out", "-"],
    ):
        leader, follower = pty.openpty()
        try:
            r = subprocess.run(
                [tool("bulkload"), *args], stdout=follower, stderr=subprocess.PIPE, text=True, timeout=60
            )
        finally:
            os.close(follower)
            os.close(leader)
        assert r.returncode == 2 and "terminal" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_output_descriptor_that_is_not_open_is_a_usage_error(site, tmp_path):
    r = bulkload(["generate", "10", "--out", "/dev/fd/9"], tmp_path)
    assert r.returncode == 2 and b"is not open" in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []  # nothing created
