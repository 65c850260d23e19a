"""The versus section (loader/bench/versus.py, compare.py, runner.Bench.interleave): bulkload's
loads and the peers measured round-robin, every row a sample per round, the disk limit
sampled between the rounds, bytes on disk recorded, ratios with their per-round spread, the
JSON shape; a peer not installed is "skipped: not installed". Real loads at tiny N; no
timing is asserted."""

from __future__ import annotations

import sys

import pytest

from loader.bench.compare import comparisons
from loader.bench.figures import Figure
from loader.bench.peers import NOT_INSTALLED, installed
from loader.bench.runner import Row
from loader.bench.versus import bulkload_ids, section_versus

from .bench_fixtures import opened_bench

HIDDEN = ("arcticdb", "tiledb", "pandas")


def test_interleave_goes_round_robin_and_samples_the_disk_between_rounds(tmp_path):
    with opened_bench(tmp_path, repeats=3) as b:
        calls = []
        a, c, d = (b.fig(x, "load", x, 1000) for x in ("a", "c", "d"))

        def one(name, fail_at=None):
            def sample(i):
                calls.append((name, i))
                if i == fail_at:
                    raise OSError("disk gone")
                return {"seconds": 0.5, "other_s": 0.25}

            return sample

        rows = [
            Row(one("a"), [(a, "seconds")]),
            Row(one("c", fail_at=1), [(c, "seconds")]),
            Row(one("d"), [(d, "other_s")]),
            Row(one("never"), [(None, "seconds")]),
        ]
        b.interleave(rows, between=lambda phase: calls.append(phase))
        assert calls == [
            "round 1",
            ("a", 0),
            ("c", 0),
            ("d", 0),
            "round 2",
            ("a", 1),
            ("c", 1),
            ("d", 1),
            "round 3",
            ("a", 2),
            ("d", 2),
            "after",
        ]
        assert [s["round"] for s in a.samples] == [1, 2, 3] and [s["seconds"] for s in d.samples] == [0.25] * 3
        assert (c.status, c.reason, len(c.samples)) == ("failed", "OSError: disk gone", 1)


def _versus(tmp_path, monkeypatch, hidden=(), **kw):
    for module in hidden:
        monkeypatch.setitem(sys.modules, module, None)  # find_spec() is None: as if not installed
    bench = opened_bench(tmp_path, n=2000, repeats=2, **kw)
    return bench


def test_versus_rows_are_measured_interleaved_with_bytes_on_disk(tmp_path, monkeypatch):
    """The peers hidden (fast): the bulkload rows and the disk limit, two rounds each."""
    rows = {"load-lmdb-default", "load-lmdb-capnp-zstd", "load-file-warm", "load-file-cold"}
    with _versus(tmp_path, monkeypatch, hidden=HIDDEN, only=rows | {"gen-file-fsync", "peers", "peer-tiledb-box"}) as b:
        section_versus(b)
        ids = bulkload_ids(b.cores, b.p.compressed)
        assert ids == [
            "load-lmdb-default",
            "load-lmdb-capnp-lz4",
            "load-lmdb-capnp-zstd",
            "load-file-warm",
            "load-file-cold",
        ]
        assert b.figures["load-lmdb-capnp-lz4"].reason == "not selected"
        for fid in [x for x in ids if x in rows]:
            f = b.figures[fid]
            assert f.status == "ok", (fid, f.reason)
            assert [s["round"] for s in f.samples] == [1, 2] and f.params["interleaved"] is True
            assert all(s["disk_bytes"] > 0 and s["seconds"] > 0 for s in f.samples)
            assert f.to_dict(b.figures)["disk_bytes"]["median"] > 0
        assert b.figures["load-file-cold"].limit == "cold-read"
        # the warm file was in the page cache as its load started, the cold one was not
        assert [s["source_cached"] for s in b.figures["load-file-warm"].samples] == [1.0, 1.0]
        assert [s["source_cached"] for s in b.figures["load-file-cold"].samples] == [0.0, 0.0]
        disk = b.figures["gen-file-fsync"]
        assert [s["phase"] for s in disk.samples] == ["round 1", "round 2", "after"]
        # default options: no --workers (in-process at this size), lz4; the bytes are each dataset's own
        head = b.figures["load-lmdb-default"]
        assert head.workers is None and all(s["in_process"] and s["compression"] == "lz4" for s in head.samples)
        assert all(
            s["compression"] == "zstd" and not s["in_process"] for s in b.figures["load-lmdb-capnp-zstd"].samples
        )
        for fid in (
            "peer-arcticdb-write-build",
            "peer-arcticdb-write",
            "peer-arcticdb-read",
            "peer-tiledb-write",
            "peer-tiledb-box",
        ):
            assert (b.figures[fid].status, b.figures[fid].reason) == ("skipped", NOT_INSTALLED)
        assert comparisons(b.figures, ids, b.cores) == []  # no peer measured: no ratio made up
        assert list(b.work.iterdir()) == []  # every dataset and the records file removed


