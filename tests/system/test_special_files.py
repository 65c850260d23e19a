"""Special files inside a dataset: never opened, never read until memory runs out.

A FIFO, a link to /dev/zero or /dev/null, or a ``mknod`` character device put where
bulkload expects one of its own files (the manifest, LMDB's data.mdb / lock.mdb, RocksDB's
files, an array's chunk index) is named as damage: every command ends within seconds
(exit 1, one line naming the file, no traceback) instead of waiting on the FIFO forever,
reading /dev/zero until the OOM killer, or ignoring SIGTERM. Every command runs under a
subprocess timeout, so that a hang fails the test.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import run_cli, tool

from tests.system import damaged_datasets

SPECIALS = {
    "fifo": lambda p: os.mkfifo(p),
    "dev-zero-link": lambda p: os.symlink("/dev/zero", p),
    "char-device": lambda p: os.mknod(p, 0o600 | 0o020000, os.makedev(1, 5)),  # a /dev/zero node
}

# (backend, file inside the dataset, what is put there); INDEX: the array's chunk index
CASES = [
    ("lmdb", "manifest.json", "fifo"),
    ("lmdb", "manifest.json", "dev-zero-link"),
    ("lmdb", "manifest.json", "char-device"),
    ("lmdb", "shard-000/data.mdb", "fifo"),
    ("lmdb", "shard-000/data.mdb", "dev-zero-link"),
    ("lmdb", "shard-001/lock.mdb", "fifo"),
    ("lmdb", "INDEX", "fifo"),
    ("lmdb", "INDEX", "char-device"),
    ("rocksdb", "shard-000/CURRENT", "fifo"),
    ("rocksdb", "shard-001/OPTIONS", "char-device"),
    ("rocksdb", "INDEX", "dev-zero-link"),
]

finalized = damaged_datasets.finalized  # the fixture


def _target(root: Path, name: str) -> Path:
    if name == "INDEX":
        return next((root / "arrays").glob("*.arrow"))
    if name.endswith("OPTIONS"):
        return next((root / os.path.dirname(name)).glob("OPTIONS-*"))
    return root / name


@pytest.mark.parametrize("scheme,name,special", CASES)
def test_a_special_file_inside_a_dataset_is_named_not_waited_on(finalized, tmp_path, scheme, name, special):
    root = tmp_path / "ds"
    shutil.copytree(finalized[scheme], root)
    target = _target(root, name)
    target.unlink()
    SPECIALS[special](target)
    try:
        _every_command_names(root, scheme, name, target)
    finally:
        target.unlink()  # no device node or FIFO is left behind in the kept tmp dirs


def _every_command_names(root: Path, scheme: str, name: str, target: Path) -> None:
    uri = f"{scheme}://{root}"
    commands = {
        "verify": ["verify", uri],
        "info": ["info", uri],
        "query": ["query", uri, "--box", "i0=0:10,i1=0:1000"],
        "compact": ["compact", uri],
        "load": ["load", "gen://scidb96?n=10&start=2000", uri],
    }
    for cmd, args in commands.items():
        r = run_cli(*args, timeout=30)  # the old code waited here forever (a FIFO) or until OOM
        assert "Traceback" not in r.stderr, (cmd, r.stderr)
        assert r.returncode in (0, 1), (cmd, r.returncode, r.stderr)
        if cmd == "verify" or (name == "manifest.json") or (name == "INDEX" and cmd == "query"):
            assert r.returncode == 1, (cmd, r.stdout, r.stderr)
        if r.returncode == 1 and cmd != "verify":
            assert target.name in r.stderr and ("FIFO" in r.stderr or "device" in r.stderr), (cmd, r.stderr)
    assert not stat_is_regular(target)  # nothing replaced the special file with data


def stat_is_regular(p: Path) -> bool:
    import stat

    return stat.S_ISREG(os.stat(p).st_mode)


def test_a_query_waiting_on_nothing_obeys_sigterm(finalized, tmp_path):
    """A query of an array whose index is a FIFO ends at once; and a SIGTERM sent while it
    runs ends it within seconds (it ignored SIGTERM for minutes)."""
    root = tmp_path / "ds"
    shutil.copytree(finalized["lmdb"], root)
    index = _target(root, "INDEX")
    index.unlink()
    os.mkfifo(index)
    p = subprocess.Popen(
        [tool("bulkload"), "query", f"lmdb://{root}", "--box", "i0=0:10,i1=0:1000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:  # refused at once; one blocked on the FIFO is stopped as a user would
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
    try:
        _out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("query of an array whose index is a FIFO ignored SIGTERM")
    assert p.returncode == 1, (p.returncode, err)
    assert "FIFO" in err and index.name in err
    index.unlink()
