"""A load that will surely fork workers starts the pool's forkserver as the API call begins
(loading/early_pool.py), before the loading modules are imported; one that may run
in-process, runs on Dask, or reads a stream starts nothing early (the run's own prewarm
decides then, execute.prewarm)."""

import os
import subprocess
import sys

import pytest

from loader.loading.early_pool import IN_PROCESS_COMPRESSED_BYTES, sum_bytes

CHILD = """
import sys, threading
from multiprocessing import forkserver
from loader.loading.early_pool import prewarm_early
dataset, source, workers, engine = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]) or None, sys.argv[4] or None
prewarm_early(dataset, source, workers, engine, None)
while waiting := [t for t in threading.enumerate() if t.name == "bulkload-prewarm"]:
    waiting[0].join(30)
started = forkserver._forkserver._forkserver_pid is not None
print("started" if started else "none")
"""


def early(dataset: str, source: str, workers: int = 0, engine: str = "", variable: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "BULKLOAD_ENGINE"}
    p = subprocess.run(
        [sys.executable, "-c", CHILD, dataset, source, str(workers), engine],
        capture_output=True,
        text=True,
        timeout=60,
        env=env if variable is None else env | {"BULKLOAD_ENGINE": variable},
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


BIG = "gen://scidb96?n=2e7"  # 1.92 GB: more than any run takes in-process


@pytest.mark.parametrize(
    ("dataset", "source", "workers", "engine", "want"),
    [
        ("lmdb:///x/ds", BIG, 0, "", "started"),
        ("lmdb:///x/ds", "gen://scidb96?n=1000", 2, "", "started"),  # --workers: always the pool
        ("lmdb:///x/ds", "gen://scidb96?n=1000", 0, "", "none"),  # in-process
        ("lmdb:///x/ds", "gen://scidb96?n=10_000_000", 0, "", "none"),  # 0.96 GB compressed: in-process threads
        ("lmdb:///x/ds", BIG, 0, "dask", "none"),
        ("mem://x", BIG, 0, "", "none"),  # a mem:// dataset open in this process runs in it
        ("lmdb:///x/ds", f"-,{BIG}", 0, "", "none"),  # a stream
        ("lmdb:///x/ds", "gen://no-such-layout?n=2e9", 0, "", "none"),  # unknown: the run decides
        ("lmdb:///x/ds", "/no/such/file", 0, "", "none"),
    ],
)
def test_a_load_that_will_fork_workers_starts_the_forkserver_early(dataset, source, workers, engine, want):
    assert early(dataset, source, workers, engine) == want


@pytest.mark.parametrize(("variable", "want"), [("LOCAL", "started"), ("dask", "none"), ("bogus", "none")])
def test_the_engine_variable_is_read_as_the_run_reads_it(variable, want):
    assert early("lmdb:///x/ds", BIG, variable=variable) == want
    assert early("lmdb:///x/ds", BIG, engine="local", variable=variable) == "started"  # given: it wins


def test_sources_are_sized_by_their_records_or_their_files(tmp_path):
    f = tmp_path / "raw.bin"
    f.write_bytes(b"\0" * 96 * 10)
    assert sum_bytes([BIG, str(f)]) == 20_000_000 * 96 + 960
    assert sum_bytes(["gen://ticks?n=1e6"]) == 41_000_000
    assert sum_bytes([str(tmp_path)]) == 0  # a directory, a glob, a URI: not known here
    assert sum_bytes(["s3://bucket/x"]) == 0
    assert IN_PROCESS_COMPRESSED_BYTES < 20_000_000 * 96
