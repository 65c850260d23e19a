"""A script without an ``if __name__ == "__main__":`` guard that loads on a LocalCluster
the library starts (``scheduler="local:N"``) loads once: the cluster's worker processes
never run the caller's ``__main__`` (infra/dask_local.py, issue 28 item 4)."""

import json
import subprocess
import sys

from helpers import run_cli

import loader


def test_unguarded_script_on_a_local_cluster_loads_once(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    (tmp_path / "script.py").write_text(
        "import loader\n"
        f"r = loader.load('gen://scidb96?n=1000', {uri!r}, shards=2, engine='dask', scheduler='local:2')\n"
        "print(r.records)\n"
    )
    p = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0 and p.stdout.split() == ["1000"]
    info = json.loads(run_cli("info", uri, "--json", check=True).stdout)
    assert info["records"] == 1000
    assert [(r["kind"], r["status"]) for r in info["runs"]] == [("load", "done")]


def test_generator_defined_in_an_unguarded_script_loads_once_on_dask(tmp_path):
    """The generator goes to the Dask workers by value inside the task (sources/user_gen.py):
    one run of its records, the script's top-level code run once, no worker importing it."""
    import numpy as np

    uri = f"lmdb://{tmp_path}/ds"
    (tmp_path / "script.py").write_text(
        "import sys\nimport numpy as np\nimport loader\nSCRIPT_MARK = True\nprint('top-level code ran')\n"
        "def gen(start, n):\n"
        "    assert not hasattr(sys.modules['__main__'], 'SCRIPT_MARK'), 'a worker imported the script'\n"
        "    return np.arange(start, start + n, dtype=np.int64).astype([('key', '<i8')])\n"
        f"r = loader.load(loader.generator(gen, n=1000, start=3), {uri!r}, shards=2, engine='dask', "
        "scheduler='local:2')\nprint(r.records)\n"
    )
    p = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0 and p.stdout.splitlines() == ["top-level code ran", "1000"]
    info = json.loads(run_cli("info", uri, "--json", check=True).stdout)
    assert [(r["kind"], r["status"]) for r in info["runs"]] == [("load", "done")]
    with loader.open(uri) as ds:
        assert ds.read_records(0, 1000)["key"].tolist() == np.arange(3, 1003).tolist()
