"""A benchmark result as files (loader/bench/report.py, plots.py, suite.BenchResult): the
JSON schema, `validate`, the Markdown tables, the PNG plots, re-rendering from a JSON on disk,
and no plots (a warning, not an error) without matplotlib. Results are built from given
samples and the real machine description; nothing is timed."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loader.bench.figures import Figure
from loader.bench.machine import git_info, library_versions, machine_info
from loader.bench.plan import suite_params
from loader.bench.report import SCHEMA, SCHEMA_VERSION, markdown, validate, write_outputs
from loader.bench.suite import BenchResult
from loader.bench.targets import targets

PNG = b"\x89PNG\r\n\x1a\n"


def result_of(tmp_path: Path) -> dict:
    p = suite_params("quick", n=1000)
    s = {"peak_tree_rss_bytes": 50 << 20, "peak_tree_anon_bytes": 20 << 20}
    figs = [
        Figure(
            "gen-file-fsync", "limits", "bulkload-gen -> file + fsync (disk limit)", 1000, samples=[{"seconds": 0.001}]
        ),
        Figure(
            "load-lmdb-capnp-w1",
            "load",
            "load | one worker",
            1000,
            limit="gen-file-fsync",
            workers=1,
            samples=[{"seconds": 0.004, **s}, {"seconds": 0.002, **s}],
        ),
        Figure(
            "load-lmdb-capnp-w2",
            "load",
            "load two",
            1000,
            limit="gen-file-fsync",
            workers=2,
            samples=[{"seconds": 0.003, **s}],
        ),
        Figure("finalize-w1", "finalize", "finalize", 1000, status="failed", reason="RuntimeError: boom"),
        Figure(
            "query-box-1000",
            "query",
            "box query",
            1000,
            kind="latency",
            samples=[{"seconds": 0.0005, "cells": 750, **s}],
        ),
        Figure(
            "peer-tiledb-write",
            "peers",
            "TileDB",
            1000,
            status="skipped",
            reason="skipped: not installed (pip install 'bulkload[peers]')",
        ),
        Figure("gen-pipe", "limits", "pipe", 1000, status="skipped", reason="not selected"),
    ]
    figures = {f.id: f for f in figs}
    return BenchResult(
        "quick",
        "2026-01-01T00:00:00+00:00",
        1.5,
        machine_info(tmp_path),
        library_versions(),
        git_info(),
        {"layout": "scidb96", "record_size": 96, **p.to_dict()},
        figures,
        targets(figures, 2, None),
    ).to_dict()


def test_the_json_document(tmp_path):
    res = result_of(tmp_path)
    assert validate(res) == []
    assert list(res) == [
        "schema",
        "schema_version",
        "suite",
        "started",
        "duration_s",
        "machine",
        "versions",
        "git",
        "parameters",
        "figures",
        "targets",
        "comparisons",
        "skipped",
    ]
    assert (res["schema"], res["schema_version"]) == (SCHEMA, SCHEMA_VERSION) == ("bulkload-bench", 1)
    assert res["skipped"] == [
        {"id": "finalize-w1", "status": "failed", "reason": "RuntimeError: boom"},
        {
            "id": "peer-tiledb-write",
            "status": "skipped",
            "reason": "skipped: not installed (pip install 'bulkload[peers]')",
        },
        {"id": "gen-pipe", "status": "skipped", "reason": "not selected"},
    ]
    w1 = res["figures"]["load-lmdb-capnp-w1"]
    assert w1["mb_s"] == {"median": 36.0, "min": 24.0, "max": 48.0}  # 96,000 bytes in 4 ms and 2 ms
    assert w1["ratio_to_limit"] == pytest.approx({"median": 0.375, "min": 0.25, "max": 0.5})  # over 96 MB/s
    assert res["machine"]["filesystem"]["type"] and res["machine"]["cores"] >= 1
    assert res["versions"]["liblmdb"] and res["versions"]["numpy"]
    json.dumps(res)  # plain JSON types only


@pytest.mark.parametrize(
    "break_it, problem",
    [
        (lambda r: r.pop("git"), "missing git"),
        (lambda r: r.update(schema_version=2), "wrong schema"),
        (lambda r: r.update(schema="other"), "wrong schema"),
        (lambda r: r["machine"].pop("kernel"), "machine.kernel missing"),
        (
            lambda r: r["figures"]["gen-file-fsync"].pop("ratio_to_limit"),
            "figure gen-file-fsync: ratio_to_limit missing",
        ),
        (lambda r: r["figures"]["gen-file-fsync"].pop("mb_s"), "figure gen-file-fsync: no mb_s"),
        (lambda r: r["figures"]["query-box-1000"].update(samples=[]), "figure query-box-1000: no samples"),
        (lambda r: r["figures"]["finalize-w1"].pop("reason"), "figure finalize-w1: failed without a reason"),
    ],
)
def test_validate_names_each_problem(tmp_path, break_it, problem):
    res = result_of(tmp_path)
    break_it(res)
    assert validate(res) == [problem]


def test_a_budget_target_row_is_in_bytes():
    from loader.bench.figures import Figure
    from loader.bench.report import _target_row
    from loader.bench.targets import budget_target

    fin = Figure(
        "finalize-w2",
        "finalize",
        "f",
        1000,
        samples=[{"seconds": 1, "report_memory_budget": 512 << 20, "report_worker_max_rss_bytes": 187 << 20}],
    )
    assert _target_row(budget_target(fin).to_dict()).split(" | ")[1:5] == ["187 MiB", "512 MiB", "2.74", "≥ 1.0"]


def test_markdown_tables(tmp_path):
    res = result_of(tmp_path)
    md = markdown(res, [str(tmp_path / "throughput.png")])
    lines = md.splitlines()
    assert lines[0] == "# bulkload bench — suite `quick`"
    assert "- n = 1,000 `scidb96` records (0.00 GB) unless noted; 3 repeats;" in md
    # a measured target has its numbers and a mark; one not measured says so and why
    row = next(x for x in lines if x.startswith("| load speed-up, 2 workers vs 1 |"))
    assert row == "| load speed-up, 2 workers vs 1 | 32 MB/s | 36 MB/s | 0.89 | ≥ 1.6 | ❌ short |"
    assert (
        "| durable load, default options / ArcticDB DataFrame build + write (interleaved) | | | | ≥ 1.0 "
        "| not measured |"
    ) in lines
    assert (
        "| box query ~1,000 cells, warm: 2 ms / median latency | 0.500 ms | 2.0 ms | 4.00 | ≥ 1.0 | ✅ pass |" in lines
    )
    # one section a group that has figures, none for the others; a '|' in a title is escaped
    assert [x for x in lines if x.startswith("## ")] == [
        "## Targets",
        "## Reference limits",
        "## bulkload load",
        "## bulkload finalize",
        "## Box queries (latency)",
        "## Peers on the same records",
        "## Skipped or failed",
        "## Plots",
    ]
    assert any(
        x.startswith("| load \\| one worker | 1,000 | 36 | 24 – 48 | 0.38 | gen-file-fsync | 0.38 | 50 MiB (20 MiB) |")
        for x in lines
    )
    assert "| finalize | 1,000 | | | | | | | failed: RuntimeError: boom |" in lines
    assert any(x.startswith("| box query | 1,000 | 0.500 | 0.500 – 0.500 | 750 | 50 MiB |") for x in lines)
    # figures not selected are not "skipped or failed"
    assert "- `peer-tiledb-write`: skipped — skipped: not installed (pip install 'bulkload[peers]')" in lines
    assert "- `finalize-w1`: failed — RuntimeError: boom" in lines and "gen-pipe`" not in md
    assert (
        "![throughput](throughput.png)" in lines and lines[-1].startswith("Versions: bulkload ") and md.endswith("\n")
    )


@pytest.mark.parametrize("name, prefix", [("quick", "quick-"), ("load", "load-")])
def test_write_outputs_and_re_render_from_the_json(tmp_path, name, prefix):
    pytest.importorskip("matplotlib")
    res = result_of(tmp_path)
    out = tmp_path / "out" / "deeper"
    paths = write_outputs(res, out, name)
    assert paths["json"] == str(out / f"{name}.json") and paths["markdown"] == str(out / f"{name}.md")
    assert [Path(p).name for p in paths["plots"]] == [f"{prefix}{x}.png" for x in ("throughput", "scaling", "rss")]
    for p in paths["plots"]:
        assert Path(p).read_bytes()[:8] == PNG and Path(p).stat().st_size > 1000
    on_disk = json.loads((out / f"{name}.json").read_text())
    assert on_disk == json.loads(json.dumps(res)) and on_disk["plots"] == [Path(p).name for p in paths["plots"]]
    md = (out / f"{name}.md").read_text()
    # the Markdown and the plots can be made again from the JSON alone
    again = tmp_path / "again"
    write_outputs(copy.deepcopy(on_disk), again, name)
    assert (again / f"{name}.md").read_text() == md
    assert sorted(x.name for x in again.iterdir()) == sorted(x.name for x in out.iterdir())


NO_MATPLOTLIB = """
import json, sys
sys.modules["matplotlib"] = None  # an import of matplotlib now raises ImportError, as when not installed
from loader.bench.report import write_outputs
res = json.load(open(sys.argv[1]))
paths = write_outputs(res, sys.argv[2])
print(json.dumps({"paths": paths, "warnings": res.get("warnings"), "plots": res["plots"]}))
"""


def test_without_matplotlib_no_plots_and_a_warning(tmp_path):
    src = tmp_path / "r.json"
    src.write_text(json.dumps(result_of(tmp_path)))
    p = subprocess.run(
        [sys.executable, "-c", NO_MATPLOTLIB, str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["paths"]["plots"] == [] and got["plots"] == []
    assert len(got["warnings"]) == 1 and got["warnings"][0].startswith("no plots: matplotlib not installed (")
    written = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert written["warnings"] == got["warnings"] and validate(written) == []
    assert sorted(x.name for x in (tmp_path / "out").iterdir()) == ["bench.json", "bench.md"]
    assert "## Plots" not in (tmp_path / "out" / "bench.md").read_text()
