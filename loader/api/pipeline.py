"""`bulkload run pipelines/NAME.toml [--set section.key=value ...]`: declarative jobs.

A pipeline file names a dataset and the steps to run on it, in this order:

    [job]       dataset (required), layout, format, compression, shards, workers,
                batch_records, keep_runs, checkpoint_seconds, engine, scheduler, quiet, name
    [load]      source (required), new_run, replace, on_bad_file   } exactly one
    [ingest]    from (required), pattern, on_bad_file              } of these two
    [compact]   target_batch_records, force, keep_snapshots, enabled   optional
    [finalize]  dims, array, duplicates, workers, compact, memory_budget, strategy,
                compression, force, keep_snapshots, enabled
    [query]     box (required), array, attrs, format, out, enabled

The keys are the options of the steps' public functions (api/public.py: `SCHEMA` is made
from their signatures), with their defaults: a key is the API's keyword (``[ingest] from``:
``from_dir``) and the CLI's option (``--from``); the options every step shares sit in
[job]; ``[finalize] workers`` unset takes ``[job] workers``.

A step runs when its section is present (and ``enabled`` is not false). Keys before
the first section belong to [job]. Values come from, highest first: ``--set
section.key=value`` (a bare ``key`` means ``job.key``; --set may add a section), the
environment (``BULKLOAD_SECTION_KEY``, and ``BULKLOAD_KEY`` for [job] keys, e.g.
``BULKLOAD_DATASET``, ``BULKLOAD_INGEST_FROM``; only for sections the file has), the
file, the defaults. Relative paths are relative to the working directory, as on the
command line. A malformed file, an unknown section or key, or a value of the wrong type
is an error naming the key and its line. Then, before the first step runs, every value of
every step is checked by its command's own checks (pipeline_check.py): a bad value of any
step is an error (exit 2) naming the file, the table and the key, and nothing is run.

``engine`` (local or dask) and ``scheduler`` (tcp://HOST:PORT or local:N) choose where
every step's tasks run (api/engine.py): one executor - one LocalCluster for local:N - for
the whole pipeline. They follow the same order, so ``bulkload --engine dask --scheduler
S run`` (the flags set BULKLOAD_ENGINE / BULKLOAD_SCHEDULER, which are these keys'
variables) wins over the file, and ``--set engine=...`` over both; the Python API's
``client=`` / ``engine=`` / ``scheduler=`` win over everything. The scheduler counts only
on the dask engine (as on the command line).

``keep_runs = N``: once every step succeeded, the dataset's run records are pruned to the
N newest (and the protected ones: maintain/run_prune.py), so that a cron job's run list
stays bounded; the pipeline's report lists it as a last step ``prune``. A dataset busy by
then (another job started meanwhile) is a warning, not a failure: the next run prunes.
"""

from __future__ import annotations

import os
import re
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from ..arrays.finalize import finalize
from ..errors import BulkloadError, MissingPathError, PipelineError
from ..infra import env as variables
from ..infra import logs
from ..infra.outputs import refuse_dataset_paths
from ..loading.ingest import ingest
from ..loading.load import load
from ..maintain.compact import compact
from ..maintain.run_prune import prune_after_job
from ..model.layouts import toml_text
from ..model.options import size_option
from ..model.optspec import options_of
from ..stores.spec import parse_dataset_uri
from . import public
from .commands import query
from .engine import engine_for, engine_info

# The schema: section -> key -> Key, made from the public functions' signatures (api/public.py:
# each keyword's Opt says its key, its table - the step's own or [job] - and its help), so that
# a pipeline's keys, defaults and help are the API's and the CLI's (tests/api/test_options_agree.py).
REQUIRED: Any = object()  # the default of a key that must be given


class Key(NamedTuple):
    """A pipeline key: its value type, default (REQUIRED: none), help, and the keyword of the
    step's function it sets (None: the pipeline's own, e.g. ``[job] quiet``)."""

    type: type
    default: Any
    help: str
    keyword: str | None


