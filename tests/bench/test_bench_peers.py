"""The peers (loader/bench/peers.py, ArcticDB and TileDB run by versus.py): an optional peer that is not installed is "skipped:
not installed" and its targets "not measured", never estimated; the naive peers write the
records they are timed on (read back from real LMDB / RocksDB); the optional heavy
libraries stay out of every module but the one that uses them."""

from __future__ import annotations

import json
import subprocess
import sys

import lmdb
import pytest
from rocksdict import Options, Rdict

from loader.bench.peers import (
    NOT_INSTALLED,
    child_capnp_builder,
    child_lmdb_blob,
    child_lmdb_per_record,
    child_rocksdict_wb,
    section_peers,
)
from loader.bench.records import generate_records
from loader.bench.targets import targets
from loader.bench.versus import section_versus

from .bench_fixtures import opened_bench

OPTIONAL = [
    "peer-arcticdb-write-build",
    "peer-arcticdb-write",
    "peer-arcticdb-read",
    "peer-tiledb-write",
    "peer-tiledb-box",
]
NAIVE = ["peer-lmdb-per-record", "peer-lmdb-blob", "peer-rocksdict-writebatch", "peer-pycapnp-builder"]


@pytest.mark.parametrize(
    "hidden, skipped",
    [
        (("arcticdb",), OPTIONAL[:3]),
        (("pandas",), OPTIONAL[:3]),
        (("tiledb",), OPTIONAL[3:]),
        (("arcticdb", "tiledb", "pandas"), OPTIONAL),
    ],
)
def test_a_peer_not_installed_is_skipped_and_its_target_not_measured(tmp_path, monkeypatch, hidden, skipped):
    for module in hidden:
        monkeypatch.setitem(sys.modules, module, None)  # find_spec() is None: as if not installed
    with opened_bench(tmp_path, only=set(skipped)) as b:  # ArcticDB and TileDB: the versus section
        section_peers(b)
        section_versus(b)
        assert list(b.figures)[: len(NAIVE)] == NAIVE
        assert [x for x in b.figures if x.startswith("peer-") and x not in NAIVE] == OPTIONAL
        for fid in skipped:
            f = b.figures[fid]
            assert (f.status, f.reason, f.samples) == ("skipped", NOT_INSTALLED, [])
            assert NOT_INSTALLED == "skipped: not installed (pip install 'bulkload[peers]')"
        assert all(b.figures[x].reason == "not selected" for x in NAIVE)
        rows = {t.id: t.to_dict() for t in targets(b.figures, b.cores, None)}
        if "peer-arcticdb-write" in skipped:
            assert rows["load-vs-arcticdb"]["status"] == "not measured (load-lmdb-default, peer-arcticdb-write-build)"
            assert rows["load-vs-arcticdb"]["ratio"] is None and rows["load-vs-arcticdb"]["pass"] is None


def test_the_naive_peers_are_measured(tmp_path):
    with opened_bench(tmp_path, n=2000, only=set(NAIVE)) as b:
        section_peers(b)
        for fid in NAIVE:
            f = b.figures[fid]
            assert f.status == "ok", (fid, f.reason)
            assert f.records == 1000 and f.workers == 1 and f.limit == "gen-file-fsync"  # n_naive scaled to 1000
            assert f.samples[0]["seconds"] > 0 and f.samples[0]["peak_tree_rss_bytes"] > 0
        assert not (b.work / "peer").exists()


@pytest.mark.parametrize("n", [1, 9_999, 10_001])
def test_the_lmdb_peers_store_every_record(tmp_path, n):
    raw = generate_records(n).tobytes()
    assert child_lmdb_per_record(str(tmp_path / "each"), n)["seconds"] > 0
    assert child_lmdb_blob(str(tmp_path / "blob"), n)["seconds"] > 0
    with lmdb.open(str(tmp_path / "each"), readonly=True) as env, env.begin() as txn:
        assert env.stat()["entries"] == n
        assert b"".join(v for _, v in txn.cursor()) == raw
        assert txn.get((n - 1).to_bytes(8, "big")) == raw[-96:]
    with lmdb.open(str(tmp_path / "blob"), readonly=True) as env, env.begin() as txn:
        assert env.stat()["entries"] == -(-n // 10_000)
        assert b"".join(v for _, v in txn.cursor()) == raw


def test_the_rocksdict_and_pycapnp_peers(tmp_path):
    n = 10_050
    raw = generate_records(n).tobytes()
    assert child_rocksdict_wb(str(tmp_path / "rocks"), n)["seconds"] > 0
    db = Rdict(str(tmp_path / "rocks"), Options(raw_mode=True))
    try:
        assert b"".join(db.values()) == raw and db[(n - 1).to_bytes(8, "big")] == raw[-96:]
    finally:
        db.close()
    res = child_capnp_builder(str(tmp_path / "unused"), 500)
    assert res["seconds"] > 0 and res["message_bytes"] >= 500 * 96


IMPORTED = """
import json, sys
for m in sys.argv[1:]:
    __import__(m)
print(json.dumps(sorted(m for m in ("matplotlib", "arcticdb", "tiledb", "pandas", "numpy", "psutil", "pyarrow")
                        if m in sys.modules)))
"""


@pytest.mark.parametrize(
    "modules, allowed",
    [
        (["loader.bench.child", "loader.bench.processes"], []),  # what every child benchmark process imports
        (
            ["loader.bench", "loader.bench.suite", "loader.bench.report", "loader.bench.peers", "loader.bench.plots"],
            ["psutil"],
        ),  # the suite itself
    ],
)
def test_the_optional_and_heavy_libraries_are_imported_only_when_used(modules, allowed):
    p = subprocess.run([sys.executable, "-c", IMPORTED, *modules], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == allowed
