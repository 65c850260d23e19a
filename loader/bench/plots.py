"""The plots of a benchmark result: ``throughput.png`` (bars of every throughput figure, log
scale, with the disk, /dev/shm and pipe limits as lines), ``scaling.png`` (load and finalize
over workers, with the linear line) and ``rss.png`` (peak RSS of every run's process tree);
for the catalog suite ``catalog.png`` (metadata costs over the batch count, with the
issue's targets and flatness bands).

matplotlib is optional (the ``bench`` extra) and heavy: it is imported by `plots` only,
when a result is written; an ImportError tells the caller there will be no plots.

Invariants: the plots read the result's JSON dict only (they can be redrawn from a
``bench.json``); only ``ok`` figures are drawn.

Crash behaviour: each PNG is written through `infra.outputs.open_output` (a temporary file
renamed over the name when complete).
"""

from __future__ import annotations

from pathlib import Path

from ..infra.outputs import open_output
from .catalog_table import series as catalog_series

COLORS = {
    "limits": "#888888",
    "load": "#1f77b4",
    "finalize": "#2ca02c",
    "peers": "#d62728",
    "rss": "#9467bd",
    "reads": "#ff7f0e",
    "ticks": "#17becf",
}


def plots(result: dict, out: Path, prefix: str = "", name: str = "bench") -> list[str]:
    """throughput.png, scaling.png, rss.png (each named PREFIX + name) in ``out``; for the
    catalog suite one plot, NAME.png (`_catalog`)."""
    import matplotlib  # optional and heavy: only when plots are drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the Agg backend

    made = []
    draws = (
        ((name, _catalog),)
        if result["suite"] == "catalog"
        else ((f"{prefix}throughput", _throughput), (f"{prefix}scaling", _scaling), (f"{prefix}rss", _rss))
    )
    for file, draw in draws:
        fig = draw(plt, result)
        fig.tight_layout()
        p = out / f"{file}.png"
        _save_figure(fig, p)
        plt.close(fig)
        made.append(str(p))
    return made


def _label(f: dict, result: dict) -> str:
    return f["title"] + ("" if f["records"] == result["parameters"]["n"] else f" [n={f['records']:,}]")


def _ok_mb_s(f: dict | None) -> bool:
    return bool(f and f["status"] == "ok" and f.get("mb_s"))


