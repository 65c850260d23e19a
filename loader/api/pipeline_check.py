"""Checking a pipeline before its first step runs: every value of every step.

`check(pipeline)` runs, for each step, the checks its command makes before it writes -
the same functions (`load.check`, `ingest.check`, compact's `check_options`,
`plan_finalize`, the query's box / attrs / format / output checks), never a second copy
of their rules - against what the dataset will hold when the step runs: the layout,
format and compression the [load] or [ingest] step resolves, and the arrays the dataset
has or the [finalize] step builds. So a bad ``[finalize] duplicates`` or ``[query] out``
is refused (exit 2) before the load writes anything, not after it committed.

The error names the file (and line, or the variable or ``--set`` that gave the value),
the table and the key: ``p.toml, line 12: [finalize] duplicates: --duplicates 'x' is
unknown; ...``. To find the key, a failing step is checked again with its keys added one
at a time (the others at their defaults): the first key whose value makes it fail is
named. A step that fails with every key at its default names its main key (`_BASE_KEY`:
e.g. ``[finalize] dims``, which only scidb96 may leave out).

Reads only: nothing here writes (a source's layout may be read, as the load would).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from ..arrays.finalize import FinalizeOptions, plan_finalize
from ..arrays.query import box_columns, check_box_dims, parse_box
from ..errors import EXIT_USAGE, BulkloadError, PipelineError, UsageError
from ..infra.outputs import check_output
from ..loading import ingest as ingest_mod
from ..loading import load as load_mod
from ..maintain.compact import check_options as check_compact
from ..maintain.garbage import check_keep_snapshots
from ..model import manifest as mf
from ..model.layouts import Layout
from ..model.options import size_option
from ..model.run_retention import check_keep
from ..read.tables import check_format
from ..stores.spec import StoreSpec, parse_dataset_uri
from .pipeline import REQUIRED, SCHEMA, Pipeline, job_keys, step_arguments

if TYPE_CHECKING:
    from ..loading.job import RunSettings

Key = tuple[str, str]  # (section, key)
Config = dict[str, dict[str, Any]]  # section -> key -> value
ArrayShape = tuple[list[str], Layout, bool]  # an array's dims, cell layout, duplicates kept
#: named when a step fails with every key at its default
_BASE_KEY = {"load": "source", "ingest": "from", "compact": "target_batch_records", "finalize": "dims", "query": "box"}


@dataclass
class _Target:
    """What the dataset holds when the steps after [load] / [ingest] run."""

    layout: Layout
    format: str
    compression: str
    arrays: dict[str, ArrayShape] = field(default_factory=dict)  # name -> (dims, cell layout, keep)


def check(p: Pipeline) -> None:
    """Raise PipelineError (exit 2) naming the file, table and key of the first bad value of
    any step; other errors a step's checks raise (an unreadable source) as they are."""
    dataset = _blamed(p, [("job", "dataset")], "job", lambda v: parse_dataset_uri(v["job"]["dataset"]))
    _blamed(p, [("job", "keep_runs")], "job", lambda v: check_keep("keep_runs", v["job"].get("keep_runs")))
    source = "load" if "load" in p.steps else "ingest"
    keys = [(source, k) for k in SCHEMA[source] if k != "enabled"] + [("job", k) for k in job_keys(source)]
    settings = _blamed(p, keys, source, lambda v: _SOURCE_CHECKS[source](v, p.config["job"]["dataset"]))
    t = _Target(settings.layout, settings.format, settings.compression, _arrays_now(dataset, p))
    for step in p.steps:
        if step in _STEP_CHECKS:
            keys = [(step, k) for k in SCHEMA[step] if k != "enabled"]
            _blamed(p, keys, step, functools.partial(_STEP_CHECKS[step], t=t))


