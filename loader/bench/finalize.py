"""The ``finalize`` section: `loader.arrays.finalize.finalize` with 1..cores workers, each
repeat on a fresh copy of one loaded dataset, then the warm latency of box queries from
Python (issue 4's 100-cell box and a ~1,000-cell box) on a finalized copy.

The ``child_*`` functions are this section's child benchmark processes (run by `child`):
probing that the finalizer imports, one finalize, and a series of warm box queries.

Invariants: the input is one `bulkload load` of ``n`` records into ``lmdb://`` with
shards = cores and default options (lz4 batches; the array's pieces uncompressed); a finalize is timed around the `finalize()` call only; a query sample is
the median of ``query_reps`` queries in one process after a warm-up; when the finalizer
cannot be imported or the input cannot be loaded, every figure of the section is skipped
with that reason.

Crash behaviour: the input (``flat``) and its copy (``fin``) live in the work directory and
are removed at the end of the section (and with the work directory by the runner).
"""

from __future__ import annotations

import shutil
import statistics
import time

from .figures import Figure
from .loads import load_once
from .processes import rm, run_child, settle
from .records import DIMS, box
from .runner import Bench, each_round


def section_finalize(b: Bench) -> None:
    figs = _finalize_figures(b)
    queries = _query_figures(b)
    declared = [*figs.values(), *(f for f, _ in queries)]
    try:
        res, _ = run_child("probe_finalize")
    except Exception as e:
        res = {"ok": False, "error": str(e)}
    if not res.get("ok"):
        for f in declared:
            b.skip(f, f"loader.arrays.finalize.finalize not importable ({res.get('error')})")
        return
    base = b.work / "flat"
    try:
        load_once(b, b.p.n, f"lmdb://{base}", workers=None, format=None, compression=None)  # defaults
    except Exception as e:
        for f in declared:
            b.skip(f, f"could not load the input dataset: {e}")
        return
    copy = b.work / "fin"
    for w, f in figs.items():
        b.repeat(
            f,
            each_round(b.child_sample, "finalize", uri=f"lmdb://{copy}", dims=DIMS, workers=w),
            setup=lambda i: _fresh_copy(base, copy),
        )
    _measure_queries(b, queries, figs, base, copy)
    rm(copy)
    rm(base)


def _finalize_figures(b: Bench) -> dict[int, Figure | None]:
    return {
        w: b.fig(
            f"finalize-w{w}",
            "finalize",
            f"finalize --dims {DIMS}, {w} worker" + ("s" if w > 1 else ""),
            b.p.n,
            limit="gen-file-fsync",
            workers=w,
            note="redimension (+ compaction) of the flat load into the 2-D array, "
            "durable; SciDB 32-core redimension load: 128 MB/s",
            params={"dims": DIMS, "duplicates": "error"},
        )
        for w in range(1, b.cores + 1)
    }


def _query_figures(b: Bench) -> list[tuple[Figure | None, dict]]:
    """The two box-query figures and their boxes."""
    n, reps = b.p.n, b.p.query_reps
    q100 = b.fig(
        "query-box",
        "query",
        "box query, issue 4's box (i1 width 100), warm, from Python",
        n,
        kind="latency",
        params={"box": box(n, 100)},
        note="Dataset.read_box(i0=(0, 10), i1=(n/4, n/4+100)): the box of issue 4 "
        "(i0=0:10,i1=5000000:5000100 at n=20M), 100 cells with this generator; "
        f"sample = median of {reps} queries in one process",
    )
    q = b.fig(
        "query-box-1000",
        "query",
        "box query ~1,000 cells (i1 width 1000), warm, from Python",
        n,
        kind="latency",
        params={"box": box(n)},
        note="Dataset.read_box(i0=(0, 10), i1=(n/4, n/4+1000)): 1,000 cells; "
        f"sample = median of {reps} queries in one process",
    )
    return [(q100, box(n, 100)), (q, box(n))]


def _fresh_copy(base, copy) -> None:
    rm(copy)
    shutil.copytree(base, copy)
    settle()


def _measure_queries(b: Bench, queries: list, figs: dict, base, copy) -> None:
    """The box queries, on the last finalized copy (or a freshly finalized one)."""
    if all(f is None for f, _ in queries):
        return
    if not copy.exists() or any(f is None or f.status != "ok" for f in figs.values()):
        rm(copy)
        shutil.copytree(base, copy)
        try:
            run_child("finalize", uri=f"lmdb://{copy}", dims=DIMS, workers=b.cores)
        except Exception as e:
            for f, _ in queries:
                b.skip(f, f"finalize failed: {e}")
    for f, qbox in queries:
        b.repeat(f, each_round(b.child_sample, "query", uri=f"lmdb://{copy}", box=qbox, reps=b.p.query_reps))


# ============================================================================================
# child benchmark processes
# ============================================================================================


def child_probe_finalize() -> dict:
    try:
        from ..arrays.finalize import finalize  # noqa: F401  (the probe: does the finalizer import?)

        return {"ok": True}
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def child_finalize(uri: str, dims: str, workers: int, array: str = "grid") -> dict:
    from ..arrays.finalize import finalize  # heavy: numpy, pyarrow; only in this child

    t = time.perf_counter()
    rep = finalize(uri, dims=dims, array=array, duplicates="error", workers=workers, progress="none")
    s = time.perf_counter() - t
    out = {"seconds": s}
    d = rep.to_dict() if hasattr(rep, "to_dict") else (rep if isinstance(rep, dict) else {})
    for k in (
        "seconds",
        "mb_per_s",
        "chunks",
        "cells",
        "peak_rss_bytes",
        "stages",
        "compact",
        "memory_budget",
        "worker_max_rss_bytes",
    ):
        if k in d:
            out[f"report_{k}"] = d[k]
    if "peak_rss_bytes" in d:
        out["report_peak_rss_bytes"] = d["peak_rss_bytes"]
    return out


def child_query(uri: str, box: dict, reps: int = 200, array: str = "grid") -> dict:
    from ..read.dataset import open as open_ds  # heavy: numpy, pyarrow; only in this child

    ranges = {k: tuple(v) for k, v in box.items()}
    with open_ds(uri) as ds:
        tab = ds.read_box(array, None, **ranges)  # warm-up: opens the shards and the index
        for _ in range(3):
            ds.read_box(array, None, **ranges)
        lat = []
        for _ in range(reps):
            t = time.perf_counter()
            tab = ds.read_box(array, None, **ranges)
            lat.append(time.perf_counter() - t)
    return {
        "seconds": statistics.median(lat),
        "cells": tab.num_rows,
        "latencies_s": lat,
        "p95_s": sorted(lat)[int(0.95 * (len(lat) - 1))],
    }