def test_a_figure_measured_by_the_versus_section_is_not_measured_again(tmp_path, monkeypatch):
    from loader.bench.loads import section_load

    with _versus(tmp_path, monkeypatch, hidden=HIDDEN, only={"load-lmdb-capnp-lz4", "load-lmdb-arrow-none"}) as b:
        section_versus(b)
        lz4 = b.figures["load-lmdb-capnp-lz4"]
        section_load(b)
        assert b.figures["load-lmdb-capnp-lz4"] is lz4 and len(lz4.samples) == 2
        assert [s["round"] for s in lz4.samples] == [1, 2]
        assert b.figures["load-lmdb-arrow-none"].status == "ok"  # the load section's own figure


@pytest.mark.skipif(
    not (installed("arcticdb") and installed("pandas") and installed("tiledb")),
    reason="the [peers] extra is not installed",
)
def test_the_peers_are_measured_in_the_same_rounds_and_compared(tmp_path, monkeypatch):
    only = {
        "load-lmdb-default",
        "load-lmdb-capnp-w1",
        "peer-arcticdb-write-build",
        "peer-arcticdb-write",
        "peer-arcticdb-read",
        "peer-tiledb-write",
        "peer-tiledb-box",
    }
    with _versus(tmp_path, monkeypatch, only=only) as b:
        section_versus(b)
        head = b.figures["load-lmdb-default"]
        build, write = b.figures["peer-arcticdb-write-build"], b.figures["peer-arcticdb-write"]
        for f in (head, build, write, b.figures["peer-arcticdb-read"], b.figures["peer-tiledb-write"]):
            assert f.status == "ok", (f.id, f.reason)
            assert [s["round"] for s in f.samples] == [1, 2]
        for s, w in zip(build.samples, write.samples, strict=True):  # one child, both figures: build + write > write
            assert s["seconds"] == pytest.approx(s["build_s"] + s["write_s"], abs=1e-5) and s["seconds"] > w["seconds"]
            assert s["disk_bytes"] > 0
        rows = {(c["bulkload"], c["peer"]): c for c in comparisons(b.figures, [head.id], b.cores)}
        assert set(rows) == {
            (head.id, "peer-arcticdb-write-build"),
            (head.id, "peer-arcticdb-write"),
            (head.id, "peer-tiledb-write"),
        }
        c = rows[(head.id, "peer-arcticdb-write-build")]
        assert len(c["round_ratios"]) == 2 and c["round_ratio"]["min"] <= c["round_ratio"]["max"]
        assert c["ratio"] == pytest.approx(c["bulkload_mb_s"]["median"] / c["peer_mb_s"]["median"], abs=1e-3)
        assert c["disk_bytes_ratio"] == pytest.approx(c["bulkload_disk_bytes"] / c["peer_disk_bytes"], rel=1e-3)
        assert b.figures["peer-tiledb-box"].status == "ok" and b.figures["peer-tiledb-box"].kind == "latency"


def test_a_comparison_pairs_samples_of_the_same_round():
    def fig(fid, secs, rounds):
        return Figure(
            fid,
            "load",
            fid,
            1000,
            samples=[{"seconds": s, "round": r, "disk_bytes": 100 * r} for s, r in zip(secs, rounds, strict=True)],
        )

    ours = fig("load-lmdb-capnp-w2", (1.0, 2.0, 4.0), (1, 2, 3))
    peer = fig("peer-arcticdb-write-build", (2.0, 2.0), (1, 3))  # round 2 failed or was left out
    c = comparisons({f.id: f for f in (ours, peer)}, [ours.id], 2)[0]
    assert c["round_ratios"] == [2.0, 0.5] and c["ratio"] == 1.0
    assert (c["bulkload_disk_bytes"], c["peer_disk_bytes"], c["disk_bytes_ratio"]) == (200, 200, 1.0)