#: the steps, in the order they run: step -> the public function whose options it takes
STEP_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "load": public.load,
    "ingest": public.ingest,
    "compact": public.compact,
    "finalize": public.finalize,
    "query": public.query,
}
#: the [job] keys that the pipeline applies itself, once around every step (not a step's keyword)
AROUND_STEPS = ("engine", "scheduler", "keep_runs")
#: the pipeline's own keys (no function's keyword)
JOB_OWN = {
    "quiet": Key(bool, False, "No progress output (the CLI's --quiet).", None),
    "name": Key(str, None, "The pipeline's name in its report and log lines (default: the file's name).", None),
}
ENABLED = Key(bool, True, "Run this step (false: leave it out).", None)


def make_schema(functions: dict[str, Callable[..., Any]]) -> dict[str, dict[str, Key]]:
    """The sections and keys of a pipeline whose steps take the options of ``functions``."""
    job: dict[str, Key] = {}
    steps: dict[str, dict[str, Key]] = {}
    for step, fn in functions.items():
        own = steps.setdefault(step, {})
        for o in options_of(fn).values():
            if o.key is None:
                continue
            key = Key(o.value_type(), REQUIRED if o.required else o.key_default, o.opt.help, o.name)
            if o.opt.section == "job":
                job.setdefault(o.key, key)
            else:
                own[o.key] = key
        own["enabled"] = ENABLED
    return {"job": job | JOB_OWN, **steps}


SCHEMA = make_schema(STEP_FUNCTIONS)
STEPS = tuple(STEP_FUNCTIONS)
TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


@dataclass
class Pipeline:
    path: str
    config: dict[str, dict[str, Any]]  # section -> key -> value (defaults filled in)
    origin: dict[str, str]  # "section.key" -> where the value came from

    def get(self, section: str, key: str) -> Any:
        return self.config.get(section, {}).get(key)

    @property
    def steps(self) -> list[str]:
        return [s for s in STEPS if s in self.config and self.config[s].get("enabled", True)]


def key_lines(text: str) -> dict[str, int]:
    """'section.key' (and '[section]') -> line number, by scanning the text (tomllib has no
    positions). Keys before any section are in 'job'."""
    out: dict[str, int] = {}
    section = "job"
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.match(r"^\[\s*([^\]]+?)\s*\]", s)
        if m and not s.startswith("[["):
            section = m.group(1).strip().strip("\"'")
            out.setdefault(f"[{section}]", no)
            continue
        m = re.match(r"""^("[^"]*"|'[^']*'|[A-Za-z0-9_\-\.]+)\s*=""", s)
        if m:
            key = m.group(1).strip("\"'")
            out.setdefault(f"{section}.{key}", no)
    return out


def _where(path: str, lines: dict[str, int], name: str) -> str:
    n = lines.get(name)
    return f"{path}, line {n}" if n else path


def _convert(value: Any, typ: type, name: str, where: str, from_text: bool) -> Any:
    """``value`` as ``typ`` (from an environment variable or --set: parsed from text), else
    PipelineError "WHERE: key NAME must be ..." (``name``: "'k' in [section]")."""
    if from_text and not isinstance(value, typ):
        text = str(value).strip()
        try:
            if typ is bool:
                low = text.lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off"):
                    return False
                raise ValueError
            if typ is int:
                return int(text.replace("_", ""), 0)
            if typ is float:
                return float(text)
            return text
        except ValueError:
            raise PipelineError(f"{where}: key {name} must be {TYPE_NAMES[typ]}, not {text!r}") from None
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if (typ is int and isinstance(value, bool)) or not isinstance(value, typ):
        raise PipelineError(f"{where}: key {name} must be {TYPE_NAMES[typ]}, not {value!r}")
    return value


def parse(path: str, sets: list[str] | None = None, env: Mapping[str, str] | None = None) -> Pipeline:
    """Read a pipeline file and apply, over its values, the environment and ``--set``;
    then defaults and the rules (required keys, exactly one of [load] / [ingest])."""
    data, lines = _read(path)
    config, origin = _from_file(path, data, lines)
    _from_env(config, origin, os.environ if env is None else env)
    _from_sets(config, origin, sets or [])
    _finish(path, lines, config)
    return Pipeline(path, config, origin)


