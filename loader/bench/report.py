"""A benchmark result as files: the JSON (schema ``bulkload-bench`` version
:data:`SCHEMA_VERSION`), the Markdown tables, the plots (`plots`), and `validate`, the
check of a result's shape.

Everything here reads the result as the JSON dict (not the dataclasses that built it), so
that the Markdown and the plots can be re-rendered from a ``bench.json`` on disk without
measuring again: ``write_outputs(json.load(open("bench.json")), DIR)``.

Invariants: `markdown` and `write_outputs` render whatever figures and targets the result
holds, in its order; a figure that is not ``ok`` is a row with its status and reason, never a
number. Without matplotlib there are no plots and a warning in the result, never an error.

Crash behaviour: every file is written through `infra.outputs` (a temporary file renamed
over the name when complete), so a crash leaves the old file or none, never a torn one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..infra.outputs import output_dir, write_output
from .catalog_table import catalog_rows, load_rows
from .figures import stats
from .plots import plots

SCHEMA = "bulkload-bench"
SCHEMA_VERSION = 1

GROUP_TITLES = {
    "limits": "Reference limits",
    "load": "bulkload load",
    "finalize": "bulkload finalize",
    "query": "Box queries (latency)",
    "peers": "Peers on the same records",
    "random": "Cold random reads",
    "rss": "Memory flat in N",
    "reads": "Reads against ArcticDB, DuckDB and Parquet (issue 31; warm, interleaved)",
    "ticks": "gen://ticks against ArcticDB and Parquet (issue 30; interleaved)",
    "catalog": "Metadata cost over the batch count (medians; min – max)",
    "catalog-load": "Loads with small batches",
}


def _fmt_mb(st: dict | None) -> tuple[str, str]:
    if not st:
        return "", ""
    return f"{st['median']:,.0f}", f"{st['min']:,.0f} – {st['max']:,.0f}"


def _cell(text) -> str:
    return str(text).replace("|", "\\|")


def _fmt_bytes(b: float | None) -> str:
    return "" if not b else f"{b / 2**20:,.0f} MiB"


def _header(result: dict) -> list[str]:
    m, p = result["machine"], result["parameters"]
    fs = m["filesystem"]
    return [
        f"# bulkload bench — suite `{result['suite']}`",
        "",
        f"- started {result['started']}, took {result['duration_s']:.0f} s; "
        f"git {(result['git'].get('commit') or '?')[:12]}{' (dirty)' if result['git'].get('dirty') else ''}; "
        f"bulkload {result['versions'].get('bulkload')}",
        f"- machine: {m['cpu_model']}, {m['cores']} cores, {m['memory_bytes'] / 2**30:.0f} GiB RAM, "
        f"Linux {m['kernel']}; datasets on {fs.get('type')} ({fs.get('device')}); "
        f"load average at start {', '.join(f'{x:.2f}' for x in m['loadavg_at_start'])}"
        + (f", at end {', '.join(f'{x:.2f}' for x in m['loadavg_at_end'])}" if m.get("loadavg_at_end") else ""),
        f"- n = {p['n']:,} `{p['layout']}` records ({p['n'] * p['record_size'] / 1e9:.2f} GB) unless noted; "
        f"{p['repeats']} repeats; MB = 10^6 bytes of records; median and min – max of the repeats; "
        + (
            "every size measured in each round in turn (interleaved); batch rows from `bulkload load "
            f"--batch-records {p.get('catalog_batch_records')}`, runs: {p.get('runs_helper')}"
            if result["suite"] == "catalog"
            else "ratio = median MB/s / median MB/s of the matching limit measured in this run"
        ),
    ]


def _target_row(t: dict) -> str:
    needed = f"{'≤' if t.get('at_most') or t['id'] == 'rss-flat' else '≥'} {t['target']}"
    if t.get("ratio") is None:
        return f"| {_cell(t['what'])} | | | | {needed} | {t['status']} |"
    val: Any = t.get("value")  # a result's JSON: a number here (the ratio is)
    ref: Any = t.get("reference")
    unit = t.get("unit")
    if unit == "bytes" or (
        unit is None and (t["id"].startswith("rss") or "-bytes-" in t["id"] or t["id"].endswith("-rss"))
    ):
        val, ref = _fmt_bytes(val), _fmt_bytes(ref)
    elif unit in ("ms", "s"):
        val, ref = f"{val:,.3f} {unit}", f"{ref:,.3f} {unit}"
    elif t["id"] == "query-2ms":
        val, ref = f"{val:.3f} ms", f"{ref} ms"
    else:
        digits = 0 if min(val, ref) >= 10 else 2  # a few records a task: fractions of a MB/s
        val, ref = f"{val:,.{digits}f} MB/s", f"{ref:,.{digits}f} MB/s"
    mark = "✅ pass" if t["pass"] else "❌ short"
    return f"| {_cell(t['what'])} | {val} | {ref} | {t['ratio']:.2f} | {needed} | {mark} |"


def _targets_table(targets: list[dict]) -> list[str]:
    return [
        "",
        "## Targets",
        "",
        "| target | value | reference | ratio | needed | status |",
        "|---|---:|---:|---:|---:|---|",
        *(_target_row(t) for t in targets),
    ]


def _query_rows(rows: list[dict]) -> list[str]:
    lines = [
        "| figure | records | latency ms (median) | min – max | cells | peak RSS (tree) | note |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for f in rows:
        if f["status"] != "ok":
            lines.append(f"| {_cell(f['title'])} | {f['records']:,} | | | | | {f['status']}: {_cell(f['reason'])} |")
            continue
        st = f["latency_ms"]
        cells = (f["samples"][0].get("cells") or f["samples"][0].get("box_cells", "")) if f["samples"] else ""
        rss = f["peak_tree_rss_bytes"]
        lines.append(
            f"| {_cell(f['title'])} | {f['records']:,} | {st['median']:.3f} | {st['min']:.3f} – "
            f"{st['max']:.3f} | {cells} | {_fmt_bytes(rss and rss['max'])} | {_cell(f['note'])} |"
        )
    return lines


def _throughput_row(f: dict) -> str:
    if f["status"] != "ok":
        return f"| {_cell(f['title'])} | {f['records']:,} | | | | | | | {f['status']}: {_cell(f['reason'])} |"
    med, rng = _fmt_mb(f.get("mb_s"))
    rs: Any = f.get("records_s")  # a result's JSON: a throughput figure's stats
    r = f.get("ratio_to_limit")
    rss, anon = f.get("peak_tree_rss_bytes"), f.get("peak_tree_anon_bytes")
    mem = ""
    if rss:
        mem = _fmt_bytes(rss["max"]) + (f" ({_fmt_bytes(anon['max'])})" if anon else "")
    return (
        f"| {_cell(f['title'])} | {f['records']:,} | {med} | {rng} | "
        f"{rs['median'] / 1e6:,.2f} | {f['limit'] or ''} | {'' if not r else format(r['median'], '.2f')} | "
        f"{mem} | {_cell(f['note'])} |"
    )


def _throughput_rows(rows: list[dict]) -> list[str]:
    return [
        "| figure | records | MB/s (median) | min – max | M records/s | limit | ratio | "
        "peak RSS tree (private) | note |",
        "|---|---:|---:|---:|---:|---|---:|---:|---|",
        *(_throughput_row(f) for f in rows),
    ]


def _random_row(f: dict) -> str:
    tasks = f["params"].get("tasks") or 0
    if f["status"] != "ok":
        return f"| {_cell(f['title'])} | {tasks:,} | | | | | | | {f['status']}: {_cell(f['reason'])} |"
    secs = f["seconds"]
    amp = stats([x["read_amplification"] for x in f["samples"] if x.get("read_amplification")])
    per_task = stats([x["disk_requests_per_task"] for x in f["samples"] if x.get("disk_requests_per_task")])
    rss = f.get("peak_tree_rss_bytes")
    return (
        f"| {_cell(f['title'])} | {tasks:,} | {tasks / secs['median']:,.0f} | {tasks / secs['max']:,.0f} – "
        f"{tasks / secs['min']:,.0f} | {f['mb_s']['median']:,.2f} | {'' if not amp else format(amp['median'], '.2f')} | "
        f"{'' if not per_task else format(per_task['median'], '.1f')} | {_fmt_bytes(rss and rss['max'])} | "
        f"{_cell(f['note'])} |"
    )


def _random_rows(rows: list[dict]) -> list[str]:
    return [
        "| figure | tasks | tasks/s (median) | min – max | MB/s | disk bytes read / bytes asked | "
        "disk read requests / task | peak RSS tree | note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *(_random_row(f) for f in rows),
    ]


def _versus_row(f: dict) -> str:
    if f["status"] != "ok":
        return f"| {_cell(f['title'])} | {f['records']:,} | | | | | | {f['status']}: {_cell(f['reason'])} |"
    med, rng = _fmt_mb(f.get("mb_s"))
    secs, on_disk = f["seconds"], f.get("disk_bytes")
    return (
        f"| {_cell(f['title'])} | {f['records']:,} | {secs['median']:.4f} | {med} | {rng} | "
        f"{f['records_s']['median'] / 1e6:,.2f} | {_fmt_bytes(on_disk and on_disk['median'])} | "
        f"{_cell(f['note'])} |"
    )


def _versus_rows(rows: list[dict]) -> list[str]:
    """The reads and ticks sections: seconds beside MB/s (their targets compare both) and bytes on disk."""
    return [
        "| figure | records | seconds (median) | MB/s (median) | min – max | M records/s | on disk | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
        *(_versus_row(f) for f in rows),
    ]


def _figure_tables(figs: dict) -> list[str]:
    lines = []
    tables = {
        "query": _query_rows,
        "random": _random_rows,
        "catalog": catalog_rows,
        "catalog-load": load_rows,
        "reads": _versus_rows,
        "ticks": _versus_rows,
    }
    for group, title in GROUP_TITLES.items():
        rows = [f for f in figs.values() if f["group"] == group]
        if rows:
            lines += ["", f"## {title}", ""]
            lines += tables.get(group, _throughput_rows)(rows)
    return lines


def _versus_table(rows: list[dict]) -> list[str]:
    """bulkload / peer, measured interleaved (round-robin) in this run: the suite's own table
    of the comparison with ArcticDB and TileDB."""
    if not rows:
        return []
    lines = [
        "",
        "## bulkload vs peers (interleaved, same run)",
        "",
        "| bulkload | MB/s (min – max) | on disk | peer | MB/s (min – max) | on disk | ratio | "
        "per-round ratio min – max |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for c in rows:
        a, p, rr = c["bulkload_mb_s"], c["peer_mb_s"], c["round_ratio"]
        lines.append(
            f"| `{c['bulkload']}` | {_fmt_range(a)} | {_fmt_bytes(c['bulkload_disk_bytes'])} | "
            f"`{c['peer']}` | {_fmt_range(p)} | {_fmt_bytes(c['peer_disk_bytes'])} | {c['ratio']:.2f} | "
            + (f"{rr['min']:.2f} – {rr['max']:.2f} |" if rr else "|")
        )
    return lines


def _fmt_range(st: dict | None) -> str:
    med, rng = _fmt_mb(st)
    return f"{med} ({rng})" if med else ""


def markdown(result: dict, plots: list[str] | None = None) -> str:
    lines = (
        _header(result)
        + _targets_table(result["targets"])
        + _versus_table(result.get("comparisons", []))
        + _figure_tables(result["figures"])
    )
    skipped = [s for s in result["skipped"] if s["reason"] != "not selected"]
    if skipped:
        lines += ["", "## Skipped or failed", ""]
        lines += [f"- `{s['id']}`: {s['status']} — {s['reason']}" for s in skipped]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{Path(x).stem}]({Path(x).name})" for x in plots]
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items() if v), ""]
    return "\n".join(lines)


def write_outputs(result: dict, out: str | Path, name: str = "bench") -> dict:
    """Write NAME.json, NAME.md and the plots (NAME-*.png) into ``out``; returns their paths."""
    out = Path(output_dir(str(out)))
    try:
        made = plots(result, out, f"{name}-", name)
    except ImportError as e:
        made = []
        result.setdefault("warnings", []).append(f"no plots: matplotlib not installed ({e})")
    result["plots"] = [Path(p).name for p in made]
    jp, mp = out / f"{name}.json", out / f"{name}.md"
    write_output(str(jp), json.dumps(result, indent=1, default=str) + "\n")
    write_output(str(mp), markdown(result, made))
    return {"json": str(jp), "markdown": str(mp), "plots": made}


def history_line(result: dict, label: str | None = None) -> dict:
    """A run in one line of ``history.jsonl``: suite, start, duration, short git commit,
    ``label``, every target's value, reference, ratio, needed and status, and every measured
    figure's medians (`figure_medians`)."""
    git = result["git"].get("commit")
    return {
        "suite": result["suite"],
        "started": result["started"],
        "duration_s": result["duration_s"],
        "git": git[:7] + ("-dirty" if result["git"].get("dirty") else "") if git else None,
        "label": label,
        "targets": {
            t["id"]: {
                "value": t.get("value"),
                "reference": t.get("reference"),
                "ratio": t["ratio"],
                "needed": t["target"],
                "status": t["status"],
            }
            for t in result["targets"]
        },
        "figures": figure_medians(result),
    }


