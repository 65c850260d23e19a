"""bench/dask_engine.py runs end to end at a tiny N (its figures mean nothing at this size)."""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "dask_engine.py"


def test_bench_dask_runs_at_tiny_n(tmp_path):
    out = tmp_path / "dask.json"
    p = subprocess.run(
        [sys.executable, str(BENCH), "--n", "2000", "--repeat", "1", "--data", str(tmp_path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(out.read_text())
    for key in ("dask_vs_local", "dask_2_vs_1", "cluster_2_start_s"):
        assert r[key] > 0, key
    for row in ("local", "dask_1", "dask_2"):
        assert len(r[row]["seconds"]) == 1 and r[row]["mb_per_s"] > 0, row
    assert r["n"] == 2000 and r["interleaved"] is True