def _read(path: str) -> tuple[dict[str, Any], dict[str, int]]:
    """(the TOML data, key_lines of its text)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise MissingPathError(f"pipeline file {path} does not exist") from None
    except OSError as e:
        raise PipelineError(f"cannot read pipeline file {path}: {e.strerror or e}") from None
    text = toml_text(raw, path, PipelineError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PipelineError(f"{path}: not valid TOML: {e}") from None
    return data, key_lines(text)


def _from_file(
    path: str, data: dict[str, Any], lines: dict[str, int]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The file's sections and keys, checked against SCHEMA; (config, origin)."""
    config: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in SCHEMA:
                raise PipelineError(
                    f"{_where(path, lines, f'[{key}]')}: unknown section [{key}]; known sections: {', '.join(SCHEMA)}"
                )
            section, items = key, value
        else:
            section, items = "job", {key: value}
        known = SCHEMA[section]
        for k, v in items.items():
            name = f"{section}.{k}"
            where = _where(path, lines, name)
            if k not in known:
                raise PipelineError(f"{where}: unknown key '{k}' in [{section}]; known keys: {', '.join(known)}")
            if isinstance(v, dict):
                raise PipelineError(f"{where}: key '{k}' in [{section}] must be a value, not a table")
            config.setdefault(section, {})[k] = _convert(v, known[k].type, f"'{k}' in [{section}]", where, False)
            origin[name] = where
        config.setdefault(section, {})
    return config, origin


def _from_env(config: dict[str, dict[str, Any]], origin: dict[str, str], env: Mapping[str, str]) -> None:
    """BULKLOAD_SECTION_KEY (and BULKLOAD_KEY for [job]) of the sections the file has."""
    for section in list(config):
        for k, key in SCHEMA[section].items():
            typ = key.type
            names = [f"BULKLOAD_{section.upper()}_{k.upper()}"]
            if section == "job":
                names.append(f"BULKLOAD_{k.upper()}")
            for var in names:
                if var in env:
                    config[section][k] = _convert(
                        env[var], typ, f"'{k}' in [{section}]", f"environment variable {var}", True
                    )
                    origin[f"{section}.{k}"] = f"environment variable {var}"
                    break


def _from_sets(config: dict[str, dict[str, Any]], origin: dict[str, str], sets: list[str]) -> None:
    """``--set section.key=value`` (a bare key means job.key; a section may be added)."""
    for item in sets:
        if "=" not in item:
            raise PipelineError(f"--set {item!r}: use --set section.key=value (e.g. --set load.source=FILE)")
        name, value = item.split("=", 1)
        name = name.strip()
        section, _, k = name.rpartition(".")
        section = section or "job"
        if section not in SCHEMA:
            raise PipelineError(f"--set {item!r}: unknown section [{section}]; known sections: {', '.join(SCHEMA)}")
        if k not in SCHEMA[section]:
            raise PipelineError(
                f"--set {item!r}: unknown key '{k}' in [{section}]; known keys: {', '.join(SCHEMA[section])}"
            )
        config.setdefault(section, {})[k] = _convert(
            value, SCHEMA[section][k].type, f"'{k}' in [{section}]", f"--set {name}", True
        )
        origin[f"{section}.{k}"] = f"--set {name}"


def _finish(path: str, lines: dict[str, int], config: dict[str, dict[str, Any]]) -> None:
    """Defaults, required keys, and exactly one of [load] / [ingest]."""
    config.setdefault("job", {})
    for section, values in config.items():
        for k, key in SCHEMA[section].items():
            default = key.default
            if k in values:
                continue
            if default is REQUIRED:
                if section in ("load", "ingest", "query") and values.get("enabled") is False:
                    continue
                raise PipelineError(f"{_where(path, lines, f'[{section}]')}: [{section}] needs the key '{k}'")
            values[k] = default
    src = [s for s in ("load", "ingest") if s in config and config[s]["enabled"]]
    if len(src) != 1:
        what = "both [load] and [ingest]" if src else "neither [load] nor [ingest]"
        raise PipelineError(
            f"{path}: a pipeline needs exactly one of [load] (source = ...) or [ingest] (from = ...); it has {what}"
        )