def _blamed(p: Pipeline, keys: list[Key], step: str, call: Callable[[Config], Any]) -> Any:
    """call(values) with the pipeline's values; when it raises a usage error, the key to
    blame: the first of ``keys`` whose value, added to the defaults, makes it fail."""
    try:
        return call(p.config)
    except BulkloadError as e:
        if e.exit_code != EXIT_USAGE:
            raise
        error = e
    # every key at its default; required keys (which have none) keep their values
    values = {
        s: {k: p.config[s].get(k) if key.default is REQUIRED else key.default for k, key in SCHEMA[s].items()}
        for s in p.config
    }
    failed = _fails(call, values)
    if failed is not None:
        _raise(p, (step, _BASE_KEY.get(step, keys[0][1])), failed)
    for s, k in keys:
        values[s][k] = p.config[s][k]
        failed = _fails(call, values)
        if failed is not None:
            _raise(p, (s, k), failed)
    _raise(p, keys[0], error)


def _fails(call: Callable[[Config], Any], values: Config) -> BulkloadError | None:
    try:
        call(values)
    except BulkloadError as e:
        if e.exit_code == EXIT_USAGE:
            return e
    return None


def _raise(p: Pipeline, key: Key, error: BulkloadError) -> NoReturn:
    section, name = key
    where = p.origin.get(f"{section}.{name}")
    where = p.path if where is None else where if where.startswith(p.path) else f"{p.path}: {where}"
    value = p.config.get(section, {}).get(name)
    raise PipelineError(f"{where}: [{section}] {name} = {value!r}: {error}; nothing was run") from None


def _load(v: Config, dataset: str) -> RunSettings:
    kw = step_arguments(v, "load")
    del kw["new_run"], kw["dataset"]  # what a load checks before it writes does not depend on new_run
    return load_mod.check(kw.pop("source"), dataset, **kw)


def _ingest(v: Config, dataset: str) -> RunSettings:
    kw = step_arguments(v, "ingest")
    del kw["dataset"]
    return ingest_mod.check(dataset, kw.pop("from_dir"), **kw)


def _compact(v: Config, t: _Target) -> None:
    check_compact(t.layout, t.format, t.compression, v["compact"]["target_batch_records"], v["job"]["workers"])
    check_keep_snapshots(v["compact"]["keep_snapshots"])


def _finalize(v: Config, t: _Target) -> None:
    kw = step_arguments(v, "finalize")
    budget = size_option(kw["memory_budget"] or None, "memory_budget", UsageError)
    plan = plan_finalize(
        t.layout,
        t.format,
        FinalizeOptions(
            kw["dims"],
            kw["array"],
            kw["duplicates"],
            kw["workers"],
            kw["compact"],
            "none",
            budget,
            kw["strategy"],
            kw["compression"],
            force=kw["force"],
            keep_snapshots=kw["keep_snapshots"],
        ),
    )
    a = plan.array
    t.arrays[a.name] = (list(a.dims), a.cell_layout(), a.policy == "keep")


def _query(v: Config, t: _Target) -> None:
    cfg = v["query"]
    ranges = parse_box(cfg["box"])
    check_format(cfg["format"])
    if cfg["array"] not in t.arrays:
        known = ", ".join(sorted(t.arrays)) or "none"
        raise UsageError(
            f"no array {cfg['array']!r}: the dataset has none by that name and no [finalize] "
            f"step builds it (arrays: {known})"
        )
    dims, cell, keep = t.arrays[cfg["array"]]
    check_box_dims(cfg["array"], dims, ranges)
    box_columns(cfg["array"], dims, cell, keep, cfg["attrs"])
    if cfg["out"]:
        check_output(cfg["out"])


def _arrays_now(spec: StoreSpec, p: Pipeline) -> dict[str, ArrayShape]:
    """The arrays the dataset has now (none if it does not exist or [load] replaces it)."""
    if p.get("load", "replace") or not mf.exists(spec.root):
        return {}
    try:
        m = mf.load_manifest(spec.root)
    except BulkloadError:
        return {}  # the source step's checks have read it: a damaged one is their error
    return {
        name: ([d["name"] for d in a["dims"]], Layout.from_dict(a["cell_layout"]), a["policy"] == "keep")
        for name, a in m.arrays.items()
    }


_SOURCE_CHECKS = {"load": _load, "ingest": _ingest}
_STEP_CHECKS = {"compact": _compact, "finalize": _finalize, "query": _query}
