"""What the integrity checks cost (brief D, issue items 4, 11, 11b): medians, warm cache.

    .venv/bin/python bench/integrity.py [--n 2000000] [--docs 200000] [--repeats 7] [--json]

1. whole-batch reads (`Dataset.iter_batches`, what read_records / to_arrow / export use):
   the stored value's size + xxh3 checked against the manifest before the decode, vs the
   decode alone; MB/s of records, and the share of the check;
2. a warm 1,000-cell box query (`read_box`, array i0:10,i1:100000 as in the demo) vs an
   xxh3 of the chunk pieces it reads (what checking their index checksums would add);
3. a warm document `get` (block format) vs a range checksum of its batch (the manifest's
   checksum is per batch: checking it on a get means reading the whole batch);
4. LMDB's node check before a value is touched (`LmdbStore._value`): a range scan over
   one-value-per-document items (format raw), with and without the check;
5. reading the manifest: json decode alone vs with validation (manifest_check), for
   10,000 and 100,000 batch rows.

Prints one line per figure (or --json). Needs ~N x 200 bytes free in --dir.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time


def median_s(fn, repeats: int) -> float:
    fn()  # warm
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def batch_reads(root: str, n: int, repeats: int) -> dict:
    import loader
    from loader.stores.health import check_value

    uri = f"lmdb://{root}/flat"
    loader.load(f"gen://scidb96?n={n}", uri, shards=2, workers=2, progress="none")
    ds = loader.open(uri)
    bs = ds.manifest.batches
    dec = ds.serializer.decode

    def decode_only():
        for b in bs:
            dec(ds._value(b))

    def checked():
        for b in bs:
            v = ds._value(b)
            check_value(uri, b, v)
            dec(v)

    plain, with_check = median_s(decode_only, repeats), median_s(checked, repeats)
    mb = n * 96 / 1e6
    ds.close()
    return {
        "records": n,
        "decode_mb_s": round(mb / plain),
        "checked_mb_s": round(mb / with_check),
        "check_share": round((with_check - plain) / with_check, 3),
        "uri": uri,
    }


def box_query(uri: str, repeats: int) -> dict:
    import xxhash

    import loader
    from loader.arrays.finalize import finalize
    from loader.arrays.query import _reader, array_index

    finalize(uri, dims="i0:10,i1:100000")
    ds = loader.open(uri)
    box = {"i0": (0, 10), "i1": (500_000, 501_000)}  # 1,000 cells (i0 = j mod 10, i1 = j)
    rows = ds.read_box(**box).num_rows
    q = median_s(lambda: ds.read_box(**box), repeats * 20)
    ai = array_index(ds, "grid")
    import numpy as np

    hit = np.flatnonzero((ai.rmax >= 0) & (ai.rmin < 10) & (ai.cmax >= 500_000) & (ai.cmin < 501_000))

    def hash_pieces():
        for i in hit.tolist():
            rd = _reader(ds, int(ai.shard[i]), ai.table)
            v = rd.get(ai.keys[i])
            xxhash.xxh3_64_intdigest(v)
            rd.__exit__(None, None, None)

    h = median_s(hash_pieces, repeats * 20)
    nbytes = 0
    for i in hit.tolist():
        rd = _reader(ds, int(ai.shard[i]), ai.table)
        nbytes += len(rd.get(ai.keys[i]))
        rd.__exit__(None, None, None)
    ds.close()
    return {
        "cells": rows,
        "query_ms": round(q * 1e3, 3),
        "pieces": len(hit),
        "piece_bytes": nbytes,
        "xxh3_of_pieces_ms": round(h * 1e3, 3),
        "would_add": round(h / q, 2),
    }


def docs_get(root: str, ndocs: int, repeats: int) -> dict:
    import loader
    from loader.docs.tables import range_checksum

    uri = f"lmdb://{root}/docs"
    loader.load(f"gen://docs?n={ndocs}&seed=1", uri, shards=2, workers=2, progress="none")
    ds = loader.open(uri)
    ids = list(range(7, ndocs, max(1, ndocs // 500)))

    def gets():
        for i in ids:
            ds.get(i)

    g = median_s(gets, repeats) / len(ids)
    b = ds.manifest.batches[len(ds.manifest.batches) // 2]
    st = ds.shard(b.shard)
    r = median_s(lambda: range_checksum(st, b.table, b.lo, b.hi, True), repeats)
    ds.close()
    return {
        "get_us": round(g * 1e6, 1),
        "batch_range_checksum_us": round(r * 1e6, 1),
        "batch_docs": b.docs,
        "would_add": round(r / g, 1),
    }


def lmdb_value_check(root: str, ndocs: int, repeats: int) -> dict:
    """Documents in format raw (one small value each, LMDB): a range scan of one shard's
    table, full `scan()` (decoded) and single gets, with the node check and without it."""
    import loader
    from loader.stores.lmdb_store import LmdbStore

    uri = f"lmdb://{root}/raw"
    loader.load(f"gen://docs?n={ndocs}&seed=1", uri, shards=1, workers=1, format="raw", progress="none")
    ds = loader.open(uri)
    table = ds.manifest.batches[0].table
    st = ds.shard(0)
    ids = list(range(3, ndocs, max(1, ndocs // 2000)))

    def gets():
        for i in ids:
            ds.get(i)

    figures = {"range": lambda: sum(1 for _ in st.range(table=table)), "scan": ds.scan, "get": gets}
    checked = {k: median_s(f, repeats) for k, f in figures.items()}
    real = LmdbStore._pages
    LmdbStore._pages = lambda self, refresh=False: None  # no check (for this figure only)
    try:
        plain = {k: median_s(f, repeats) for k, f in figures.items()}
    finally:
        LmdbStore._pages = real
    ds.close()
    out = {"items": ndocs}
    for k in figures:
        per = len(ids) if k == "get" else ndocs
        out[k] = {
            "unchecked_us": round(plain[k] / per * 1e6, 2),
            "checked_us": round(checked[k] / per * 1e6, 2),
            "check_share": round((checked[k] - plain[k]) / checked[k], 3),
        }
    return out


def manifest_read(root: str, repeats: int) -> dict:
    import loader.model.manifest as mf
    from loader.model.manifest_check import problem

    out = {}
    with open(os.path.join(root, "flat", "manifest.json")) as f:
        d = json.load(f)
    row = d["batches"][0]
    for n in (10_000, 100_000):
        d["batches"] = [[s, s % 2, s * row[3], row[3], row[4], row[5]] for s in range(n)]
        text = json.dumps(d)
        dec = median_s(lambda text=text: json.loads(text), repeats)
        val = median_s(lambda text=text: problem(json.loads(text)), repeats)
        full = median_s(lambda text=text: mf.Manifest.from_json(json.loads(text)), repeats)
        out[n] = {
            "json_ms": round(dec * 1e3, 1),
            "json_and_check_ms": round(val * 1e3, 1),
            "json_and_objects_ms": round(full * 1e3, 1),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bulkload-integrity-", dir=a.dir)
    try:
        res = {"batch_reads": batch_reads(root, a.n, a.repeats)}
        res["box_query"] = box_query(res["batch_reads"].pop("uri"), a.repeats)
        res["docs_get"] = docs_get(root, a.docs, a.repeats)
        res["lmdb_value_check"] = lmdb_value_check(root, a.docs, a.repeats)
        res["manifest_read"] = manifest_read(root, a.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