def figure_medians(result: dict) -> dict:
    """Of each ``ok`` figure of a result: its records and the median of each of its stats
    (MB/s, records/s, seconds, milliseconds, RSS ...) to 4 significant digits: what a history
    line keeps of it."""

    def short(v: object) -> object:
        return float(f"{v:.4g}") if isinstance(v, float) else v

    return {
        fid: {"records": f.get("records")}
        | {k: short(v["median"]) for k, v in f.items() if isinstance(v, dict) and "median" in v}
        for fid, f in result.get("figures", {}).items()
        if f.get("status") == "ok"
    }


def append_history(result: dict, out: str | Path, label: str | None = None) -> str:
    """Append the run's line (`history_line`) to ``out``/history.jsonl; returns its path.
    One write of one line in append mode: a crash leaves the earlier lines whole."""
    path = Path(output_dir(str(out))) / "history.jsonl"
    with open(path, "a") as f:
        f.write(json.dumps(history_line(result, label), default=str) + "\n")
    return str(path)


REQUIRED = (
    "schema",
    "schema_version",
    "suite",
    "machine",
    "versions",
    "git",
    "parameters",
    "figures",
    "targets",
    "skipped",
)
REQUIRED_MACHINE = ("cpu_model", "cores", "memory_bytes", "kernel", "filesystem")
REQUIRED_FIGURE = ("id", "group", "title", "status", "records", "samples", "seconds", "limit", "ratio_to_limit")


def validate(result: dict) -> list[str]:
    """Problems with a result's shape (the schema test uses this)."""
    bad = [f"missing {k}" for k in REQUIRED if k not in result]
    if result.get("schema") != SCHEMA or result.get("schema_version") != SCHEMA_VERSION:
        bad.append("wrong schema")
    bad += [f"machine.{k} missing" for k in REQUIRED_MACHINE if k not in result.get("machine", {})]
    for fid, f in result.get("figures", {}).items():
        bad += _figure_problems(fid, f)
    return bad


def _figure_problems(fid: str, f: dict) -> list[str]:
    bad = [f"figure {fid}: {k} missing" for k in REQUIRED_FIGURE if k not in f]
    if f.get("status") == "ok":
        if f["kind"] == "throughput" and not f.get("mb_s"):
            bad.append(f"figure {fid}: no mb_s")
        if not f["samples"]:
            bad.append(f"figure {fid}: no samples")
    elif not f.get("reason"):
        bad.append(f"figure {fid}: {f.get('status')} without a reason")
    return bad
