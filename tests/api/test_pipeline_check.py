"""A pipeline checks every value of every step before its first step runs (issue 28 #11).

Parametrized over the pipeline SCHEMA: for every step and every key, a bad value is
refused (exit 2, one line naming the file, the table and the key) and the dataset
directory does not change - not after the load committed. Also: the shipped pipelines
check, and every path they name exists or is made by the run.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import run_cli, tool

import loader
from loader.api.pipeline import SCHEMA

REPO = Path(__file__).resolve().parents[2]

#: a bad value of every key (a wrong type where the key takes any value of its type)
BAD = {
    ("job", "dataset"): "nosuch://x",
    ("job", "layout"): "nosuchlayout",
    ("job", "format"): "feather",
    ("job", "compression"): "brotli",
    ("job", "shards"): 0,
    ("job", "workers"): 0,
    ("job", "batch_records"): 0,
    ("job", "checkpoint_seconds"): -1.0,
    ("job", "quiet"): "maybe",
    ("job", "name"): 7,
    ("job", "engine"): "spark",
    ("job", "scheduler"): "nowhere",
    ("job", "keep_runs"): -1,
    ("load", "source"): "gen://nosuchlayout?n=10",
    ("load", "new_run"): "maybe",
    ("load", "replace"): "maybe",
    ("load", "on_bad_file"): "ignore",
    ("load", "enabled"): "maybe",
    ("ingest", "from"): "no-such-dir",
    ("ingest", "pattern"): "",
    ("ingest", "on_bad_file"): "ignore",
    ("ingest", "enabled"): "maybe",
    ("compact", "target_batch_records"): 0,
    ("compact", "force"): "maybe",
    ("compact", "keep_snapshots"): -1,
    ("compact", "enabled"): "maybe",
    ("finalize", "dims"): "i0:0,i1:10",
    ("finalize", "array"): "9grid",
    ("finalize", "duplicates"): "bogus",
    ("finalize", "compact"): "maybe",
    ("finalize", "workers"): 0,
    ("finalize", "memory_budget"): "lots",
    ("finalize", "strategy"): "bogus",
    ("finalize", "compression"): "brotli",
    ("finalize", "force"): "maybe",
    ("finalize", "keep_snapshots"): -1,
    ("finalize", "enabled"): "maybe",
    ("query", "box"): "i0=a:b",
    ("query", "array"): "nosuch",
    ("query", "attrs"): "nosuch",
    ("query", "format"): "xml",
    ("query", "out"): "no-such-dir/box.csv",
    ("query", "enabled"): "maybe",
}
KEYS = [(s, k) for s in SCHEMA for k in SCHEMA[s]]


def test_every_key_of_the_schema_has_a_bad_value():
    assert sorted(BAD) == sorted(KEYS)


def pipeline(tmp_path, source_step: str, bad: tuple | None = None) -> Path:
    """A pipeline of every step on lmdb://TMP/ds, with ``bad``'s value in its place."""
    (tmp_path / "in").mkdir(exist_ok=True)
    values = {
        "job": {"dataset": f"lmdb://{tmp_path}/ds", "shards": 2, "workers": 1, "batch_records": 500},
        "load": {"source": "gen://scidb96?n=3000&start=2000"},
        "ingest": {"from": str(tmp_path / "in"), "pattern": "*.bin"},
        "compact": {},
        "finalize": {"dims": "i0:10,i1:1000", "duplicates": "error"},
        "query": {"box": "i0=0:2,i1=0:100", "attrs": "d0", "format": "csv", "out": str(tmp_path / "box.csv")},
    }
    del values["ingest" if source_step == "load" else "load"]
    if bad is not None:
        values.setdefault(bad[0], {})[bad[1]] = BAD[bad]
    lines = []
    for section, keys in values.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml(v)}" for k, v in keys.items()]
    f = tmp_path / "p.toml"
    f.write_text("\n".join(lines) + "\n")
    return f


def _toml(v) -> str:
    return f'"{v}"' if isinstance(v, str) else str(v)


def tree(root: Path) -> dict:
    """Every file under root: (size, mtime_ns, content); not LMDB's reader tables
    (lock.mdb), which every reader writes."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "lock.mdb"
    }


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """A dataset of 2,000 records with an array 'grid': copied by each test."""
    d = tmp_path_factory.mktemp("base")
    loader.load("gen://scidb96?n=2000", f"lmdb://{d}/ds", shards=2, workers=1, batch_records=500)
    loader.finalize(f"lmdb://{d}/ds", dims="i0:10,i1:1000", workers=1)
    return d / "ds"


@pytest.mark.parametrize("source_step", ["load", "ingest"])
def test_a_pipeline_of_good_values_runs(tmp_path, loaded, source_step):
    shutil.copytree(loaded, tmp_path / "ds")
    p = run_cli("run", pipeline(tmp_path, source_step))
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("bad", KEYS, ids=[f"{s}.{k}" for s, k in KEYS])
def test_a_bad_value_of_any_step_is_refused_before_anything_is_written(tmp_path, loaded, bad):
    shutil.copytree(loaded, tmp_path / "ds")
    before = tree(tmp_path / "ds")
    f = pipeline(tmp_path, "ingest" if bad[0] == "ingest" else "load", bad)
    p = run_cli("run", f)
    assert p.returncode == 2, p.stderr
    line = p.stderr.strip()
    assert "\n" not in line and line.startswith(f"bulkload: error: {f}"), line
    assert f"[{bad[0]}]" in line and re.search(rf"\b{bad[1]}\b", line), line
    assert "Traceback" not in p.stderr
    assert tree(tmp_path / "ds") == before
    assert not (tmp_path / "box.csv").exists()


def test_a_bad_value_from_set_or_the_environment_names_it(tmp_path, loaded):
    shutil.copytree(loaded, tmp_path / "ds")
    before = tree(tmp_path / "ds")
    f = pipeline(tmp_path, "load")
    p = run_cli("run", f, "--set", "finalize.duplicates=bogus")
    assert p.returncode == 2 and f"{f}: --set finalize.duplicates: [finalize] duplicates" in p.stderr
    p = run_cli("run", f, env={"BULKLOAD_QUERY_FORMAT": "xml"})
    assert p.returncode == 2
    assert f"{f}: environment variable BULKLOAD_QUERY_FORMAT: [query] format" in p.stderr
    assert tree(tmp_path / "ds") == before


def test_check_runs_nothing(tmp_path):
    f = pipeline(tmp_path, "load")
    p = run_cli("run", "--check", f)
    assert p.returncode == 0, p.stderr
    assert "ok (load -> compact -> finalize -> query" in p.stdout
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "pipelines").glob("*.toml")))
def test_shipped_pipelines_check_and_name_only_files_that_exist(tmp_path, name):
    """From a fresh working directory holding only the directories the pipeline's comments
    say to create: `run --check` passes; every repository file its comments name exists."""
    text = (REPO / "pipelines" / name).read_text()
    for ref in re.findall(r"[\w./-]+\.(?:py|toml|md)\b", text):
        if not ref.startswith(("pipelines/", "data/")):
            assert (REPO / ref).exists(), f"{name} names {ref}, which does not exist"
    for made in re.findall(r"mkdir -p ([\w/ .-]+)", text):
        for d in made.split():
            (tmp_path / d).mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    p = subprocess.run(
        [tool("bulkload"), "run", "--check", f"pipelines/{name}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