@dataclass
class PipelineReport:
    """The report of `bulkload run`: one entry per step, each with the step's own report."""

    pipeline: str
    path: str
    dataset: str
    steps: list[dict[str, Any]] = field(default_factory=list)  # {"step", "seconds", "report": the step's to_dict()}
    seconds: float = 0.0
    engine: dict[str, Any] = field(default_factory=dict)  # off the local pool: engine, scheduler, workers, retries

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        used: dict[str, Any] = d.pop("engine")
        return d | used


def run(
    path: str,
    sets: list[str] | None = None,
    *,
    progress: str = "auto",
    env: Mapping[str, str] | None = None,
    client: Any = None,
    engine: str | None = None,
    scheduler: str | None = None,
    check: bool = False,
) -> PipelineReport:
    """Parse and run a pipeline; returns a report with one entry per step. ``client`` /
    ``engine`` / ``scheduler``: where its tasks run (over the file's [job] keys). Every
    value of every step is checked first; ``check``: only that (each step's entry is
    ``{"step", "checked": True}``), nothing is run."""
    p = parse(path, sets, env)
    _check_outputs(p)
    name, where = _engine_choice(p, client, engine, scheduler)
    check_steps(p)
    if check:
        return PipelineReport(
            pipeline=_name(p),
            path=path,
            dataset=p.config["job"]["dataset"],
            steps=[{"step": s, "checked": True} for s in p.steps],
        )
    with engine_for(p.config["job"]["dataset"], client, name, where) as ex:
        report = _run_steps(p, progress)
    report.engine = engine_info(ex)
    return report


def _check_outputs(p: Pipeline) -> None:
    """A [query] out inside a dataset (the job's, or any other) is refused before any step."""
    q = p.config.get("query")
    if q and q["enabled"] and q["out"]:
        try:
            root = parse_dataset_uri(p.config["job"]["dataset"]).root
        except BulkloadError:  # a bad dataset URI: check_steps names it, with its line
            root = None
        refuse_dataset_paths(q["out"], (root,) if root else (), what=f"{p.path}: [query] out")


def check_steps(p: Pipeline) -> None:
    """Every value of every step, checked before the first step runs (pipeline_check.py)."""
    from .pipeline_check import check  # it imports this module's SCHEMA

    check(p)


def _engine_choice(
    p: Pipeline, client: Any, engine: str | None, scheduler: str | None
) -> tuple[str | None, str | None]:
    """(engine, scheduler) for engine_for: the caller's, else the [job] keys (checked)."""
    job = p.config["job"]
    for key, ok, what in (
        ("engine", lambda v: v.strip().lower() in variables.ENGINES, "local or dask"),
        ("scheduler", variables.scheduler_ok, variables.SCHEDULER_FORMS + " (N >= 1)"),
    ):
        if job.get(key) is not None and not ok(job[key]):
            where = p.origin.get(f"job.{key}", p.path)
            where = where if where.startswith(p.path) else f"{p.path}: {where}"
            raise PipelineError(f"{where}: [job] {key} must be {what}, not {job[key]!r}")
    name = engine or ("dask" if client is not None else job.get("engine"))
    return name, (scheduler or job.get("scheduler")) if (name or "").strip().lower() == "dask" else None


