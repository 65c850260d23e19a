"""Healthy datasets are never called damaged: a wrong scheme, a shard this user may not
read, a dataset directory moved while a job writes it are usage errors (exit 2) that say
what is wrong, and none of them advises rebuilding with ``--replace`` (advice given only
for real damage). The data stays byte-identical.

The permission test runs the CLI as an unprivileged user (``setpriv`` to nobody when the
tests run as root: root reads whatever the mode bits say).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers import manifest_json, run_cli, tool, wait_until

from tests.system import damaged_datasets
from tests.system.damaged_datasets import digest

finalized = damaged_datasets.finalized  # the fixture


def _commands(uri: str, out: Path) -> dict[str, list]:
    return {
        "info": ["info", uri],
        "verify": ["verify", uri],
        "export": ["export", uri, "--out", out],
        "query": ["query", uri, "--box", "i0=0:10,i1=0:1000"],
        "compact": ["compact", uri],
        "finalize": ["finalize", uri, "--dims", "i0:10,i1:1000"],
        "load": ["load", "gen://scidb96?n=10&start=2000", uri],
    }


def _usage_error(r, name: str, *words: str) -> None:
    assert r.returncode == 2, (name, r.returncode, r.stdout, r.stderr)
    assert "--replace" not in r.stderr and "DAMAGED" not in r.stderr and "damaged (" not in r.stderr, (name, r.stderr)
    assert "Traceback" not in r.stderr, (name, r.stderr)
    for w in words:
        assert w in r.stderr, (name, w, r.stderr)


@pytest.mark.parametrize("actual,opened_as", [("rocksdb", "lmdb"), ("lmdb", "rocksdb")])
def test_a_dataset_opened_with_the_wrong_scheme_is_a_usage_error_naming_the_right_uri(
    finalized, tmp_path, actual, opened_as
):
    root = tmp_path / "ds"
    shutil.copytree(finalized[actual], root)
    before = digest(root)
    for name, args in _commands(f"{opened_as}://{root}", tmp_path / "out.bin").items():
        r = run_cli(*args, timeout=60)
        _usage_error(r, name, f"open it as {actual}://{root}")
    assert digest(root) == before

    import loader
    from loader.errors import DatasetMismatchError

    with pytest.raises(DatasetMismatchError, match=f"open it as {actual}://"):
        loader.open(f"{opened_as}://{root}")


def _as_other_user(args: list) -> list:
    if os.geteuid() != 0:
        return args
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("running as root needs setpriv (util-linux) to test permissions as an unprivileged user")
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", *args]


@pytest.mark.parametrize("unreadable", ["shard-000", "manifest.json"])
@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_a_shard_or_manifest_this_user_may_not_read_is_a_permission_error_not_damage(finalized, scheme, unreadable):
    top = Path(tempfile.mkdtemp(prefix="bulkload-perm-"))  # outside pytest's root-only tmp tree
    try:
        os.chmod(top, 0o755)
        root = top / "ds"
        shutil.copytree(finalized[scheme], root)
        if os.geteuid() == 0:
            uid, gid = (
                int(subprocess.check_output(["id", "-u", "nobody"])),
                int(subprocess.check_output(["id", "-g", "nobody"])),
            )
            for p in [top, *top.rglob("*")]:
                os.chown(p, uid, gid)
        before = digest(root)
        mode = os.stat(root / unreadable).st_mode
        os.chmod(root / unreadable, 0)
        uri = f"{scheme}://{root}"
        for name, args in _commands(uri, top / "out.bin").items():
            r = subprocess.run(
                _as_other_user([tool("bulkload"), *map(str, args)]),
                capture_output=True,
                text=True,
                timeout=60,
                env=dict(os.environ, HOME=str(top)),
            )
            _usage_error(r, name, "ermission denied", unreadable, "fix its permissions")
        os.chmod(root / unreadable, mode)
        assert digest(root) == before
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _feed(p: subprocess.Popen, records: int, start: int) -> None:
    data = subprocess.run(
        [tool("bulkload"), "generate", str(records), "--start", str(start)], capture_output=True, check=True
    ).stdout
    try:
        p.stdin.write(data)
        p.stdin.flush()
    except BrokenPipeError:  # the load already stopped (on the move): what it says is checked
        pass


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_a_dataset_moved_during_a_load_is_a_usage_error_and_resumes_once_moved_back(tmp_path, scheme):
    root, elsewhere = tmp_path / "ds", tmp_path / "moved"
    uri = f"{scheme}://{root}"
    run_cli("load", "gen://scidb96?n=1000", uri, "--shards", "2", "-q", check=True)
    p = subprocess.Popen(
        [tool("bulkload"), "load", "-", uri, "--layout", "scidb96", "--batch-records", "1000", "-q"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, BULKLOAD_CHECKPOINT_SECONDS="0"),
    )
    try:
        _feed(p, 5000, 1000)
        wait_until(lambda: manifest_json(root)["runs"][-1]["status"] == "running", 20, "the load's run to start")
        os.rename(root, elsewhere)
        _feed(p, 5000, 6000)
        with contextlib.suppress(BrokenPipeError):
            p.stdin.close()
        err = p.stderr.read().decode()
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 2, err
    assert "was moved" in err and "--replace" not in err and "damaged (" not in err, err
    os.rename(elsewhere, root)
    r = run_cli("verify", uri, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
