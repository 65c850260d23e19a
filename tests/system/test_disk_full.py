"""Disk full during finalize and compact (issue 28 #12), on a small tmpfs mounted here.

A finalize or compact whose output cannot fit is refused before it writes (the disk-full
message loads give: "... needs at least X, Y free on MOUNT"); one that runs out of space
midway (a lower bound passed) says "write failed ... No space left on device" and gives
the space it took back. Either way: exit 1, one line, no traceback; the dataset stays at
its last commit (verify ok) and the same command runs once space is freed.
"""

import os
import shutil
import subprocess

import pytest
from helpers import run_cli

import loader

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def fs(tmp_path):
    d = tmp_path / "fs"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(d)], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def used(d) -> int:
    return shutil.disk_usage(d).used


def grow(d, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(d)], check=True)


def failed_line(p) -> str:
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and "unexpected error" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def intact(uri: str, runs_before: int) -> None:
    p = run_cli("verify", uri)
    assert p.returncode == 0 and ": ok" in p.stdout, p.stdout + p.stderr
    with loader.open(uri) as ds:
        assert not ds.manifest.arrays and len(ds.manifest.runs) <= runs_before + 1


def test_a_finalize_that_cannot_fit_is_refused_before_it_writes(fs):
    uri = f"lmdb://{fs}/ds"
    assert run_cli("load", "gen://scidb96?n=600000", uri, "--shards", "2", "-q").returncode == 0  # lz4: ~2 MB
    before = used(fs)
    line = failed_line(run_cli("finalize", uri, "-q"))  # the array's cells are not compressed: ~55 MiB
    assert "finalize of 600,000 records into array 'grid' needs at least 54.9 MiB" in line
    assert f"free on {fs}" in line and "(nothing was written)" in line
    assert used(fs) == before
    intact(uri, 1)
    grow(fs, "96m")
    assert run_cli("finalize", uri, "-q").returncode == 0


def test_a_finalize_that_runs_out_midway_gives_the_space_back(fs):
    uri = f"lmdb://{fs}/ds"
    assert run_cli("load", "gen://scidb96?n=600000", uri, "--shards", "2", "-q").returncode == 0
    before = used(fs)
    # duplicates first may drop cells: no lower bound, the build starts and fills the disk
    line = failed_line(run_cli("finalize", uri, "-q", "--duplicates", "first"))
    assert "write failed" in line and "No space left on device" in line
    assert "the dataset is unchanged since its last commit" in line
    assert used(fs) <= before + (256 << 10)  # the build's pages are given back
    assert not [n for n in os.listdir(fs / "ds") if n.startswith((".finalize-", "shard-000.", "shard-001."))]
    intact(uri, 2)
    grow(fs, "96m")
    assert run_cli("finalize", uri, "-q", "--duplicates", "first").returncode == 0


def test_a_compact_that_cannot_fit_is_refused_before_it_writes(fs):
    uri = f"lmdb://{fs}/ds"
    p = run_cli(
        "load", "gen://scidb96?n=200000", uri, "--shards", "2", "-q", "--batch-records", "500", "--compression", "none"
    )  # ~19 MB
    assert p.returncode == 0, p.stderr
    before = used(fs)
    line = failed_line(run_cli("compact", uri, "-q", "--target-batch-records", "10000"))
    assert "compact needs at least 27.5 MiB" in line and "(nothing was written)" in line
    assert used(fs) == before
    intact(uri, 1)
    grow(fs, "64m")
    assert run_cli("compact", uri, "-q", "--target-batch-records", "10000").returncode == 0
    with loader.open(uri) as ds:
        assert len(ds.manifest.batches) == 20
