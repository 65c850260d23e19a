"""The LMDB catalog (model/catalog*.py): O(change) commits, reads of what is asked, damage.

- A commit writes only what changed and reads no old row: with an old batch row made
  unreadable in the catalog, appends still commit, ``info`` (aggregates) and range reads
  of other records still work; the bad row is left as it was, and ``verify`` names it.
- A damaged catalog - data.mdb truncated, pages overwritten, the header's bytes
  overwritten, the directory missing behind a version-2 pointer - is named by info,
  verify, open and load: exit 1, one line, nothing written; never a traceback or an
  empty dataset.
- A manifest.json of a newer version is refused naming both versions.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import run_cli

import loader
from loader.errors import DamagedDatasetError, NewerFormatError
from loader.model import catalog as cg
from loader.model import manifest as mf
from loader.sources.generators import generate


def gen_bytes(start, n):
    from loader.model.layouts import get_layout

    return generate(get_layout("scidb96"), start, n, impl="c").tobytes()


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("lock.mdb", "writer.lock", ".lock") and ".readers" not in p.parts
    }


def one_line(p, code=1) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == code and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


@pytest.fixture
def dataset(tmp_path) -> tuple[Path, str]:
    root = tmp_path / "ds"
    uri = f"lmdb://{root}"
    for i in range(3):
        loader.load(f"gen://scidb96?n=500&start={500 * i}", uri, shards=2, workers=1, batch_records=100)
    return root, uri


def _poison_row(root: Path, seq: int) -> None:
    """Make batch row ``seq`` undecodable, in the catalog itself."""
    cat = cg.open_catalog(str(root / "catalog"))
    with cat.env.begin(write=True) as txn:
        assert txn.get(cg.key(seq), db=cat.dbs["batches"]) is not None
        txn.put(cg.key(seq), b"\xc1\xc1\xc1", db=cat.dbs["batches"])  # 0xc1: never valid msgpack


def test_a_commit_reads_and_writes_only_what_changed(dataset, tmp_path):
    root, uri = dataset
    _poison_row(root, 0)
    loader.load("gen://scidb96?n=300&start=1500", uri, workers=1, batch_records=100)  # appends: no old row read
    p = run_cli("load", "gen://scidb96?n=200&start=1800", uri, "-q")
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert ds.records == 2000 and len(ds.manifest.batches) == 20  # aggregates
        assert ds.read_records(150, 1990).tobytes() == gen_bytes(150, 1840)  # range lookups skip row 0
        assert [r.status for r in ds.manifest.runs] == ["done"] * 5
    info = json.loads(run_cli("info", uri, "--json").stdout)
    assert info["records"] == 2000 and info["batches"] == 20
    cat = cg.open_catalog(str(root / "catalog"))
    with cat.env.begin() as txn:
        assert txn.get(cg.key(0), db=cat.dbs["batches"]) == b"\xc1\xc1\xc1"  # never rewritten
    line = one_line(run_cli("verify", uri))  # a reader of every row names the damage
    assert "catalog" in line and "a batch row is not valid" in line


DAMAGES = {
    "truncated": lambda c: os.truncate(c / "data.mdb", 12288),
    "pages-overwritten": lambda c: _overwrite_pages(c / "data.mdb"),
    "header-overwritten": lambda c: _overwrite_all(c / "data.mdb", b'"layout"'),
    "missing": lambda c: shutil.rmtree(c),
}


def _overwrite_pages(path: Path) -> None:
    with open(path, "r+b") as f:
        for pg in range(2, os.path.getsize(path) // 4096):
            f.seek(pg * 4096)
            f.write(b"\xa5" * 64)


def _overwrite_all(path: Path, what: bytes) -> None:
    data = path.read_bytes()
    assert what in data
    path.write_bytes(data.replace(what, b"\xff" * len(what)))


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_catalog_is_named_with_exit_1_and_nothing_is_written(dataset, damage):
    root, uri = dataset
    DAMAGES[damage](root / "catalog")
    before = tree(root)
    for args in (
        ["info", uri],
        ["verify", uri],
        ["load", "gen://scidb96?n=10&start=1500", uri, "-q"],
        ["compact", uri, "-q"],
    ):
        line = one_line(run_cli(*args))
        assert "catalog" in line and "damaged" in line and "backup" in line, (args, line)
    with pytest.raises(DamagedDatasetError, match="catalog"):
        loader.open(uri)
    assert tree(root) == before


def test_a_newer_manifest_version_is_refused_naming_both_versions(dataset):
    root, uri = dataset
    pointer = json.loads((root / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps({**pointer, "version": 7}))
    before = tree(root)
    for args in (["info", uri], ["load", "gen://scidb96?n=10&start=1500", uri, "-q"]):
        line = one_line(run_cli(*args))
        assert "version-7" in line and f"versions 1 and {mf.VERSION}" in line, line
    with pytest.raises(NewerFormatError):
        loader.open(uri)
    assert tree(root) == before


def test_a_reader_keeps_its_generation_while_a_writer_commits(dataset):
    _root, uri = dataset
    with loader.open(uri) as ds:
        loader.load("gen://scidb96?n=500&start=1500", uri, workers=1, batch_records=100)
        assert ds.records == 1500 and len(list(ds.manifest.batches)) == 15
        assert ds.read_records(0, 1500).tobytes() == gen_bytes(0, 1500)
    with loader.open(uri) as ds:
        assert ds.records == 2000 and ds.manifest.generation > 0


def test_a_commit_that_fills_the_catalog_map_grows_it(tmp_path, monkeypatch):
    monkeypatch.setattr(cg, "MIN_MAP", 1 << 16)  # 16 pages: the first commits fill it
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=30000", uri, shards=2, workers=1, batch_records=10)
    loader.load("gen://scidb96?n=30000&start=30000", uri, workers=1, batch_records=10)
    assert os.path.getsize(tmp_path / "ds" / "catalog" / "data.mdb") > 1 << 16
    with loader.open(uri) as ds:
        assert ds.records == 60000 and len(ds.manifest.batches) == 6000
        assert ds.read_records(29995, 30005).tobytes() == gen_bytes(29995, 10)


def test_a_load_reads_only_the_runs_of_its_source(dataset):
    """Exactly-once of a load asks the catalog's by_source index, not every run: with an
    unrelated old run made unreadable, a source loaded long ago is still recognised and a
    new one loads (and the unfinished-runs index keeps resuming cheap too)."""
    root, uri = dataset
    cat = cg.open_catalog(str(root / "catalog"))
    with cat.env.begin(write=True) as txn:
        txn.put(cg.key(1), b"{not json", db=cat.dbs["runs"])  # the second load's run
    rep = json.loads(run_cli("load", "gen://scidb96?n=500&start=0", uri, "--batch-records", 100, "--json").stdout)
    assert rep["status"] == "already-loaded"
    p = run_cli("load", "gen://scidb96?n=100&start=1500", uri, "--batch-records", 100, "-q")
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert ds.records == 1600 and ds.read_records(1400, 1600).tobytes() == gen_bytes(1400, 200)


def test_a_catalog_that_places_a_shard_elsewhere_is_refused_naming_it(dataset):
    """Each shard's place is in the catalog (today shard-NNN under the root); a catalog of
    a newer bulkload that puts one elsewhere is refused, not read from the wrong place."""
    import subprocess
    import sys

    root, uri = dataset
    with loader.open(uri) as ds:
        assert ds.manifest.placement() == [f"shard-{i:03d}" for i in range(ds.manifest.shards)]
    edit = (  # in another process: this one holds the catalog open
        "import lmdb, sys\n"
        "from loader.model import catalog as cg\n"
        "env = lmdb.open(sys.argv[1], subdir=True, max_dbs=len(cg.DBS) + 1)\n"
        "with env.begin(write=True) as txn:\n"
        "    meta = env.open_db(b'meta', txn=txn)\n"
        "    head = cg.decode(txn.get(b'header', db=meta))\n"
        "    assert head['placement'][0] == 'shard-000', head\n"
        "    head['placement'][0] = 'host-b:/disk1/shard-000'\n"
        "    txn.put(b'header', cg.encode(head), db=meta)\n"
    )
    subprocess.run([sys.executable, "-c", edit, str(root / "catalog")], check=True)
    before = tree(root)
    line = one_line(run_cli("info", uri))
    assert "places shard 0 at 'host-b:/disk1/shard-000'" in line and "newer bulkload" in line, line
    with pytest.raises(NewerFormatError):
        loader.open(uri)
    assert tree(root) == before
