"""Dask workers that cannot work, through the CLI: a one-line error naming the cause,
exit 1, nothing written. Real cases: a worker whose Python cannot import bulkload
(`python -S` with only the venv's site-packages on its path: the editable install's .pth
is not read) and a worker that cannot see the dataset's directory (its own mount
namespace with an empty tmpfs over the directory: a path only the coordinator has, as
on a host without the shared filesystem). A worker that runs in another working
directory still gets the absolute path of a relative dataset."""

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import manifest_json, run_cli

import loader
from loader.errors import EngineError

VENV_BIN = Path(sys.executable).parent
SITE = next(Path(sys.executable).parents[1].glob("lib/python3*/site-packages"))


@pytest.fixture(scope="module")
def scheduler():
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=True, dashboard_address=None) as c:
        yield c


@contextmanager
def one_worker(scheduler, argv, env=None, cwd=None):
    """A worker process of ``scheduler`` started by ``argv`` (the scheduler's only worker)."""
    from distributed import Client

    p = subprocess.Popen(
        [*argv, scheduler.scheduler_address, "--no-nanny", "--nthreads", "1", "--no-dashboard"],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with Client(scheduler) as c:
            c.wait_for_workers(1, timeout=120)
        yield
    finally:
        p.kill()
        p.wait(30)
        with Client(scheduler) as c:  # the scheduler forgets it before the next test
            c.retire_workers(list(c.scheduler_info()["workers"]), close_workers=False)


def cli_fails(scheduler, uri, *message):
    p = run_cli(
        "--engine",
        "dask",
        "--scheduler",
        scheduler.scheduler_address,
        "load",
        "gen://scidb96?n=2000",
        uri,
        "--shards",
        2,
        "--workers",
        1,
        timeout=90,
    )
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("bulkload: error: ") and len(p.stderr.strip().splitlines()) == 1, p.stderr
    for text in message:
        assert text in p.stderr, p.stderr


def test_a_worker_that_cannot_import_bulkload(tmp_path, scheduler):
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(SITE)}  # dask, not bulkload (its .pth is not read)
    with one_worker(scheduler, [sys.executable, "-S", "-m", "distributed.cli.dask_worker"], env=env, cwd=tmp_path):
        cli_fails(
            scheduler,
            f"lmdb://{tmp_path}/ds",
            "cannot import bulkload (No module named 'loader')",
            "pip install 'bulkload[dask]'",
        )
    assert not (tmp_path / "ds").exists()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_a_worker_that_cannot_see_the_dataset(tmp_path, scheduler):
    shared = tmp_path / "shared"
    shared.mkdir()
    worker = f'mount -t tmpfs none {shared} && exec {VENV_BIN / "dask"} worker "$@"'
    with one_worker(scheduler, ["unshare", "-m", "--propagation", "private", "sh", "-c", worker, "sh"]):
        for uri in (f"lmdb://{shared}/ds", f"rocksdb://{shared}/old"):
            if "old" in uri:
                loader.load("gen://scidb96?n=100", uri)
                before = manifest_json(shared / "old")
            cli_fails(
                scheduler,
                uri,
                "cannot see the dataset's directory",
                str(shared / "old") if "old" in uri else f"{shared} (it is another directory there)",
                "a filesystem every worker sees at the same path",
            )
    assert sorted(os.listdir(shared)) == ["old"]
    assert manifest_json(shared / "old") == before


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_a_read_on_a_worker_that_cannot_see_the_dataset_names_the_worker_and_the_path(tmp_path, scheduler):
    from distributed import Client

    shared = tmp_path / "shared"
    shared.mkdir()
    uri = f"lmdb://{shared}/ds"
    loader.load("gen://scidb96?n=1000", uri, batch_records=500)
    loader.finalize(uri, dims="i0:5,i1:1000", workers=1, compact=False)
    worker = f'mount -t tmpfs none {shared} && exec {VENV_BIN / "dask"} worker "$@"'
    with (
        one_worker(scheduler, ["unshare", "-m", "--propagation", "private", "sh", "-c", worker, "sh"]),
        Client(scheduler) as client,
        loader.open(uri) as ds,
    ):
        (address,) = client.scheduler_info()["workers"]
        for collection in (ds.to_dask_dataframe(), ds.to_dask_array("grid", attr="i3", fill=-7)):
            with pytest.raises(EngineError) as e:
                client.compute(collection, sync=True)
            assert str(e.value).startswith(f"the Dask worker at {address} (host ")
            assert f"cannot see the dataset's directory {shared}/ds (it does not exist there" in str(e.value)
            assert "a filesystem every worker sees at the same path" in str(e.value)


def test_a_relative_dataset_reaches_a_worker_in_another_directory(tmp_path, scheduler):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "rel").mkdir()
    with one_worker(scheduler, [str(VENV_BIN / "dask"), "worker"], cwd=elsewhere):
        p = subprocess.run(
            [
                str(VENV_BIN / "bulkload"),
                "--engine",
                "dask",
                "--scheduler",
                scheduler.scheduler_address,
                "load",
                "gen://scidb96?n=2000",
                "lmdb://rel/ds",
                "--shards",
                "2",
                "--workers",
                "1",
                "-q",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert p.returncode == 0, p.stderr
    assert loader.verify(f"lmdb://{tmp_path}/rel/ds").records == 2000
    assert not (elsewhere / "rel").exists()
