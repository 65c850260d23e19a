"""`bulkload bench --only` and `--work` (loader/cli/bench.py over the split suite): a section
name runs only that section, figure ids measure only those figures (the others are "not
selected", and not listed as skipped), and the work directory is where --work says and is
removed afterwards. Small N, one repeat; shapes only."""

from __future__ import annotations

import json

from helpers import run_cli

from loader.bench.report import validate

LIMITS = {
    "gen-devnull",
    "gen-parallel-devnull",
    "gen-pipe",
    "gen-file",
    "gen-file-fsync",
    "gen-shm",
    "gen-parallel-shm",
    "c-fill",
    "npsave-fsync",
    "npload",
    "cold-read",
}


def bench(tmp_path, *args):
    p = run_cli(
        "bench", "--n", 1000, "--repeats", 1, "--out", tmp_path / "out", "--json", "--quiet", *args, timeout=180
    )
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert validate(res) == []
    return res


def test_only_a_section(tmp_path):
    res = bench(tmp_path, "--only", "limits", "--work", tmp_path / "work")
    assert set(res["figures"]) == LIMITS and res["parameters"]["sections"] == ["limits"]
    assert all(f["status"] == "ok" for f in res["figures"].values())
    assert res["skipped"] == []
    assert list((tmp_path / "work").iterdir()) == []  # the run's work directory was there, and is gone
    assert res["machine"]["filesystem"]["path"].startswith(str(tmp_path / "work"))
    named = {"history.jsonl", "limits.json", "limits.md"}  # a section's run is named after it, not the suite
    assert named <= {p.name for p in (tmp_path / "out").iterdir()} and not (tmp_path / "out" / "quick.json").exists()


def test_only_figure_ids(tmp_path):
    res = bench(tmp_path, "--only", "gen-pipe, load-mem-capnp")
    figs = res["figures"]
    assert {k for k, f in figs.items() if f["status"] == "ok"} == {"gen-pipe", "load-mem-capnp"}
    assert {"finalize-w1", "peer-lmdb-per-record", "load-lmdb-capnp-w1"} <= set(figs)  # every section declared
    assert all(f["reason"] == "not selected" for k, f in figs.items() if k not in ("gen-pipe", "load-mem-capnp"))
    assert figs["load-mem-capnp"]["ratio_to_limit"] is None  # its limit (gen-shm) was not measured
    md = (tmp_path / "out" / "quick-figures.md").read_text()  # a partial run: not quick.md
    assert "## Skipped or failed" not in md and "| bulkload-gen | cat > /dev/null |" not in md
    assert "| bulkload-gen \\| cat > /dev/null | 1,000 |" in md
