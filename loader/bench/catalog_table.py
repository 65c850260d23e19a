"""The catalog section's figures as data for the report and the plot: one row per dataset
size (batch rows), one column per operation (`series`), and the Markdown table of them
(`catalog_rows`).

Invariants: reads the result's JSON figures only (re-rendered from a ``catalog.json``);
a figure that is not ``ok`` shows its status, never a number.

Crash behaviour: pure computation; nothing is written.
"""

from __future__ import annotations

from .figures import stats

#: the columns of the table: op, title, what is shown (sample key, scale, unit)
COLUMNS = (
    ("append", "append 1,000 records", "seconds", 1e3, "ms"),
    ("open", "open + read 10", "seconds", 1e3, "ms"),
    ("commit", "commit alone", "seconds", 1e3, "ms"),
    ("info", "bulkload info", "seconds", 1.0, "s"),
    ("verify", "verify peak private RSS", "peak_tree_anon_bytes", 2**-20, "MiB"),
    ("verify", "verify peak VmRSS", "peak_tree_rss_bytes", 2**-20, "MiB"),
)


def by_size(figs) -> dict[int, dict[str, dict]]:
    """{batches: {op: figure}} of the catalog figures (an iterable of figure dicts)."""
    out: dict[int, dict[str, dict]] = {}
    for f in figs:
        if f["group"] == "catalog":
            out.setdefault(f["params"]["batches"], {})[f["params"]["op"]] = f
    return dict(sorted(out.items()))


def series(figs, op: str, key: str = "seconds", scale: float = 1.0) -> list[tuple[int, dict]]:
    """(batches, median/min/max of ``key`` x ``scale``) of the ok figures of ``op``."""
    pts = []
    for n, ops in by_size(figs).items():
        f = ops.get(op)
        st = f and f["status"] == "ok" and stats([s[key] * scale for s in f["samples"] if s.get(key) is not None])
        if st:
            pts.append((n, st))
    return pts


def _cell(f: dict | None, key: str, scale: float) -> str:
    if f is None:
        return ""
    if f["status"] != "ok":
        return f["status"]
    st = stats([s[key] * scale for s in f["samples"] if s.get(key) is not None])
    if not st:
        return ""
    digits = 0 if st["median"] >= 100 else (1 if st["median"] >= 10 else 3)
    return f"{st['median']:,.{digits}f} ({st['min']:,.{digits}f} – {st['max']:,.{digits}f})"


def load_rows(rows: list[dict]) -> list[str]:
    """The Markdown table of the n-record loads: seconds (durable, the report's own), MB/s,
    batches, peak RSS of the process tree."""
    lines = [
        "| load | records | batches | seconds (median) | min – max | MB/s | peak RSS tree (private) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for f in rows:
        batches = (f["samples"][0].get("batches") if f["samples"] else None) or f["params"].get("batches")
        head = f"| {f['title']} | {f['records']:,} | {'' if batches is None else format(batches, ',')} |"
        if f["status"] != "ok":
            lines.append(f"{head} {f['status']} | | | |")
            continue
        st, rss, anon = f["seconds"], f.get("peak_tree_rss_bytes"), f.get("peak_tree_anon_bytes")
        mem = f"{rss['max'] / 2**20:,.0f} MiB ({anon['max'] / 2**20:,.0f} MiB)" if rss and anon else ""
        lines.append(
            f"{head} {st['median']:,.3f} | {st['min']:,.3f} – {st['max']:,.3f} | {f['mb_s']['median']:,.0f} | {mem} |"
        )
    return lines


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:,.1f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:,.1f} kB"


def catalog_rows(rows: list[dict]) -> list[str]:
    """The Markdown table: a row per size; the build, then every operation's median (min - max);
    a figure not measured shows its status (its reason is in the report's "Skipped or failed")."""
    head = "| batches | runs | metadata | build s | " + " | ".join(f"{t} ({u})" for _, t, _, _, u in COLUMNS) + " |"
    lines = [head, "|" + "---:|" * (4 + len(COLUMNS))]
    for n, ops in by_size(rows).items():
        build = ops.get("build")
        b = build["samples"][0] if build and build["status"] == "ok" and build["samples"] else {}
        meta = _size(b["metadata_bytes"]) if b.get("metadata_bytes") is not None else ""
        runs = (build or next(iter(ops.values())))["params"].get("runs", "")
        cells = [
            f"{n:,}",
            f"{runs:,}" if isinstance(runs, int) else "",
            meta,
            f"{b['seconds']:,.1f}" if b else _cell(build, "seconds", 1.0),
        ]
        cells += [_cell(ops.get(op), key, scale) for op, _, key, scale, _ in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
