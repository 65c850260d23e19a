"""The ``ticks`` section (issue 30's targets): ``gen://ticks`` loaded by bulkload against
ArcticDB's and a Parquet write, its read and a 1-hour box, interleaved. The rows, targets,
invariants and crash behaviour: docs/design/bench.md."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from .figures import Figure
from .loads import load_once
from .peers import NOT_INSTALLED, arctic_library, arctic_write_read, installed
from .processes import disk_bytes, rm, run_child, settle
from .records import WORKLOADS
from .runner import Bench, Row
from .targets import Target, bytes_target, ratio_target

LAYOUT = "ticks"
DIMS = "ts:1h,size:1000"
HOUR_NS = 3600 * 10**9
UNAVAILABLE = "not measured: gen://ticks not available"
NOT_IN_WORKLOADS = "not selected: ticks is not in --workloads"


def available() -> bool:
    """Whether this bulkload generates ``gen://ticks`` (issue 30's workload)."""
    from ..sources.generators import GENERATORS  # heavy: numpy; the suite's process has it already

    return LAYOUT in GENERATORS


def section_ticks(b: Bench) -> None:
    n, d = b.p.n, b.work / "ticks"
    why = None if "ticks" in b.p.workloads else NOT_IN_WORKLOADS
    why = why or (None if available() else UNAVAILABLE)

    def fig(name: str, group: str, title: str, note: str, **kw) -> Figure | None:
        f = b.fig(f"ticks-{name}", group, title, n, note=note, record_size=WORKLOADS[LAYOUT], **kw)
        if f is not None and why:
            b.skip(f, why)
            return None
        return f

    load = fig(
        "load",
        "ticks",
        "bulkload load gen://ticks, default options (durable)",
        "no --workers / --format / --compression, --shards = cores; interleaved with the peers",
        limit="gen-file-fsync",
        params={"interleaved": True},
    )
    a_write = fig(
        "arcticdb-write",
        "ticks",
        "ArcticDB write(DataFrame) of the ticks to lmdb://",
        "DatetimeIndex on ts, sym a string column; the DataFrame built beforehand, not timed",
        workers=1,
    )
    a_read = fig(
        "arcticdb-read",
        "ticks",
        "ArcticDB read -> DataFrame of the ticks",
        "right after its write, same process (warm)",
        workers=1,
    )
    pq_write = fig(
        "parquet-write",
        "ticks",
        "pyarrow.parquet write_table (zstd) of the ticks, fsynced",
        "the Arrow table built beforehand, not timed",
        workers=1,
    )
    read = fig(
        "read",
        "ticks",
        "bulkload to_arrow() of the ticks",
        "warm: a fresh process, one untimed read, then the timed one",
    )
    box = fig(
        "box",
        "query",
        "bulkload 1-hour box on the finalized ticks, warm",
        f"--dims {DIMS}; box on ts only",
        kind="latency",
        params={"dims": DIMS, "hours": 1},
    )
    if why:
        return
    arctic = installed("arcticdb") and installed("pandas")
    if not arctic:
        for f in (a_write, a_read):
            b.skip(f, NOT_INSTALLED)
        a_write = a_read = None
    d.mkdir(parents=True, exist_ok=True)
    ds = f"lmdb://{d / 'ds'}"
    rows = []
    if load is not None:
        uri = f"lmdb://{d / 'load'}"

        def one_load(i: int) -> dict:
            s = load_once(b, n, uri, workers=None, format=None, compression=None, layout=LAYOUT)
            s["disk_bytes"] = disk_bytes(b.ds_root(uri))
            rm(b.ds_root(uri))
            return s

        rows.append(Row(one_load, [(load, "seconds")]))
    if a_write is not None or a_read is not None:
        rows.append(Row(_peer(b, "ticks_arcticdb", d / "peer", n), [(a_write, "write_s"), (a_read, "read_s")]))
    if pq_write is not None:
        rows.append(Row(_peer(b, "ticks_parquet", d / "peer", n), [(pq_write, "write_s")]))
    on_ds = [
        Row(lambda i: (settle(), b.child_sample("ticks_read", uri=ds))[1], [(read, "seconds")]),
        Row(lambda i: (settle(), b.child_sample("ticks_box", uri=ds, reps=b.p.query_reps))[1], [(box, "seconds")]),
    ]
    on_ds = [r for r in on_ds if r.active()]
    if on_ds:
        try:
            load_once(b, n, ds, workers=None, format=None, compression=None, layout=LAYOUT)
            run_child("finalize", uri=ds, dims=DIMS, workers=b.cores)
        except Exception as e:
            for r in on_ds:
                r.fail(f"could not prepare the ticks dataset: {type(e).__name__}: {e}")
    b.interleave(rows + on_ds)
    rm(d)


def _peer(b: Bench, kind: str, d: Path, n: int):
    def one(i: int) -> dict:
        rm(d)
        settle()
        try:
            return b.child_sample(kind, path=str(d), n=n)
        finally:
            rm(d)

    return one


