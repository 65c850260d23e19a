"""Figures and targets (loader/bench/figures.py, targets.py): every statistic and every
target row is computed from the samples measured, and nothing is reported for what was
not measured. Samples are given here, never timed."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader.bench.figures import Figure, mb_s_median, stats
from loader.bench.targets import GIB, Target, budget_target, query_target, ratio_target, rss_targets, targets

N = 1_000_000  # 96 MB of records


def fig(id="f", seconds=(1.0,), records=N, **kw) -> Figure:
    return Figure(
        id, kw.pop("group", "load"), kw.pop("title", id), records, samples=[{"seconds": s} for s in seconds], **kw
    )


def test_throughput_figure_statistics():
    f = fig(seconds=(1.0, 2.0, 4.0))
    d = f.to_dict({})
    assert d["bytes"] == 96_000_000 and d["repeats"] == 3 and "reason" not in d
    assert d["seconds"] == {"median": 2.0, "min": 1.0, "max": 4.0}
    assert d["mb_s"] == {"median": 48.0, "min": 24.0, "max": 96.0}
    assert d["records_s"] == {"median": 500_000.0, "min": 250_000.0, "max": 1_000_000.0}
    assert "latency_ms" not in d and d["ratio_to_limit"] is None


def test_latency_figure_and_rss_statistics():
    f = Figure(
        "q",
        "query",
        "q",
        N,
        kind="latency",
        samples=[
            {"seconds": 0.002, "peak_tree_rss_bytes": 10, "peak_tree_anon_bytes": 4},
            {"seconds": 0.001, "peak_tree_rss_bytes": 30, "report_peak_rss_bytes": 7},
        ],
    )
    d = f.to_dict({})
    assert d["latency_ms"] == {"median": 1.5, "min": 1.0, "max": 2.0} and "mb_s" not in d
    assert d["peak_tree_rss_bytes"] == {"median": 20, "min": 10, "max": 30}
    assert d["peak_tree_anon_bytes"] == {"median": 4, "min": 4, "max": 4}
    assert d["report_peak_rss_bytes"] == {"median": 7, "min": 7, "max": 7}


def test_samples_without_seconds_and_without_rss_give_no_numbers():
    d = Figure("f", "load", "f", N, samples=[{"seconds": 0}, {"wall_s": 3}]).to_dict({})
    assert d["seconds"] is None and "mb_s" not in d and "records_s" not in d
    assert d["peak_tree_rss_bytes"] is None and "report_peak_rss_bytes" not in d


@pytest.mark.parametrize("status", ["skipped", "failed"])
def test_a_figure_not_measured_carries_its_reason(status):
    d = Figure("f", "peers", "f", N, status=status, reason="why").to_dict({})
    assert (d["status"], d["reason"], d["seconds"], d["repeats"]) == (status, "why", None, 0)


def test_ratio_to_the_limit_measured_in_the_same_run():
    limit = fig("disk", seconds=(0.5, 0.25), group="limits", records=2 * N)  # 384 and 768 MB/s: median 576
    f = fig(seconds=(1.0, 0.5), limit="disk")  # 96 and 192 MB/s
    d = f.to_dict({"disk": limit})
    assert d["limit"] == "disk"
    assert d["ratio_to_limit"] == pytest.approx({"median": 144 / 576, "min": 96 / 576, "max": 192 / 576})
    # a limit that was skipped, failed, has no samples, or is not in the run: no ratio
    for lim in (
        fig("disk", status="skipped", reason="x"),
        fig("disk", status="failed", reason="x"),
        fig("disk", seconds=()),
    ):
        assert f.to_dict({"disk": lim})["ratio_to_limit"] is None
    assert f.to_dict({})["ratio_to_limit"] is None


def test_mb_s_median_only_of_ok_throughput_figures():
    assert mb_s_median(fig(seconds=(1.0, 2.0, 4.0))) == 48.0
    assert mb_s_median(None) is None
    assert mb_s_median(fig(kind="latency")) is None
    assert mb_s_median(fig(status="failed", reason="x")) is None
    assert mb_s_median(fig(seconds=())) is None
    assert stats([]) is None


# --- targets -----------------------------------------------------------------------------


@given(
    a=st.lists(st.floats(0.01, 100), min_size=1, max_size=5),
    b=st.lists(st.floats(0.01, 100), min_size=1, max_size=5),
    target=st.floats(0.1, 10),
)
def test_a_ratio_target_is_computed_from_the_two_figures(a, b, target):
    num, den = fig("num", seconds=a), fig("den", seconds=b)
    t = ratio_target("t", "num / den", num, den, target)
    va, vb = statistics.median(96 / s for s in a), statistics.median(96 / s for s in b)
    assert t.value == round(va, 3) and t.reference == round(vb, 3)
    assert abs(t.ratio - va / vb) <= 5e-4 + 1e-12  # rounded to 3 places (a tie like 1.1875 may go either way)
    assert t.passed == (va / vb >= target) and t.status == ("pass" if t.passed else "short")
    assert t.to_dict() == {
        "id": "t",
        "what": "num / den",
        "value": t.value,
        "reference": t.reference,
        "ratio": t.ratio,
        "target": target,
        "pass": t.passed,
        "status": t.status,
    }


def test_a_target_over_a_figure_not_measured_is_not_measured_naming_it():
    num = fig("num")
    for den, status in (
        (fig("peer", status="skipped", reason="not installed"), "not measured (peer)"),
        (fig("peer", status="failed", reason="boom"), "not measured (peer)"),
        (None, "not measured"),
        (fig("peer", seconds=()), "not measured"),
    ):
        t = ratio_target("t", "w", num, den, 1.0)
        assert t.to_dict() == {"id": "t", "what": "w", "target": 1.0, "ratio": None, "pass": None, "status": status}
    both = ratio_target("t", "w", fig("a", status="failed", reason="x"), fig("b", status="skipped", reason="y"), 1)
    assert both.status == "not measured (a, b)"


def test_a_target_against_a_fixed_value():
    t = ratio_target("finalize-400", "w", fig(seconds=(0.12,)), None, 1.0, den_value=400.0)  # 800 MB/s
    assert (t.value, t.reference, t.ratio, t.status) == (800.0, 400.0, 2.0, "pass")


def test_query_target_against_2_ms():
    fast = query_target(Figure("q", "query", "q", N, kind="latency", samples=[{"seconds": 0.001}]))
    slow = query_target(Figure("q", "query", "q", N, kind="latency", samples=[{"seconds": 0.004}]))
    assert (fast.value, fast.ratio, fast.status) == (1.0, 2.0, "pass")
    assert (slow.value, slow.ratio, slow.status) == (4.0, 0.5, "short")
    assert query_target(None).to_dict()["status"] == "not measured"


def test_finalize_worker_rss_against_the_budget():
    def fin(*peaks):
        return Figure(
            "finalize-w2",
            "finalize",
            "f",
            N,
            samples=[
                {"seconds": 1, "report_memory_budget": 512 << 20, "report_worker_max_rss_bytes": p} for p in peaks
            ],
        )

    ok, over = budget_target(fin(400 << 20, 500 << 20)), budget_target(fin(400 << 20, 600 << 20))
    assert (ok.value, ok.reference, ok.ratio, ok.status) == (500 << 20, 512 << 20, 1.024, "pass")
    assert (over.value, over.status, over.note) == (600 << 20, "short", "600 MiB under 512 MiB")
    assert budget_target(None).status == budget_target(fin()).status == "not measured"


def test_rss_targets_from_the_samples():
    def rss(n, anon, vm):
        return Figure(
            f"rss-load-n{n}",
            "rss",
            "r",
            n,
            samples=[
                {"seconds": 1, "peak_tree_anon_bytes": a, "peak_tree_rss_bytes": v}
                for a, v in zip(anon, vm, strict=True)
            ],
        )

    one_gib, flat = rss_targets(rss(1000, (400 << 20, 500 << 20), (1, 2)), rss(9000, (600 << 20,), (3 << 30,)))
    assert one_gib.to_dict() == {
        "id": "rss-1gib",
        "what": "peak RSS (private, all processes) of the n=9,000 load / 1 GiB",
        "value": 600 << 20,
        "reference": GIB,
        "ratio": round(GIB / (600 << 20), 3),
        "target": 1.0,
        "pass": True,
        "status": "pass",
        "note": "VmRSS incl. file-backed pages: 3,072 MiB",
    }
    assert (flat.id, flat.value, flat.reference, flat.ratio, flat.status) == (
        "rss-flat",
        600 << 20,
        500 << 20,
        1.2,
        "pass",
    )
    _, too_big = rss_targets(rss(1000, (100 << 20,), (1,)), rss(9000, (2 << 30,), (1,)))
    assert too_big.status == "short" and too_big.target == 1.25


def test_targets_of_a_run_in_report_order():
    figs = {
        f.id: f
        for f in (
            fig("load-lmdb-capnp-w2", seconds=(0.5,)),
            fig("load-lmdb-capnp-w1"),
            fig("load-lmdb-default", seconds=(0.1,)),
            fig("gen-file-fsync", seconds=(0.25,), group="limits"),
            fig("peer-arcticdb-write-build", status="skipped", reason="not installed"),
        )
    }
    rows = [t.to_dict() for t in targets(figs, 2, None)]
    assert [r["id"] for r in rows] == [
        "load-vs-disk",
        "load-vs-arcticdb",
        "load-bytes-vs-arcticdb",
        "load-vs-naive-lmdb",
        "load-2w-vs-1w",
        "arrow-vs-disk",
        "rocksdb-vs-disk",
        "mem-vs-lmdb",
        "finalize-400",
        "finalize-2w-vs-1w",
        "finalize-worker-rss",
        "query-2ms",
    ]
    by = {r["id"]: r for r in rows}
    assert (by["load-vs-disk"]["ratio"], by["load-vs-disk"]["status"]) == (0.5, "pass")
    assert (by["load-2w-vs-1w"]["ratio"], by["load-2w-vs-1w"]["status"]) == (2.0, "pass")
    assert by["load-vs-arcticdb"]["status"] == "not measured (peer-arcticdb-write-build)"  # headline: defaults
    assert by["load-bytes-vs-arcticdb"]["status"] == "not measured (peer-arcticdb-write-build)"
    assert by["mem-vs-lmdb"]["status"] == "not measured"
    # the rss pair only when both of its loads were measured
    small, big = (
        Figure(
            f"rss-load-n{n}",
            "rss",
            "r",
            n,
            samples=[{"seconds": 1, "peak_tree_anon_bytes": 5, "peak_tree_rss_bytes": 6}],
        )
        for n in (1000, 2000)
    )
    assert [t.id for t in targets(figs | {small.id: small, big.id: big}, 2, (1000, 2000))][-2:] == [
        "rss-1gib",
        "rss-flat",
    ]
    big.status, big.reason = "failed", "x"
    assert targets(figs | {small.id: small, big.id: big}, 2, (1000, 2000))[-1].id == "query-2ms"


def test_target_rows_are_frozen():
    with pytest.raises(AttributeError):
        Target("t", "w", 1.0, "pass").status = "short"
