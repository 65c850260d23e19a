"""A stop signal in the first ~100 ms of any command - while bulkload's modules are
imported and typer parses - is a quiet exit, never a traceback (issue 28 item 12): exit
130 (or 0 when the command had already finished), nothing on stderr but bulkload's own
one line.

Out of reach: a signal before bulkload's first line runs (loader/cli/__init__.py main) -
while the interpreter itself starts (site's .pth files: "Fatal Python error:
init_import_site") or the console script imports the ``loader`` package - is Python's:
killed by SIGINT, or its start-up error with a traceback of no bulkload module beyond
loader/__init__.py. Those deliveries are told apart by that traceback and allowed."""

import re
import signal
import subprocess
import time

import pytest
from helpers import tool

import loader

DELAYS_MS = range(0, 101, 10)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    uri = f"lmdb://{tmp_path_factory.mktemp('early')}/ds"
    loader.load("gen://scidb96?n=2000", uri, shards=1)
    return uri


@pytest.mark.parametrize("command", ["info", "load", "verify", "compact", "help"])
def test_sigint_at_start_up_is_a_quiet_exit_130(dataset, tmp_path, command):
    args = {
        "info": ["info", dataset],
        "verify": ["verify", dataset],
        "compact": ["compact", dataset],
        "load": ["load", "gen://scidb96?n=1000", f"lmdb://{tmp_path}/new", "-q"],
        "help": ["--help"],
    }[command]
    for delay in DELAYS_MS:
        p = subprocess.Popen([tool("bulkload"), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay / 1000)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        if before_bulkload_code(p.returncode, err):
            continue
        assert "Traceback" not in err, (delay, err)
        assert p.returncode in (0, 130), (delay, p.returncode, err)
        assert all(ln.startswith("bulkload: error: interrupted by SIGINT") for ln in err.splitlines()), (delay, err)


def before_bulkload_code(returncode: int, err: str) -> bool:
    """The signal came before bulkload's first line ran (the module docstring): Python's."""
    if returncode == -signal.SIGINT and not err:
        return True
    return "KeyboardInterrupt" in err and not re.search(r'File "[^"]*/loader/(?!__init__\.py")', err)