def _run_steps(p: Pipeline, progress: str) -> PipelineReport:
    path = p.path
    job = p.config["job"]
    if job.get("quiet"):
        progress = "none"
    dataset = job["dataset"]
    name = _name(p)
    report = PipelineReport(pipeline=name, path=path, dataset=dataset)
    t0 = time.perf_counter()
    _event(progress, f"pipeline {name}: {' -> '.join(p.steps)} on {dataset}", pipeline=name, steps=p.steps)
    for step in p.steps:
        t = time.perf_counter()
        _event(progress, f"pipeline {name}: step {step}", pipeline=name, step=step, event="step-start")
        try:
            out = _STEP[step](step_arguments(p.config, step), progress)
        except BulkloadError as e:
            _event(
                progress,
                f"pipeline {name}: step {step} failed: {e}",
                level="error",
                pipeline=name,
                step=step,
                event="step-failed",
            )
            if len(e.args) == 1 and isinstance(e.args[0], str):
                e.args = (f"pipeline {name}, step {step}: {e.args[0]}",)
            raise
        report.steps.append({"step": step, "seconds": round(time.perf_counter() - t, 4), "report": out})
    if job.get("keep_runs") is not None:
        _keep_runs(report, dataset, job["keep_runs"], progress)
    report.seconds = round(time.perf_counter() - t0, 4)
    _event(progress, f"pipeline {name}: done in {report.seconds:.2f} s", pipeline=name, event="done")
    return report


def _keep_runs(report: PipelineReport, dataset: str, keep: int, progress: str) -> None:
    """``[job] keep_runs``: prune the run records after a successful job (busy: a warning)."""
    t = time.perf_counter()
    out = prune_after_job(dataset, keep, progress)
    if out is not None:
        report.steps.append({"step": "prune", "seconds": round(time.perf_counter() - t, 4), "report": out.to_dict()})


def _name(p: Pipeline) -> str:
    return p.config["job"].get("name") or os.path.splitext(os.path.basename(p.path))[0]


def _event(progress: str, message: str, **fields: Any) -> None:
    logs.note(progress == "none", message, **fields)


def job_keys(step: str) -> list[str]:
    """The [job] keys that ``step``'s function takes (not the dataset, not `AROUND_STEPS`)."""
    return [
        o.key
        for o in options_of(STEP_FUNCTIONS[step]).values()
        if o.key is not None and o.opt.section == "job" and o.key not in ("dataset", *AROUND_STEPS)
    ]


def step_arguments(config: dict[str, dict[str, Any]], step: str) -> dict[str, Any]:
    """The keywords of ``step``'s function: its table's keys and the [job] keys it takes (an
    unset key of an ``inherit`` option: the [job] key's value; not `AROUND_STEPS`)."""
    job, own = config["job"], config[step]
    out: dict[str, Any] = {}
    for o in options_of(STEP_FUNCTIONS[step]).values():
        if o.key is None or o.key in AROUND_STEPS:
            continue
        value = job[o.key] if o.opt.section == "job" else own[o.key]
        if value is None and o.opt.inherit:
            value = job.get(o.key)  # [finalize] workers: [job] workers (0 is refused, not a default)
        out[o.name] = value
    return out


def _step_load(kw: dict[str, Any], progress: str) -> dict[str, Any]:
    return load(kw.pop("source"), kw.pop("dataset"), progress=progress, **kw).to_dict()


def _step_ingest(kw: dict[str, Any], progress: str) -> dict[str, Any]:
    return ingest(kw.pop("dataset"), kw.pop("from_dir"), progress=progress, **kw).to_dict()


def _step_compact(kw: dict[str, Any], progress: str) -> dict[str, Any]:
    return compact(kw.pop("dataset"), progress=progress, **kw).to_dict()


def _step_finalize(kw: dict[str, Any], progress: str) -> dict[str, Any]:
    budget = size_option(kw.pop("memory_budget") or None, "memory_budget", PipelineError)
    return finalize(kw.pop("dataset"), progress=progress, memory_budget=budget, **kw).to_dict()


def _step_query(kw: dict[str, Any], progress: str) -> dict[str, Any]:
    out_file, fmt = kw["out"], kw["format"]
    table = query(**(kw | {"format": fmt if out_file else None}))
    out = {"box": kw["box"], "array": kw["array"], "rows": table.num_rows}
    if out_file:
        out.update(out_file=out_file, format=fmt)
    return out


_STEP = {
    "load": _step_load,
    "ingest": _step_ingest,
    "compact": _step_compact,
    "finalize": _step_finalize,
    "query": _step_query,
}
