"""Two loads creating one new dataset at the same moment: one loads, the other is told
the dataset is busy (exit 3) or finds the run already done (exit 0) - never a usage
error from the race between its "is it a directory?" and its mkdir (loading/options.py
`prepare_root`). Real processes, raced many times."""

import json
import subprocess
import sys

from helpers import tool

import loader

from .test_faults import gen_bytes

ROUNDS = 20


def test_two_loads_creating_one_dataset_race_to_busy_or_done_never_usage(tmp_path):
    args = ["load", "gen://scidb96?n=200", "--shards", 1, "--workers", 1, "-q"]
    outcomes = []
    for i in range(ROUNDS):
        uri = f"lmdb://{tmp_path}/ds{i}"
        procs = [
            subprocess.Popen(
                [tool("bulkload"), *map(str, args[:2]), uri, *map(str, args[2:])],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        res = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        codes = sorted(c for c, _ in res)
        assert codes in ([0, 0], [0, 3]), res
        assert all("Traceback" not in err for _, err in res)
        outcomes.append(tuple(codes))
        with loader.open(uri) as ds:
            assert ds.verify().ok and ds.read_records().tobytes() == gen_bytes(0, 200)
            assert [r["status"] for r in ds.info()["runs"]] == ["done"]
    print(json.dumps({str(k): outcomes.count(k) for k in set(outcomes)}))


#: runs the real CLI with the other job's mkdir landing exactly between this job's
#: "is it a directory?" and its own mkdir (an audit hook sees os.mkdir before it runs)
OTHER_JOB_WINS = """
import os, sys
target, done = sys.argv[1], []
def hook(event, args):
    if event == "os.mkdir" and os.fspath(args[0]) == target and not done:
        done.append(1)
        os.mkdir(target)  # the other job's
sys.addaudithook(hook)
from loader.cli import main
sys.argv = ["bulkload", *sys.argv[2:]]
main()
"""


def test_a_dataset_directory_made_by_another_job_in_the_race_window_is_used(tmp_path):
    target = str(tmp_path / "ds")
    p = subprocess.run(
        [sys.executable, "-c", OTHER_JOB_WINS, target, "load", "gen://scidb96?n=200", f"lmdb://{target}", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    with loader.open(f"lmdb://{target}") as ds:
        assert ds.verify().ok and ds.read_records().tobytes() == gen_bytes(0, 200)
