"""The plan of a benchmark run (loader/bench/plan.py): the sizes every suite measures after
--n, --repeats and overrides, and the directories it writes. No measurement here."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader.bench.plan import SECTIONS, SUITES, make_plan, suite_params
from loader.errors import UsageError

SECONDARY = ("n_naive", "n_builder", "n_tiledb")


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_defaults_are_the_suites_own(suite):
    p = suite_params(suite)
    base = SUITES[suite]
    assert (p.n, p.repeats, p.rss_n, p.sections) == (base.n, base.repeats, base.rss_n, base.sections)
    assert p.n_arctic == p.n  # ArcticDB writes as many records as the main figures by default
    assert set(p.sections) <= set(SECTIONS)


@given(suite=st.sampled_from(sorted(SUITES)), n=st.integers(1000, 10**9))
def test_secondary_sizes_scale_down_with_n_never_up(suite, n):
    base, p = SUITES[suite], suite_params(suite, n=n)
    assert p.n == n == p.n_arctic
    for k in SECONDARY:
        if getattr(base, k) == 0:  # a size the suite does not use (the catalog suite has no peers)
            assert getattr(p, k) == 0
        elif n >= base.n:
            assert getattr(p, k) == getattr(base, k)
        else:
            assert 1000 <= getattr(p, k) <= getattr(base, k)
            assert getattr(p, k) == max(1000, int(getattr(base, k) * (n / base.n)))
    # the memory-flat-in-N pair is measured only at the suite's own size or above
    assert p.rss_n == (base.rss_n if n >= base.n else None)


def test_overrides_apply_and_none_keeps():
    p = suite_params("full", rss_n=(2000, 5000), n_arctic=None, query_reps=7)
    assert (p.rss_n, p.query_reps, p.n_arctic) == ((2000, 5000), 7, p.n)
    assert suite_params("quick", repeats=5, n_builder=None).n_builder == SUITES["quick"].n_builder
    with pytest.raises(TypeError):
        suite_params("quick", no_such_size=3)


@pytest.mark.parametrize("kw", [dict(n=999), dict(n=1), dict(repeats=0), dict(repeats=-1)])
def test_too_small_is_a_value_error(kw):
    with pytest.raises(ValueError, match="--repeats must be >= 1 and --n >= 1000"):
        suite_params("quick", **kw)


def test_unknown_suite():
    with pytest.raises(ValueError, match="unknown suite 'huge'; use one of quick, full"):
        suite_params("huge")


def test_parameters_json_leaves_the_sections_out():
    d = suite_params("quick", n=5000).to_dict()
    assert list(d) == [
        "n",
        "repeats",
        "n_naive",
        "n_builder",
        "n_tiledb",
        "n_arctic",
        "query_reps",
        "rss_n",
        "compressed",
        "random_tasks",
        "workloads",
    ]
    assert d["n"] == 5000


def test_plan_directories_and_selection(tmp_path):
    plan = make_plan("quick", n=2000, out=tmp_path / "a" / "out", only={"gen-pipe", "peers"})
    assert plan.out.is_dir() and plan.work_parent == plan.out
    assert plan.only == frozenset({"gen-pipe", "peers"}) and plan.sections == SUITES["quick"].sections
    plan = make_plan("full", out=tmp_path / "out", work=tmp_path / "w", sections=("limits",))
    assert plan.work_parent.is_dir() and plan.work_parent.name == "w"
    assert plan.sections == ("limits",) and plan.only is None


@pytest.mark.parametrize("which", ["out", "work"])
def test_a_file_where_a_directory_goes_is_a_usage_error(tmp_path, which):
    f = tmp_path / "file"
    f.write_text("x")
    kw = {"out": tmp_path / "out", which: f}
    with pytest.raises(UsageError, match="exists and is not a directory"):
        make_plan("quick", **kw)
    assert f.read_text() == "x"


def test_workloads_default_to_both_and_scidb96_is_always_measured():
    assert suite_params("quick").workloads == ("scidb96", "ticks")
    assert suite_params("quick", workloads=("ticks",)).workloads == ("scidb96", "ticks")
    assert suite_params("full", workloads=("scidb96",)).workloads == ("scidb96",)
    with pytest.raises(ValueError, match=r"unknown workload.s. trades; use scidb96, ticks"):
        suite_params("quick", workloads=("trades",))
