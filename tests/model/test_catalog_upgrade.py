"""Version-1 datasets (manifest.json holding everything) and the catalog (model/catalog*.py).

The golden datasets of tests/data/v1 were written by the code before the catalog (see its
README): fixed records, documents, arrays with garbage listed, an interrupted run. They
open read-only as they are (nothing written, no catalog made), read the content that code
read, and are upgraded by their first write - load, ingest, finalize, compact - to a
catalog with the same content; an upgrade killed at any of its steps leaves a readable
dataset, and the next write finishes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, tool

import loader
from loader.model import manifest as mf

DATA = Path(__file__).parent.parent / "data" / "v1"
NAMES = ["fixed", "docs", "arrays", "interrupted"]


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("v1")
    with tarfile.open(DATA / "v1-datasets.tar.gz") as t:
        t.extractall(base, filter="data")
    return base


@pytest.fixture
def v1(golden, tmp_path):
    def place(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(golden / name, dst)
        return dst

    return place


def expected(golden: Path, name: str) -> dict:
    return json.loads((golden / "expected.json").read_text())[name]


def content(uri: str) -> dict:
    """What the golden expected.json holds of a dataset, read now."""
    with loader.open(uri) as ds:
        m = ds.manifest
        s = ds.scan() if ds.layout.variable_length else ds.read_records(0, m.records)
        # every byte of every column (a DocBatch's repr elides its text and follows numpy's
        # print options, which the other tests of a worker process may leave otherwise)
        cols = [s] if isinstance(s, np.ndarray) else [s.ids, s.created_at, s.offsets, s.text]
        dig = hashlib.sha256(b"".join(np.ascontiguousarray(c).tobytes() for c in cols)).hexdigest()
        return {
            "records": m.records,
            "batches": [b.row() for b in m.batches],
            "runs": [r.to_dict() for r in m.runs],
            "garbage": [g.to_dict() for g in m.garbage],
            "arrays": sorted(m.arrays),
            "scan_sha256": dig,
            "generation": m.generation,
            "dataset_id": m.dataset_id,
        }


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` but lock files and pins, with its sha256."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in ("lock.mdb", "writer.lock", ".lock") and ".readers" not in p.parts:
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("name", NAMES)
def test_a_version_1_dataset_opens_read_only_as_it_is(golden, v1, name):
    root = v1(name)
    before = tree(root)
    assert content(f"lmdb://{root}") == expected(golden, name)
    for cmd in (["info", f"lmdb://{root}"], ["verify", f"lmdb://{root}"]):
        p = run_cli(*cmd)
        assert p.returncode == 0, p.stderr
    assert tree(root) == before and not (root / "catalog").exists()
    assert json.loads((root / "manifest.json").read_text())["version"] == 1


def _upgraded_same(golden, root: Path, name: str, generations: int = 1) -> dict:
    got = content(f"lmdb://{root}")
    want = expected(golden, name)
    assert json.loads((root / "manifest.json").read_text()) == {
        "version": 2,
        "catalog": "catalog",
        "dataset_id": want["dataset_id"],
    }
    assert (root / "catalog" / "data.mdb").is_file() and not list(root.glob("catalog.tmp-*"))
    return got


@pytest.mark.parametrize("name", ["fixed", "interrupted"])
def test_the_first_load_upgrades_a_version_1_dataset_and_keeps_its_content(golden, v1, name):
    root = v1(name)
    want = expected(golden, name)
    p = run_cli(
        "load",
        f"gen://scidb96?n=100&start={want['records']}",
        f"lmdb://{root}",
        "--batch-records",
        50,
        "--new-run",
        "-q",
    )
    assert p.returncode == 0, p.stderr
    got = _upgraded_same(golden, root, name)
    assert got["records"] == want["records"] + 100
    assert got["batches"][: len(want["batches"])] == want["batches"]
    old = want["runs"]
    if name == "interrupted":  # the next writer records the dead job's run so
        assert [r["status"] for r in got["runs"][: len(old)]] == ["done", "interrupted"]
    else:
        assert got["runs"][: len(old)] == old
    with loader.open(f"lmdb://{root}") as ds:
        assert ds.verify().ok
        recs = ds.read_records(0, want["records"])
        assert hashlib.sha256(recs.tobytes()).hexdigest() == want["scan_sha256"]


def test_an_ingest_upgrades_a_version_1_dataset(golden, v1, tmp_path):
    root = v1("fixed")
    want = expected(golden, "fixed")
    d = tmp_path / "in"
    d.mkdir()
    with loader.open(f"lmdb://{root}") as ds:
        (d / "a.bin").write_bytes(ds.read_records(0, 30).tobytes())
    p = run_cli("ingest", f"lmdb://{root}", "--from", d, "--pattern", "*.bin", "-q")
    assert p.returncode == 0, p.stderr
    got = _upgraded_same(golden, root, "fixed")
    assert got["records"] == want["records"] + 30 and got["batches"][:8] == want["batches"]
    assert "a.bin" in mf.load_manifest(root).files


def test_a_compact_upgrades_a_version_1_dataset(golden, v1):
    root = v1("fixed")
    want = expected(golden, "fixed")
    p = run_cli("compact", f"lmdb://{root}", "--target-batch-records", 200, "--force", "-q")
    assert p.returncode == 0, p.stderr
    got = _upgraded_same(golden, root, "fixed")
    assert got["scan_sha256"] == want["scan_sha256"] and len(got["batches"]) < len(want["batches"])
    with loader.open(f"lmdb://{root}") as ds:
        assert ds.verify().ok


def test_a_finalize_upgrades_a_version_1_dataset_and_collects_its_garbage(golden, v1):
    root = v1("arrays")
    want = expected(golden, "arrays")
    assert want["garbage"]
    p = run_cli("finalize", f"lmdb://{root}", "--dims", "i0:10,i1:1000", "--array", "g3", "--workers", 1, "-q")
    assert p.returncode == 0, p.stderr
    got = _upgraded_same(golden, root, "arrays")
    assert got["scan_sha256"] == want["scan_sha256"] and got["arrays"] == ["g2", "g3", "grid"]
    assert got["garbage"] == []  # no reader pinned the old build: collected
    assert not (root / want["garbage"][0]["index"]).exists()
    with loader.open(f"lmdb://{root}") as ds:
        assert ds.verify().ok
        box = ds.read_box("grid", i0=(0, 10), i1=(0, 1000))
        assert box.num_rows > 0


def test_a_documents_load_upgrades_a_version_1_dataset(golden, v1):
    root = v1("docs")
    want = expected(golden, "docs")
    p = run_cli("load", "gen://docs?n=10&seed=4&start=1000", f"lmdb://{root}", "--layout", "docs", "-q")
    assert p.returncode == 0, p.stderr
    got = _upgraded_same(golden, root, "docs")
    assert got["records"] == want["records"] + 10 and got["batches"][: len(want["batches"])] == want["batches"]
    with loader.open(f"lmdb://{root}") as ds:
        assert ds.verify().ok and ds.get(1000).id == 1000


@pytest.mark.parametrize("fault", ["catalog-built:1", "catalog-renamed:1", "pointer:1"])
def test_an_upgrade_killed_at_any_step_leaves_a_readable_dataset_and_the_next_write_finishes_it(golden, v1, fault):
    root = v1("fixed")
    want = expected(golden, "fixed")
    uri = f"lmdb://{root}"
    args = [tool("bulkload"), "load", "gen://scidb96?n=100&start=400", uri, "--batch-records", "50", "-q"]
    p = subprocess.run(args, env=dict(os.environ, BULKLOAD_FAULT=fault), capture_output=True, text=True)
    assert p.returncode == -signal.SIGKILL, p.stderr
    got = content(uri)  # the old content, or the content of the killed write's first commit
    assert got["batches"][:8] == want["batches"] and got["records"] in (400, 500)
    assert run_cli("info", uri).returncode == 0
    p = run_cli(*args[1:])
    assert p.returncode == 0, p.stderr
    got = _upgraded_same(golden, root, "fixed")
    assert got["records"] == 500 and got["batches"][:8] == want["batches"]
    with loader.open(uri) as ds:
        assert ds.verify().ok