def _throughput(plt, result: dict):
    """Bars: median MB/s of every throughput figure, whiskers min-max, the limits as lines."""
    figs = result["figures"]
    rows = [f for f in figs.values() if _ok_mb_s(f) and f["group"] != "rss"]
    fig, ax = plt.subplots(figsize=(11, 0.32 * max(len(rows), 4) + 1.6))
    ys = list(range(len(rows)))[::-1]
    for y, f in zip(ys, rows):
        st = f["mb_s"]
        ax.barh(
            y,
            st["median"],
            color=COLORS.get(f["group"], "#333333"),
            alpha=0.85,
            xerr=[[st["median"] - st["min"]], [st["max"] - st["median"]]],
            capsize=3,
            error_kw={"elinewidth": 1},
        )
        ax.text(st["max"] * 1.05, y, f"{st['median']:,.0f}", va="center", fontsize=7)
    ax.set_yticks(ys)
    ax.set_yticklabels([_label(f, result) for f in rows], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("MB/s (log; bars: median, whiskers: min–max)")
    for lid, style in (("gen-file-fsync", "--"), ("gen-shm", ":"), ("gen-pipe", "-.")):
        lf = figs.get(lid)
        if _ok_mb_s(lf):
            ax.axvline(
                lf["mb_s"]["median"],
                color="black",
                linestyle=style,
                linewidth=0.8,
                label=f"{lf['title']}: {lf['mb_s']['median']:,.0f}",
            )
            if lid == "gen-file-fsync":
                ax.axvline(
                    0.5 * lf["mb_s"]["median"],
                    color="red",
                    linestyle="--",
                    linewidth=0.8,
                    label="target: 0.5 × disk limit",
                )
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower right")
    ax.set_title(
        f"bulkload bench ({result['suite']}): {result['parameters']['n']:,} scidb96 records, "
        f"{result['machine']['cores']} cores",
        fontsize=9,
    )
    return fig


def _series(figs: dict, series: str) -> list[tuple[int, dict]]:
    """(workers, mb_s) of the ok figures SERIES + workers (e.g. finalize-w1, finalize-w2)."""
    pts = []
    for f in figs.values():
        if f["id"].startswith(series) and f["id"][len(series) :].isdigit() and _ok_mb_s(f):
            pts.append((int(f["id"][len(series) :]), f["mb_s"]))
    return sorted(pts)


def _scaling(plt, result: dict):
    """Load and finalize MB/s over workers (median, min-max) with their linear lines."""
    figs = result["figures"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for series, label, color in (
        ("load-lmdb-capnp-w", "load (lmdb, capnp)", "#1f77b4"),
        ("finalize-w", "finalize", "#2ca02c"),
    ):
        pts = _series(figs, series)
        if not pts:
            continue
        xs = [w for w, _ in pts]
        med = [s["median"] for _, s in pts]
        ax.errorbar(
            xs,
            med,
            yerr=[[m - s["min"] for m, (_, s) in zip(med, pts)], [s["max"] - m for m, (_, s) in zip(med, pts)]],
            marker="o",
            capsize=3,
            label=label,
            color=color,
        )
        ax.plot(xs, [med[0] * w / xs[0] for w in xs], linestyle=":", color=color, label=f"{label}: linear")
    lf = figs.get("gen-file-fsync")
    if _ok_mb_s(lf):
        ax.axhline(lf["mb_s"]["median"], color="black", linestyle="--", linewidth=0.8, label="disk limit")
    ax.set_xlabel("workers")
    ax.set_ylabel("MB/s")
    ax.set_xticks(range(1, (result["machine"]["cores"] or 1) + 1))
    ax.set_ylim(bottom=0)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.set_title("scaling over workers (median, min–max)", fontsize=9)
    return fig


def _rss(plt, result: dict):
    """Peak RSS (VmRSS and private) of the process tree of every load, finalize and peer run."""
    mem = [
        f
        for f in result["figures"].values()
        if f["status"] == "ok" and f.get("peak_tree_rss_bytes") and f["group"] in ("load", "finalize", "peers", "rss")
    ]
    fig, ax = plt.subplots(figsize=(10, 0.3 * max(len(mem), 4) + 1.4))
    ys = list(range(len(mem)))[::-1]
    ax.barh(
        ys,
        [f["peak_tree_rss_bytes"]["max"] / 2**20 for f in mem],
        color="#bbbbbb",
        label="VmRSS (incl. file-backed / shared pages)",
    )
    ax.barh(
        ys,
        [(f.get("peak_tree_anon_bytes") or {}).get("max", 0) / 2**20 for f in mem],
        color="#9467bd",
        height=0.5,
        label="private (RSS − shared)",
    )
    ax.set_yticks(ys)
    ax.set_yticklabels([_label(f, result) for f in mem], fontsize=7)
    ax.axvline(1024, color="red", linestyle="--", linewidth=0.8, label="1 GiB")
    ax.set_xlabel("peak RSS of the whole process tree, MiB (max over repeats)")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def _catalog(plt, result: dict):
    """The catalog suite: append, commit, open + read and info (ms, log) over the batch count
    (log): medians with min-max whiskers, each operation's 1.5 x flatness band above its
    smallest size's median, and the issue's targets (50 ms, 20 ms, 0.3 s) as lines."""
    figs = result["figures"].values()
    fig, ax = plt.subplots(figsize=(8, 5))
    xs_all = []
    for op, label, color, target in (
        ("append", "append one 1,000-record batch (in-process)", "#1f77b4", 50),
        ("open", "loader.open + read 10 records", "#2ca02c", 20),
        ("commit", "commit alone (Manifest.save of one run)", "#9467bd", None),
        ("info", "bulkload info (wall, whole command)", "#ff7f0e", 300),
    ):
        pts = catalog_series(figs, op, scale=1e3)
        if not pts:
            continue
        xs = [n for n, _ in pts]
        xs_all += xs
        med = [st["median"] for _, st in pts]
        ax.errorbar(
            xs,
            med,
            yerr=[[m - st["min"] for m, (_, st) in zip(med, pts)], [st["max"] - m for m, (_, st) in zip(med, pts)]],
            marker="o",
            capsize=3,
            color=color,
            label=label,
        )
        if op != "info" and len(xs) > 1:
            ax.fill_between(
                xs,
                [med[0]] * len(xs),
                [med[0] * 1.5] * len(xs),
                color=color,
                alpha=0.12,
                label=f"{op}: flat within 1.5 x of {xs[0]:,} batches",
            )
        if target is not None:
            ax.axhline(
                target,
                color=color,
                linestyle="--",
                linewidth=0.9,
                label=f"target: {op} <= {target if target < 100 else target / 1e3:g} {'ms' if target < 100 else 's'}",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch rows in the dataset (log)")
    ax.set_ylabel("ms (log; median, whiskers min–max)")
    if xs_all:
        ax.set_xticks(sorted(set(xs_all)))
        ax.set_xticklabels([f"{x:,}" for x in sorted(set(xs_all))], fontsize=7)
        ax.tick_params(axis="x", which="minor", labelbottom=False)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    ax.set_title(
        f"metadata cost over the batch count ({result['machine']['cores']} cores, git "
        f"{(result['git'].get('commit') or '?')[:7]})",
        fontsize=9,
    )
    return fig


def _save_figure(fig, path: Path) -> None:
    with open_output(str(path)) as o:
        fig.savefig(o.file, format="png", dpi=110, bbox_inches="tight")
