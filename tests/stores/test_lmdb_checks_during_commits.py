"""The checks of an LMDB data file made before it is mapped (a shard's, the catalog's) while
another process commits to it: never a false "truncated". They read the meta pages before
the file's size (a commit only grows the file); taken the other way round, a size from
before a commit met that commit's meta page and a healthy file was refused as damaged -
a reader of a dataset being loaded, descheduled between the two calls (seen in a full
test run; here every check of ~2 s of checks failed within the first second)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import lmdb
import pytest

from loader.model.catalog import data_problem
from loader.stores.lmdb_files import data_file_problem


def _commit_until(path: str, stop, started) -> None:
    # sync=False: a commit's page writes and its meta page come microseconds apart, not an
    # fsync apart, so a check that reads them in the wrong order meets one often
    env = lmdb.open(path, map_size=1 << 30, subdir=True, sync=False)
    i = 0
    while not stop.is_set():
        with env.begin(write=True) as txn:
            txn.put(b"k%09d" % i, b"x" * 3000)  # an overflow page a commit: the file grows
        i += 1
        if i == 10:
            started.set()
    env.close()


@pytest.mark.parametrize("check", [data_problem, data_file_problem], ids=["catalog", "shard"])
def test_a_file_growing_under_commits_is_never_called_truncated(tmp_path, check):
    path = str(tmp_path / "env")
    lmdb.open(path, map_size=1 << 30).close()
    ctx = mp.get_context("fork")
    stop, started = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_commit_until, args=(path, stop, started))
    p.start()
    found, checks = [], 0
    try:
        assert started.wait(30)
        end = time.monotonic() + 2
        while time.monotonic() < end and not found:
            problem = check(os.path.join(path, "data.mdb"))
            checks += 1
            if problem is not None:
                found.append(problem)
    finally:
        stop.set()
        p.join(30)
    assert p.exitcode == 0
    assert checks > 100 and not found, found
    size = os.path.getsize(os.path.join(path, "data.mdb"))
    assert size > 100 * 4096  # the file grew while it was checked
