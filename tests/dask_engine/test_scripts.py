"""A script without an ``if __name__ == "__main__":`` guard that loads on a LocalCluster
the library starts (``scheduler="local:N"``) loads once: the cluster's worker processes
never run the caller's ``__main__`` (infra/dask_local.py, issue 28 item 4)."""

import json
import subprocess
import sys

from conftest import run_cli


def test_unguarded_script_on_a_local_cluster_loads_once(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    (tmp_path / "script.py").write_text(
        "import loader\n"
        f"r = loader.load('gen://scidb96?n=1000', {uri!r}, shards=2, engine='dask', scheduler='local:2')\n"
        "print(r.records)\n")
    p = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0 and p.stdout.split() == ["1000"]
    info = json.loads(run_cli("info", uri, "--json", check=True).stdout)
    assert info["records"] == 1000
    assert [(r["kind"], r["status"]) for r in info["runs"]] == [("load", "done")]
