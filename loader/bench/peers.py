"""The ``peers`` section: other ways of storing the same records, measured on the same
machine in the same run - naive loops (py-lmdb one key per record, py-lmdb one key per
10,000-record blob, rocksdict WriteBatch, the pycapnp builder field by field). With the
``bulkload[peers]`` extra, ArcticDB write / read to ``lmdb://`` and TileDB sparse 2-D write
and box read are children of this module too, run interleaved with bulkload's loads by the
versus section (`versus`).

The ``child_*`` functions are the child benchmark processes (run by `child`).
ArcticDB, TileDB and pandas are optional and heavy: they are imported only inside the child
that measures them (and by `native_versions`), never by the suite's other modules.

Invariants: a peer that is not installed is "skipped: not installed (pip install
'bulkload[peers]')", never estimated; record generation is never timed for a peer (that
favours the peers); ArcticDB's child times the DataFrame build and the write apart (both
figures are reported), TileDB's times the write only (its arrays built beforehand).

Crash behaviour: every peer writes under ``peer`` in the work directory, removed before each
repeat and after the figure (and with the work directory by the runner).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import time
from collections.abc import Callable

from .processes import disk_bytes, rm, settle
from .records import LAYOUT, RECORD_SIZE, generate_records
from .runner import Bench

#: import name of each optional peer package (pip install 'bulkload[peers]')
PEER_PACKAGES = {"arcticdb": "arcticdb", "tiledb": "tiledb", "pandas": "pandas"}
NOT_INSTALLED = "skipped: not installed (pip install 'bulkload[peers]')"
NAIVE = "records pre-generated in memory, generation not timed; one write transaction, synced"


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def native_versions() -> dict:
    """The C library versions of the optional peers that are installed (libtiledb)."""
    out = {}
    try:
        import tiledb  # optional: the [peers] extra; heavy

        out["libtiledb"] = ".".join(map(str, tiledb.libtiledb.version()))
    except Exception:
        pass
    return out


def section_peers(b: Bench) -> None:
    """The naive peers (ArcticDB and TileDB are measured interleaved with bulkload's loads:
    the versus section)."""
    _naive_peers(b)


def _naive_peers(b: Bench) -> None:
    nn, d = b.p.n_naive, b.work / "peer"
    for fid, kind, title, recs, note in (
        ("peer-lmdb-per-record", "lmdb_per_record", "py-lmdb put loop, one key per record", nn, NAIVE),
        ("peer-lmdb-blob", "lmdb_blob", "py-lmdb, one key per 10,000-record blob", nn, NAIVE),
        (
            "peer-rocksdict-writebatch",
            "rocksdict_wb",
            "rocksdict WriteBatch (key per record) per 10,000",
            nn,
            "records pre-generated; raw_mode, flushed at the end",
        ),
        (
            "peer-pycapnp-builder",
            "capnp_builder",
            "pycapnp builder, field by field",
            b.p.n_builder,
            "rows pre-converted to Python tuples; build + to_bytes, no store",
        ),
    ):
        f = b.fig(fid, "peers", title, recs, limit="gen-file-fsync", note=note, workers=1)

        def one(i: int, kind: str = kind, recs: int = recs) -> dict:
            return b.child_sample(kind, path=str(d), n=recs)

        def setup(i: int) -> None:
            rm(d)
            settle()

        b.repeat(f, one, setup=setup, teardown=lambda: rm(d))


# ============================================================================================
# child benchmark processes
# ============================================================================================


def child_lmdb_per_record(path: str, n: int) -> dict:
    raw = generate_records(n).tobytes()

    def put_each(txn) -> None:
        for i in range(n):
            txn.put(i.to_bytes(8, "big"), raw[i * RECORD_SIZE : (i + 1) * RECORD_SIZE])

    return {"seconds": _timed_lmdb_txn(path, n * 300 + (64 << 20), put_each)}


def child_lmdb_blob(path: str, n: int, b: int = 10_000) -> dict:
    raw = generate_records(n).tobytes()

    def put_blobs(txn) -> None:
        for k, lo in enumerate(range(0, n, b)):
            txn.put(k.to_bytes(8, "big"), raw[lo * RECORD_SIZE : min(n, lo + b) * RECORD_SIZE], append=True)

    return {"seconds": _timed_lmdb_txn(path, n * 200 + (64 << 20), put_blobs)}


def _timed_lmdb_txn(path: str, map_size: int, write: Callable[[object], None]) -> float:
    """Seconds of one py-lmdb write transaction ``write(txn)`` in a new environment, synced."""
    import lmdb  # a child imports only the store its figure measures

    os.makedirs(path, exist_ok=True)
    env = lmdb.open(path, map_size=map_size)
    t = time.perf_counter()
    with env.begin(write=True) as txn:
        write(txn)
    env.sync(True)
    s = time.perf_counter() - t
    env.close()
    return s


def child_rocksdict_wb(path: str, n: int, b: int = 10_000) -> dict:
    from rocksdict import Options, Rdict, WriteBatch  # a child imports only the store it measures

    raw = generate_records(n).tobytes()
    db = Rdict(path, Options(raw_mode=True))
    t = time.perf_counter()
    for lo in range(0, n, b):
        wb = WriteBatch(raw_mode=True)
        for i in range(lo, min(n, lo + b)):
            wb.put(i.to_bytes(8, "big"), raw[i * RECORD_SIZE : (i + 1) * RECORD_SIZE])
        db.write(wb)
    db.flush()
    s = time.perf_counter() - t
    db.close()
    return {"seconds": s}


def child_capnp_builder(path: str, n: int) -> dict:
    from ..model.layouts import get_layout  # heavy: numpy and pycapnp, only in this child

    lay = get_layout(LAYOUT)
    mod = lay.capnp_module()
    rows = generate_records(n).tolist()
    names = list(lay.dtype.names or ())  # a structured dtype: always named
    t = time.perf_counter()
    msg = mod.Batch.new_message()
    msg.start = 0
    lst = msg.init("records", n)
    for i, row in enumerate(rows):
        r = lst[i]
        for name, v in zip(names, row):
            setattr(r, name, v)
    data = msg.to_bytes()
    s = time.perf_counter() - t
    return {"seconds": s, "message_bytes": len(data)}


def child_arcticdb(path: str, n: int) -> dict:
    """ArcticDB's write of the records: the DataFrame built from them (``build_s``), then
    ``lib.write`` to ``lmdb://`` (``write_s``; ArcticDB fdatasyncs its LMDB and compresses
    with LZ4 by default), then the read back (``read_s``); bytes on disk after the write."""
    import pandas as pd  # optional: the [peers] extra; heavy

    records = generate_records(n)
    lib = arctic_library(path, n * RECORD_SIZE * 3)
    t = time.perf_counter()
    # the fastest build: one column per field, views of the records (pd.DataFrame(records)
    # of a structured array converts row by row: ~290 MB/s, which would handicap the peer)
    df = pd.DataFrame({name: records[name] for name in records.dtype.names or ()}, copy=False)
    b = time.perf_counter() - t
    del records
    out = arctic_write_read(lib, "records", [df], path, n)
    return {"build_s": b, "build_write_s": b + out["write_s"]} | out


def arctic_library(path: str, map_bytes: int):
    """The ArcticDB library ``bench`` on ``lmdb://path`` (created), its map ``map_bytes`` (>= 1 GiB)."""
    from arcticdb import Arctic  # optional: the [peers] extra; heavy

    os.makedirs(path, exist_ok=True)
    return Arctic(f"lmdb://{path}?map_size={max(1024, map_bytes // 2**20)}MB").get_library(
        "bench", create_if_missing=True
    )


