"""`bulkload bench`: throughput against the hardware, the way the SciDB binary-load example
and ArcticDB's "hardware limit" notes do it.

Every figure is measured ``repeats`` times in a fresh subprocess (so that its whole process
tree can be sampled for peak RSS), and reported as the median and min-max of the samples in
MB/s (10**6 bytes of 96-byte ``scidb96`` records per second) and records/s, with its ratio to
the matching reference limit measured *in the same run*.

Sections (a suite runs them in this order; the suites and their sizes are in `plan`):

``limits``   reference limits (`limits`): ``bulkload-gen`` -> /dev/null, -> a pipe, -> a file,
             -> a file + fsync (the disk's limit), -> /dev/shm; all cores generating in
             parallel; the C generator in-process; np.save + fsync / np.load of the same bytes;
             a cold read (file evicted from the page cache with posix_fadvise DONTNEED).
``versus``   bulkload's durable, compressed and file loads round-robin with ArcticDB's write
             and TileDB's sparse write (`versus`), the disk limit sampled between the rounds;
             the ratios bulkload / peer with the spread of the per-round ratios (`compare`)
             and the bytes each takes on disk.
``load``     ``bulkload load`` (`loads`; the CLI, in a subprocess; the time is the report's own,
             from the start of load() to the committed, fsynced manifest): 1 worker vs all,
             capnp vs Arrow (none/lz4/zstd), lmdb vs rocksdb vs mem, stdin pipe vs in-process.
``scaling``  load over workers 1..cores (shards = cores).
``finalize`` ``loader.arrays.finalize.finalize`` (`finalize`) with 1 and all workers on a fresh
             copy of a loaded dataset each repeat; then the warm latency of a ~1,000-cell box
             query from Python.
``peers``    naive peers on the same records (`peers`): py-lmdb one key per record, py-lmdb one
             key per 10,000-record blob, rocksdict WriteBatch, the pycapnp builder field by
             field. (ArcticDB and TileDB, from the ``bulkload[peers]`` extra, are in
             ``versus``; a peer not installed is "skipped: not installed".)
``random``   (full suite) cold random reads (`randreads`): read_records of scattered ranges
             and box queries, readahead off vs on vs np.memmap of the raw records, 1 and 2
             threads.
``rss``      (full suite) peak RSS of the whole load job for a large N vs a small N.
``reads``    (issue 31) full, one-column, 1 % range reads and DuckDB GROUP BY over a scan,
             and `bulkload scan --out -`, against ArcticDB's read, DuckDB and a Parquet read
             of the same records (scidb96 and random values), interleaved (`reads`).
``ticks``    (issue 30) gen://ticks: load vs ArcticDB's and a Parquet write, read vs
             ArcticDB's, bytes on disk, a 1-hour box (`ticks`); skipped without gen://ticks.
``catalog``  (catalog suite, issue 29) the metadata's cost over 1,000 .. 1,000,000 batch rows:
             a small append, an open, `info`, `verify`'s memory; the 20M load with 100-record
             batches vs the default load (`catalog`).

Output (`report.write_outputs`), NAME the suite's (`output_name`: ``quick``, ``full``,
``catalog``; a run of some sections, e.g. ``reads-ticks``): ``NAME.json`` (schema
``bulkload-bench`` version :data:`report.SCHEMA_VERSION`), ``NAME.md`` (tables),
``NAME-throughput.png``, ``NAME-scaling.png``, ``NAME-rss.png`` (the catalog suite: one plot,
``catalog.png``), each replacing the run before's; and one line per run appended to
``history.jsonl`` in the same directory (`report.append_history`). Nothing else: a run
writes no per-run copies, the history keeps every run's figures.

Invariants: the result (`BenchResult.to_dict`) holds every figure declared, measured or
with the reason it was not, and the targets computed from them (`targets`).

Crash behaviour: the run's work directory and its mem:// datasets are removed in a
``finally``; the outputs are written only once the whole suite has run.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..infra.regular import read_regular
from .catalog import catalog_targets, section_catalog
from .compare import comparison_lines, comparisons
from .figures import Figure
from .finalize import section_finalize
from .limits import disk_sample, section_limits
from .loads import section_load, section_rss, section_scaling
from .machine import git_info, library_versions, machine_info
from .peers import native_versions, section_peers
from .plan import SECTIONS, Plan, make_plan
from .processes import warm_for
from .randreads import section_random
from .reads import read_targets, section_reads
from .records import DIMS, LAYOUT, RECORD_SIZE, box
from .report import SCHEMA, SCHEMA_VERSION, append_history, write_outputs
from .runner import Bench
from .targets import Target, targets
from .ticks import section_ticks, ticks_targets
from .versus import bulkload_ids, section_versus

SECTION_RUNNERS: dict[str, Callable[[Bench], None]] = {
    "limits": section_limits,
    "versus": section_versus,
    "load": section_load,
    "scaling": section_scaling,
    "finalize": section_finalize,
    "peers": section_peers,
    "random": section_random,
    "rss": section_rss,
    "reads": section_reads,
    "ticks": section_ticks,
    "catalog": section_catalog,
}

#: how the catalog section commits its many small runs (catalog.py), said in its parameters
RUNS_HELPER = (
    "bench helper (loader.bench.catalog.child_catalog_runs): runs appended through the manifest's own "
    "commit, loader.model.manifest.load_manifest + Manifest.save under the dataset lock, "
    "runs_per_commit runs per commit; each a finished load of 0 records with its own source"
)


@dataclass
class BenchResult:
    """One run of a suite; `to_dict` is the JSON document (schema ``bulkload-bench``)."""

    suite: str
    started: str
    duration_s: float
    machine: dict
    versions: dict
    git: dict
    parameters: dict
    figures: dict[str, Figure]
    targets: list[Target]
    comparisons: list[dict] = field(default_factory=list)  # compare.comparisons

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "suite": self.suite,
            "started": self.started,
            "duration_s": self.duration_s,
            "machine": self.machine,
            "versions": self.versions,
            "git": self.git,
            "parameters": self.parameters,
            "figures": {k: f.to_dict(self.figures) for k, f in self.figures.items()},
            "targets": [t.to_dict() for t in self.targets],
            "comparisons": self.comparisons,
            "skipped": [
                {"id": k, "status": f.status, "reason": f.reason} for k, f in self.figures.items() if f.status != "ok"
            ],
        }


def parameters(b: Bench) -> dict:
    """The JSON's ``parameters``: the records, the machine's shards, the sizes of the run."""
    return {
        "layout": LAYOUT,
        "record_size": RECORD_SIZE,
        "mb": "10**6 bytes",
        "cores": b.cores,
        "shards": b.cores,
        "dims": DIMS,
        "box": box(b.p.n),
        **b.p.to_dict(),
        "sections": list(b.plan.sections),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
    } | ({"runs_helper": RUNS_HELPER} if "catalog" in b.plan.sections else {})


def run_plan(plan: Plan, log: Callable[[str], None] | None = None) -> BenchResult:
    """Run the plan's sections in order; every figure's measurement (or reason) is in the result."""
    b = Bench(plan, log)
    warm_for(b.p.n * RECORD_SIZE)  # every sample starts from settled memory (processes.settle)
    t0 = time.perf_counter()
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    work = b.open_work()
    machine = machine_info(work)
    b.log(
        f"bulkload bench --suite {plan.suite}: n={b.p.n:,} records "
        f"({b.p.n * RECORD_SIZE / 1e9:.2f} GB), {b.p.repeats} repeats, "
        f"{b.cores} cores, work dir {work} ({machine['filesystem'].get('type')})"
    )
    try:
        for sec in SECTIONS:
            if sec in plan.sections:
                SECTION_RUNNERS[sec](b)
        if "gen-file-fsync" in b.figures:  # the disk limit after everything else, too
            disk_sample(b, "end of run")
            b.report(b.figures["gen-file-fsync"])
    finally:
        b.close_work()
    machine["loadavg_at_end"] = list(os.getloadavg())
    duration = time.perf_counter() - t0
    versus = comparisons(b.figures, bulkload_ids(b.cores, b.p.compressed), b.cores)
    for line in comparison_lines(versus):
        b.log(line)
    goals = targets(b.figures, b.cores, b.p.rss_n, plan.suite) if set(plan.sections) - {"catalog"} else []
    goals += read_targets(b.figures) + ticks_targets(b.figures)
    goals += catalog_targets(b.figures, baseline(b.p.baseline))
    return BenchResult(
        plan.suite,
        started,
        round(duration, 1),
        machine,
        library_versions() | native_versions(),
        git_info(),
        parameters(b),
        b.figures,
        goals,
        versus,
    )


def baseline(path: str | None) -> dict | None:
    """The result of an earlier run (the catalog suite's "before"), read from its JSON file."""
    if path is None:
        return None
    try:  # a FIFO or a device is refused, never read (it could block or never end)
        return json.loads(read_regular(path, advice="give the catalog.json of an earlier run"))
    except (OSError, ValueError) as e:  # DamagedDatasetError (not a regular file) is a ValueError
        raise ValueError(f"--baseline {path}: cannot read a bench result from it ({e})") from None


def output_name(suite: str, sections: tuple[str, ...] | None = None, only: object = None) -> str:
    """The name of a run's files: the suite's (``quick``); a run of some sections, theirs
    joined (``reads-ticks``); a run of some figures, ``SUITE-figures``: a partial run never
    replaces the whole suite's latest files."""
    if only:
        return f"{suite}-figures"
    return "-".join(sections) if sections else suite


def run(
    suite: str = "quick",
    *,
    n: int | None = None,
    repeats: int | None = None,
    out: str | Path = "bench-results",
    log: Callable[[str], None] | None = None,
    name: str | None = None,
    label: str | None = None,
    **kw,
) -> dict:
    """Run a suite and write its outputs (NAME.json, NAME.md, plots) into ``out``, and append
    its line (with ``label``) to ``out``/history.jsonl; returns the result, with the paths
    written under ``outputs``. NAME: `output_name` unless given. ``kw``: ``work``, ``sections``, ``only`` and overrides of the suite's
    sizes (`plan.SuiteParams`)."""
    if kw.get("baseline") is not None:
        baseline(kw["baseline"])  # an unreadable baseline is a usage error before anything runs
    plan = make_plan(suite, n=n, repeats=repeats, out=out, **kw)
    result = run_plan(plan, log).to_dict()
    result["outputs"] = write_outputs(result, out, name or output_name(suite, kw.get("sections"), kw.get("only")))
    result["outputs"]["history"] = append_history(result, out, label)
    return result