def ticks_targets(figs: dict[str, Figure]) -> list[Target]:
    """Issue 30's targets, from the ticks section's figures."""
    if "ticks-load" not in figs:
        return []
    load = figs["ticks-load"]
    box = figs.get("ticks-box")
    out = [
        ratio_target(
            "ticks-load-vs-arcticdb",
            "ticks: load / ArcticDB write (interleaved)",
            load,
            figs.get("ticks-arcticdb-write"),
            2.0,
        ),
        ratio_target(
            "ticks-load-vs-parquet", "ticks: load / Parquet (zstd) write", load, figs.get("ticks-parquet-write"), 2.0
        ),
        ratio_target(
            "ticks-read-vs-arcticdb",
            "ticks: full read to Arrow / ArcticDB read",
            figs.get("ticks-read"),
            figs.get("ticks-arcticdb-read"),
            1.0,
        ),
        bytes_target(
            "ticks-bytes-vs-arcticdb", "ticks: ArcticDB bytes on disk / load's", load, figs.get("ticks-arcticdb-write")
        ),
    ]
    if box is None or box.status != "ok" or not box.secs():
        out.append(
            Target(
                "ticks-box-1ms",
                "ticks: 1-hour box, warm <= 1 ms",
                1.0,
                "not measured" + (f" ({box.id})" if box is not None else ""),
                unit="ms",
            )
        )
    else:
        ms = statistics.median(box.secs()) * 1e3
        out.append(
            Target.measured(
                "ticks-box-1ms",
                "ticks: 1-hour box, warm: 1 ms / median latency",
                round(ms, 4),
                1.0,
                round(1.0 / ms, 3),
                1.0,
                ms <= 1.0,
                unit="ms",
            )
        )
    return out


# ============================================================================================
# child benchmark processes
# ============================================================================================


def ticks_records(n: int):
    """``n`` gen://ticks records from the C generator (a numpy structured array)."""
    import numpy as np  # heavy: only in the children

    from ..model.layouts import get_layout
    from ..sources.generators import generate

    arr = np.empty(n, dtype=get_layout(LAYOUT).dtype)
    generate(LAYOUT, 0, n, impl="c", out=arr)
    return arr


def _venue_valid(arr):
    """The venue's validity (bit 0 of the validity byte: set = a value)."""
    return (arr["_validity"][:, 0] & 1).astype(bool)


def ticks_table(arr):
    """The records as an Arrow table: ts a timestamp[ns], sym fixed_size_binary(8), venue nullable."""
    import pyarrow as pa  # heavy: only in the children

    cols = {}
    for name in arr.dtype.names:
        if name.startswith("_"):
            continue
        if name == "sym":
            cols[name] = pa.array(arr[name], type=pa.binary(8))
        elif name == "venue":
            cols[name] = pa.array(arr[name], mask=~_venue_valid(arr))
        else:
            cols[name] = pa.array(arr[name])
    return pa.table(cols)


def ticks_frame(arr):
    """The records as ArcticDB's DataFrame: a DatetimeIndex on ts, sym a str column; each
    column contiguous (ArcticDB cannot read a view whose 41-byte stride is not a multiple of
    its item size)."""
    import numpy as np  # heavy: only in the children
    import pandas as pd  # optional: the [peers] extra; heavy

    cols = {
        name: np.ascontiguousarray(arr[name])
        for name in arr.dtype.names
        if not name.startswith("_") and name not in ("ts", "sym")
    }
    df = pd.DataFrame(cols, index=pd.DatetimeIndex(np.ascontiguousarray(arr["ts"]), name="ts"), copy=False)
    df.insert(0, "sym", arr["sym"].astype("U8"))
    return df


def child_ticks_arcticdb(path: str, n: int) -> dict:
    lib = arctic_library(path, n * 200)
    return arctic_write_read(lib, "ticks", [ticks_frame(ticks_records(n))], path, n)


def child_ticks_parquet(path: str, n: int) -> dict:
    import pyarrow.parquet as pq  # heavy: only in this child

    table = ticks_table(ticks_records(n))
    os.makedirs(path, exist_ok=True)
    f = Path(path) / "ticks.parquet"
    t = time.perf_counter()
    pq.write_table(table, f, compression="zstd")
    fd = os.open(f, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    w = time.perf_counter() - t
    return {"write_s": w, "disk_bytes": disk_bytes(path)}


def child_ticks_read(uri: str) -> dict:
    from ..read.dataset import open as open_ds  # heavy: numpy, pyarrow; only in this child

    with open_ds(uri) as ds:
        del_rows = ds.to_arrow().num_rows  # warm-up
        t = time.perf_counter()
        rows = ds.to_arrow().num_rows
        s = time.perf_counter() - t
    if rows != del_rows:
        raise RuntimeError(f"read {rows} rows, then {del_rows}")
    return {"seconds": s, "rows": rows}


def child_ticks_box(uri: str, reps: int = 200) -> dict:
    """A 1-hour box on ts (from the hour of the middle record), warm: median of ``reps``."""
    import numpy as np  # heavy: only in this child

    from ..read.dataset import open as open_ds  # heavy: numpy, pyarrow; only in this child

    with open_ds(uri) as ds:
        mid = ds.read_records(ds.manifest.records // 2, ds.manifest.records // 2 + 1)["ts"][0]
        lo = np.datetime64(int(mid.astype("int64")) // HOUR_NS * HOUR_NS, "ns")
        ts = (lo, lo + np.timedelta64(HOUR_NS, "ns"))
        cells = ds.read_box(ts=ts).num_rows  # warm-up: opens the shards and the index
        lat = []
        for _ in range(reps):
            t = time.perf_counter()
            ds.read_box(ts=ts)
            lat.append(time.perf_counter() - t)
    return {"seconds": statistics.median(lat), "box_cells": cells, "box_latencies_s": lat}
