"""`bulkload --engine dask --scheduler ...`: the JSON report names the engine, and what
cannot work is a one-line error before anything is written; dask is imported only when
the engine is dask."""

import json
import subprocess
import sys

import pytest
from helpers import run_cli

import loader


def test_load_and_finalize_on_a_local_cluster_report_the_engine(tmp_path):
    uri = f"rocksdb://{tmp_path}/ds"
    p = run_cli(
        "--engine",
        "dask",
        "--scheduler",
        "local:2",
        "load",
        "gen://scidb96?n=4000",
        uri,
        "--shards",
        2,
        "--workers",
        2,
        "--batch-records",
        500,
        "--json",
    )
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["records"] == 4000
    assert (rep["engine"], rep["scheduler"], rep["tasks_retried"]) == ("dask", "local:2", 0)
    assert 1 <= len(rep["engine_workers"]) <= 2
    p = run_cli(
        "finalize",
        uri,
        "--dims",
        "i0:10,i1:1000",
        "--json",
        env={"BULKLOAD_ENGINE": "dask", "BULKLOAD_SCHEDULER": "local:1"},
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["engine"] == "dask"
    assert loader.verify(uri).ok
    p = run_cli("compact", uri, "--json")
    assert "engine" not in json.loads(p.stdout)  # a local run's JSON is its report's, unchanged


@pytest.mark.parametrize(
    "args,env,code,message",
    [
        (["--engine", "spark"], {}, 2, "--engine must be local or dask, not 'spark'"),
        (["--engine", "dask", "--scheduler", "nowhere"], {}, 2, "--scheduler must be a Dask scheduler address"),
        (["--engine", "dask"], {}, 2, "the dask engine needs a scheduler: --scheduler tcp://HOST:PORT or local:N"),
        ([], {"BULKLOAD_ENGINE": "spark"}, 2, "environment variable BULKLOAD_ENGINE='spark' is not local or dask"),
        ([], {"BULKLOAD_SCHEDULER": "local:0"}, 2, "environment variable BULKLOAD_SCHEDULER='local:0' is not"),
        (
            ["--engine", "dask", "--scheduler", "udp://x:1"],
            {},
            2,
            "--scheduler must be a Dask scheduler address: "
            "tcp://HOST:PORT (or tls, ws, wss, ucx, inproc://), or local:N, not 'udp://x:1'",
        ),
        (
            [],
            {"BULKLOAD_ENGINE": "dask", "BULKLOAD_SCHEDULER": "udp://x:1"},
            2,
            "environment variable BULKLOAD_SCHEDULER='udp://x:1' is not a Dask scheduler address",
        ),
        (
            ["--engine", "dask", "--scheduler", "local:99999"],
            {},
            2,
            "--scheduler local:N must be at least 1 and at most 1,024 (a whole number), not 99999",
        ),
        ([], {"BULKLOAD_DASK_TIMEOUT": "soon"}, 2, "environment variable BULKLOAD_DASK_TIMEOUT='soon' is not a number"),
        (
            ["--engine", "dask", "--scheduler", "tcp://127.0.0.1:9"],
            {},
            1,
            "cannot reach the Dask scheduler at tcp://127.0.0.1:9",
        ),
    ],
)
def test_an_engine_that_cannot_work_is_a_one_line_error(tmp_path, args, env, code, message):
    p = run_cli(*args, "load", "gen://scidb96?n=100", f"lmdb://{tmp_path}/ds", env=env, timeout=60)
    assert p.returncode == code, p.stderr
    assert p.stderr.startswith("bulkload: error: ") and message in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "ds").exists()


def test_dask_is_imported_only_when_the_engine_is_dask(tmp_path):
    script = (
        "import sys\nfrom loader.cli.main import main\n"
        f"sys.argv = ['bulkload', 'load', 'gen://scidb96?n=100', 'lmdb://{tmp_path}/ds', '-q']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
