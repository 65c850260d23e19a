"""The suites (quick, full, catalog), their sections, and the plan of one run: the sizes of every
figure after ``--n`` / ``--repeats`` and the caller's overrides, the sections and figure ids
selected, and the directories written.

Invariants: ``n`` is the record count of the main figures; the secondary sizes (naive
peers, the pycapnp builder, TileDB) scale down with a smaller ``n`` (never below 1,000,
never up past the suite's own; 0, not in the suite, stays 0), and the memory-flat-in-N pair (``rss_n``) is dropped then;
``n >= 1000`` and ``repeats >= 1`` or the plan is a ValueError; ``n_arctic`` defaults to
``n``. Sections always run in the order of `SECTIONS`.

Crash behaviour: `make_plan` creates the output and work directories (through
`infra.outputs.output_dir`, which reports an unusable path as a usage error) and nothing
else.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..infra.outputs import output_dir, refuse_dataset_paths
from .records import check_workloads

SECTIONS = ("limits", "versus", "load", "scaling", "finalize", "peers", "random", "rss", "reads", "ticks", "catalog")


@dataclass(frozen=True)
class SuiteParams:
    """The sizes of one run; every field but ``sections`` goes into the JSON's parameters."""

    n: int
    repeats: int
    n_naive: int  # 0: not in the suite (the catalog suite has no peers)
    n_builder: int
    n_tiledb: int
    n_arctic: int | None
    query_reps: int
    rss_n: tuple[int, int] | None
    sections: tuple[str, ...]
    compressed: tuple[str, ...] = ("capnp:lz4", "capnp:zstd")  # FORMAT:COMPRESSION loads vs ArcticDB
    random_tasks: int = 1000  # random reads per sample (the random section)
    # the catalog section (catalog.py): datasets of these many batch rows of that many records
    catalog_batches: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    catalog_batch_records: int = 10
    max_batches: int | None = None  # keep the catalog sizes up to this one (catalog.sizes)
    runs_per_commit: int | None = None  # the runs helper's (None: at most 100 commits a size)
    catalog_append_records: int = 1000
    baseline: str | None = None  # a catalog result of the code before: the "before" of its targets
    before: str | None = None  # the command of the code before's bulkload: its loads interleaved in the run
    workloads: tuple[str, ...] = ("scidb96", "ticks")  # of the load section (records.WORKLOADS)

    def to_dict(self) -> dict:
        """Every size but ``sections``; the catalog section's only in a suite that has it."""
        left_out = {"sections"} | (set() if "catalog" in self.sections else set(CATALOG_FIELDS))
        return {k: v for k, v in asdict(self).items() if k not in left_out}


#: the sizes only the catalog section uses
CATALOG_FIELDS = (
    "catalog_batches",
    "catalog_batch_records",
    "max_batches",
    "runs_per_commit",
    "catalog_append_records",
    "baseline",
    "before",
)

#: parameters of each suite; ``n`` is the record count of the main figures
SUITES: dict[str, SuiteParams] = {
    "quick": SuiteParams(
        n=1_000_000,
        repeats=3,
        n_naive=200_000,
        n_builder=20_000,
        n_tiledb=200_000,
        n_arctic=None,
        query_reps=50,
        rss_n=None,
        sections=("limits", "versus", "load", "scaling", "finalize", "peers", "reads", "ticks"),
    ),
    "full": SuiteParams(
        n=20_000_000,
        repeats=3,
        n_naive=2_000_000,
        n_builder=200_000,
        n_tiledb=2_000_000,
        n_arctic=None,
        query_reps=200,
        rss_n=(2_000_000, 50_000_000),
        sections=("limits", "versus", "load", "scaling", "finalize", "peers", "random", "rss", "reads", "ticks"),
    ),
    # issue 29: metadata costs over 1k..1M batch rows; n: the records of the two big loads
    "catalog": SuiteParams(
        n=20_000_000,
        repeats=3,
        n_naive=0,
        n_builder=0,
        n_tiledb=0,
        n_arctic=None,
        query_reps=0,
        rss_n=None,
        sections=("catalog",),
    ),
}


def suite_params(suite: str, n: int | None = None, repeats: int | None = None, **overrides) -> SuiteParams:
    """The suite's parameters with the overrides (None: keep), ``n`` and ``repeats`` applied."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; use one of {', '.join(SUITES)}")
    p = replace(SUITES[suite], **{k: v for k, v in overrides.items() if v is not None})
    if n is not None:
        p = _scaled(p, n)
    if repeats is not None:
        p = replace(p, repeats=repeats)
    if p.repeats < 1 or p.n < 1000:
        raise ValueError("--repeats must be >= 1 and --n >= 1000")
    if p.max_batches is not None and p.max_batches < 2:
        raise ValueError("--max-batches must be >= 2")
    p = replace(p, workloads=check_workloads(p.workloads))
    return replace(p, n_arctic=p.n_arctic or p.n)


def _scaled(p: SuiteParams, n: int) -> SuiteParams:
    """Scale the secondary sizes down with n (never up past the suite's own)."""
    scale = n / p.n
    if scale >= 1:
        return replace(p, n=n)
    smaller = {
        k: max(1000, min(getattr(p, k), int(getattr(p, k) * scale)))
        for k in ("n_naive", "n_builder", "n_tiledb")
        if getattr(p, k)
    }  # 0: not in the suite
    return replace(p, n=n, rss_n=None if p.rss_n else p.rss_n, **smaller)


@dataclass(frozen=True)
class Plan:
    """One run: the suite, its parameters, what is selected, where it writes."""

    suite: str
    params: SuiteParams
    sections: tuple[str, ...]
    only: frozenset[str] | None  # figure ids or groups to measure; None: all of the sections
    out: Path
    work_parent: Path  # the run's work directory is created (and removed) inside


def make_plan(
    suite: str = "quick",
    *,
    n: int | None = None,
    repeats: int | None = None,
    out: str | Path = "bench-results",
    work: str | Path | None = None,
    sections: tuple[str, ...] | None = None,
    only: set[str] | None = None,
    **overrides,
) -> Plan:
    params = suite_params(suite, n, repeats, **overrides)
    if work:  # refused before --out is created
        refuse_dataset_paths(str(work), what="--work", directory=True)
    out_dir = Path(output_dir(str(out)))
    work_parent = Path(output_dir(str(work), "--work")) if work else out_dir
    return Plan(
        suite,
        params,
        tuple(sections or params.sections),
        None if only is None else frozenset(only),
        out_dir,
        work_parent,
    )
