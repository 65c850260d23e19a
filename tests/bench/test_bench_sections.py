"""The sections of the suite on a small N (loader/bench/runner.py, limits.py, loads.py,
finalize.py): the bookkeeping of figures, every limit measured and its files removed, one
real load per store (lmdb, rocksdb, mem://, stdin) that the dataset then holds, a failing
load reported with bulkload's own error, finalize and box queries. Shapes and contents are
checked, never speed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import loader
from loader.bench.finalize import section_finalize
from loader.bench.limits import parallel_gen, section_limits
from loader.bench.loads import load_configs, load_once, section_load
from loader.bench.processes import tool
from loader.bench.runner import MEM_ROOT

from .bench_fixtures import opened_bench

LIMITS = [
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
]


def test_repeat_records_samples_and_a_failure_is_the_figures_reason(tmp_path):
    with opened_bench(tmp_path, repeats=3) as b:
        calls = []
        f = b.fig("one", "load", "one", 1000)
        b.repeat(
            f, lambda i: {"seconds": 0.1234567891, "i": i}, setup=calls.append, teardown=lambda: calls.append("down")
        )
        assert calls == [0, 1, 2, "down"] and f.status == "ok"
        assert [s["i"] for s in f.samples] == [0, 1, 2]
        assert all(s["seconds"] == 0.123457 and "loadavg_1m" in s for s in f.samples)

        def boom(i):
            if i == 1:
                raise ValueError("boom")
            return {"seconds": 1.0}

        g = b.fig("two", "load", "two", 1000)
        b.repeat(g, boom, teardown=lambda: calls.append("down again"))
        assert (g.status, g.reason, len(g.samples), calls[-1]) == ("failed", "ValueError: boom", 1, "down again")
        h = b.fig("three", "load", "three", 1000)
        b.skip(h, "no reason to run")
        b.repeat(h, boom)
        assert (h.status, h.reason, h.samples) == ("skipped", "no reason to run", [])
        assert list(b.figures) == ["one", "two", "three"]


def test_only_selects_figures_by_id_or_group(tmp_path):
    with opened_bench(tmp_path, only={"a", "peers"}) as b:
        assert b.fig("a", "load", "a", 1) is not None and b.fig("p", "peers", "p", 1) is not None
        assert b.fig("c", "load", "c", 1) is None
        assert (b.figures["c"].status, b.figures["c"].reason) == ("skipped", "not selected")
        b.repeat(None, lambda i: 1 / 0)  # a figure not selected is not measured


def test_datasets_are_named_in_the_work_directory_and_removed_with_it(tmp_path):
    with opened_bench(tmp_path) as b:
        work = b.work
        assert work.is_dir() and work.parent == b.plan.out and work.name.startswith(".bench-work-")
        assert b.dataset("lmdb", "x") == f"lmdb://{work / 'x'}" and b.ds_root(f"rocksdb://{work}/y?z=1") == work / "y"
        mem = b.dataset("mem", "m")
        assert mem == f"mem://bench-{os.getpid()}-m" and b.ds_root(mem) == MEM_ROOT / f"bench-{os.getpid()}-m"
        b.ds_root(mem).mkdir(parents=True)
        b.close_work()
        assert not work.exists() and not b.ds_root(mem).exists() and b.plan.out.is_dir()


def test_every_limit_is_measured_and_its_files_removed(tmp_path):
    with opened_bench(tmp_path, n=2000) as b:
        section_limits(b)
        assert list(b.figures) == LIMITS
        for fid in LIMITS:
            f = b.figures[fid]
            assert f.status == "ok", (fid, f.reason)
            assert f.group == "limits" and len(f.samples) == 1 and f.samples[0]["seconds"] > 0
            assert f.records == 2000
        assert b.figures["cold-read"].samples[0]["bytes_read"] > 2000 * 96  # the .npy file: header + records
        assert list(b.work.iterdir()) == []
        assert not [p for p in Path("/dev/shm").glob(f"bulkload-bench-{os.getpid()}*")]


@pytest.mark.parametrize("dirname", [None, "dir"])
def test_parallel_generators_cover_the_records_and_leave_no_file(tmp_path, dirname):
    d = tmp_path / "gen"
    d.mkdir()
    assert parallel_gen(tool("bulkload-gen"), 1001, 3, str(d) if dirname else None) > 0
    assert list(d.iterdir()) == []


@pytest.mark.parametrize("scheme, stdin", [("lmdb", False), ("rocksdb", False), ("mem", False), ("lmdb", True)])
def test_load_once_loads_the_records_into_each_store(tmp_path, scheme, stdin):
    with opened_bench(tmp_path, n=3000) as b:
        uri = b.dataset(scheme, f"ds-{scheme}")
        s = load_once(
            b,
            3000,
            uri,
            workers=2,
            format="arrow" if scheme == "rocksdb" else "capnp",
            compression="zstd" if scheme == "rocksdb" else "none",
            stdin=stdin,
        )
        assert s["seconds"] > 0 and s["wall_s"] >= s["seconds"] and s["peak_tree_rss_bytes"] > 0
        assert s["workers"] == 2 and s["stored_bytes"] > 0
        with loader.open(uri) as ds:
            assert ds.verify().ok
            recs = ds.read_records(0, 3000)
            assert len(recs) == 3000 and ds.read_records(2990, 3000)["i1"].tolist() == list(range(2990, 3000))


def test_a_failing_load_carries_bulkloads_own_error(tmp_path):
    with opened_bench(tmp_path) as b, pytest.raises(RuntimeError, match=r"bulkload: error: .*/proc/no-such-dir/ds"):
        load_once(b, 1000, "lmdb:///proc/no-such-dir/ds", workers=1)


def test_the_load_section_declares_every_configuration(tmp_path):
    with opened_bench(tmp_path, only={"load-mem-capnp"}) as b:
        section_load(b)
        ids = [c.id for c in load_configs(b.cores)]
        assert list(b.figures) == ids and len(set(ids)) == len(ids)
        f = b.figures["load-mem-capnp"]
        assert f.status == "ok" and f.limit == "gen-shm" and f.params == {"scheme": "mem", "shards": b.cores}
        assert b.figures["load-lmdb-arrow-zstd"].reason == "not selected"
        assert b.figures["load-lmdb-arrow-zstd"].params == {
            "scheme": "lmdb",
            "format": "arrow",
            "compression": "zstd",
            "shards": b.cores,
        }
        assert b.figures["load-stdin-capnp"].params["stdin"] is True
        assert not b.ds_root(b.dataset("mem", "load-mem-capnp")).exists()  # the teardown removed it


def test_finalize_and_the_box_queries(tmp_path):
    with opened_bench(tmp_path, n=4000, only={"finalize-w1", "query-box", "query-box-1000"}) as b:
        section_finalize(b)
        assert [x for x in b.figures if x.startswith("finalize")] == [f"finalize-w{w}" for w in range(1, b.cores + 1)]
        fin = b.figures["finalize-w1"]
        assert fin.status == "ok", fin.reason
        assert fin.samples[0]["seconds"] > 0 and fin.samples[0]["report_cells"] == 4000
        for fid, cells in (("query-box", 100), ("query-box-1000", 1000)):
            q = b.figures[fid]
            assert q.status == "ok", q.reason
            assert q.kind == "latency" and q.samples[0]["cells"] == cells and q.samples[0]["seconds"] > 0
            assert len(q.samples[0]["latencies_s"]) == b.p.query_reps
        assert list(b.work.iterdir()) == []  # the input and its finalized copy are removed


@pytest.mark.parametrize("stdin", [False, True])
def test_the_ticks_workload_loads_gen_ticks_records(tmp_path, stdin):
    from loader.sources.generators import generate

    with opened_bench(tmp_path, n=3000, only={"load-ticks-lmdb-capnp", "load-ticks-stdin-capnp"}) as b:
        uri = b.dataset("lmdb", "ticks")
        s = load_once(b, 3000, uri, workers=2, stdin=stdin, layout="ticks")
        assert s["seconds"] > 0 and s["stored_bytes"] > 0
        with loader.open(uri) as ds:
            assert ds.layout.name == "ticks" and ds.verify().ok
            assert ds.read_records(0, 3000).tobytes() == generate("ticks", 0, 3000).tobytes()


def test_the_load_section_measures_ticks_figures_in_ticks_bytes(tmp_path):
    with opened_bench(tmp_path, n=2000, only={"load-ticks-lmdb-capnp"}) as b:
        section_load(b)
        f = b.figures["load-ticks-lmdb-capnp"]
        assert f.status == "ok" and f.record_size == 41 and f.bytes == 2000 * 41
        assert f.params == {"scheme": "lmdb", "layout": "ticks", "shards": b.cores}
        assert b.figures["load-lmdb-capnp-w1"].record_size == 96
    with opened_bench(tmp_path / "no-ticks", only={"none"}, workloads=("scidb96",)) as b:
        section_load(b)
        assert not any("ticks" in k for k in b.figures)