def arctic_write_read(lib, symbol: str, frame: list, path: str, n: int) -> dict:
    """``lib.write`` of the DataFrame ``frame[0]`` (taken out of the list: freed before the
    read) then ``lib.read`` of it, each timed; the bytes on disk after the write."""
    df = frame.pop()
    t = time.perf_counter()
    lib.write(symbol, df)
    w = time.perf_counter() - t
    on_disk = disk_bytes(path)
    del df
    t = time.perf_counter()
    back = lib.read(symbol).data
    r = time.perf_counter() - t
    if len(back) != n:
        raise RuntimeError(f"ArcticDB read back {len(back)} rows, expected {n}")
    return {"write_s": w, "read_s": r, "disk_bytes": on_disk}


def child_tiledb(path: str, n: int, box: dict, reps: int = 50) -> dict:
    import numpy as np  # heavy: only in this child
    import tiledb  # optional: the [peers] extra; heavy

    arr = generate_records(n)
    attrs_names = [x for x in arr.dtype.names or () if x not in ("i0", "i1")]
    cols = {x: np.ascontiguousarray(arr[x]) for x in attrs_names}
    i0, i1 = np.ascontiguousarray(arr["i0"]), np.ascontiguousarray(arr["i1"])
    hi = int(i1.max())
    dom = tiledb.Domain(
        tiledb.Dim(name="i0", domain=(0, 9), tile=10, dtype=np.int32),
        tiledb.Dim(name="i1", domain=(0, max(hi, 1)), tile=min(100_000, max(hi, 1)), dtype=np.int32),
    )
    schema = tiledb.ArraySchema(
        domain=dom, sparse=True, attrs=[tiledb.Attr(name=x, dtype=arr.dtype[x]) for x in attrs_names]
    )
    tiledb.Array.create(path, schema)
    t = time.perf_counter()
    with tiledb.open(path, "w") as A:
        A[i0, i1] = cols
    w = time.perf_counter() - t
    on_disk = disk_bytes(path)
    (a0, b0), (a1, b1) = box["i0"], box["i1"]
    lat = []
    with tiledb.open(path, "r") as A:
        res = A[a0:b0, a1:b1]  # warm-up
        for _ in range(reps):
            t = time.perf_counter()
            res = A[a0:b0, a1:b1]
            lat.append(time.perf_counter() - t)
    return {
        "write_s": w,
        "box_s": statistics.median(lat),
        "box_cells": len(res["d0"]),
        "disk_bytes": on_disk,
        "box_latencies_s": lat,
    }
