"""Documents benchmark (issue 7): storage size near the entropy limit, naive peers' load
times, and get-by-id latency; the real pipeline (`loader.load`, layout docs) next to them.

    .venv/bin/python bench/docs.py [--n N] [--json-n M] [--repeats R] [--dir DIR]
                                   [--lookups K] [--json] [--parts pipeline,load,size]

Every figure is measured in the same run; compare ratios (the machine is shared).

(d) pipeline (default part): load gen://docs?n=N (seed 1) with `loader.load` (what
    `bulkload load` runs: 2 shards, 2 workers, durable) into rocksdb:// and lmdb://, in
    format block (the default: documents in page-filling blocks, texts zstd per block)
    and raw (one value per document; zstd with a dictionary per shard on LMDB, RocksDB's
    own zstd + dictionary): size on disk of the whole dataset directory / limit, and
    `Dataset.get` latency (c).
    limit = all texts concatenated, one zstd level-3 frame (the practical limit).
(c) get-by-id: median and p99 of single gets (id -> decompressed, decoded document) for
    --lookups random ids, warm (page cache hot) and cold (store closed, its files evicted
    with posix_fadvise(DONTNEED), reopened).
(b) load (default part): M = --json-n documents (default min(N, 200000)); each contender
    runs --repeats times (default 3), interleaved, `os.sync()` before each; medians:
    floor               only reading every file of the JSON directory, 2 processes
    naive-lmdb          one process: sorted listdir, read each file, txn.put(key, text) in one txn
    naive-rocksdict     one process: sorted listdir, read each file, db[key] = bytes, zstd
    pipe-json-{lmdb,rocksdb}   bulkload load DIR --layout docs (defaults; durable, committed)
    naive-gen-lmdb      one process: generate_docs (the C generator, 64K docs per call), then
                        txn.put(key, capnp Doc value) per document, one txn, sync
    pipe-gen-{lmdb,rocksdb}    bulkload load gen://docs?n=M&seed=1
(a) size (phase 1, optional): hand-built stores of one value per document -
    lmdb-{raw,capnp}-zdict (py-lmdb, values compressed one by one with a zstd dictionary)
    and rocksdb-zstd[-dict][-bN] (rocksdict, SST ingested, RocksDB zstd [with a 16 KiB
    dictionary], N KiB data blocks). Size = bytes allocated on disk (st_blocks).

Stores and the JSON directory live under --dir (default /work/tmp-docs/bench; must be
a real disk for cold reads, not tmpfs) and are deleted at the end. Results: a table, and
JSON in bench/out/docs.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loader.bench.processes import evict
from loader.docs import batch as B
from loader.docs import gen as G
from loader.docs import json_dir as J
from loader.docs import values as V
from loader.docs import zdict

SEED = 1
GEN_CHUNK = 65536
MAP_SIZE = 1 << 40


# --- helpers -------------------------------------------------------------------------


def disk_bytes(path: Path) -> int:
    total = 0
    for root, _d, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def warm(path: Path) -> None:
    for root, _d, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(1 << 24):
                    pass


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def generate(n: int) -> B.DocBatch:
    return B.DocBatch.concat([G.generate_docs(SEED, s, min(GEN_CHUNK, n - s)) for s in range(0, n, GEN_CHUNK)])


# --- LMDB ------------------------------------------------------------------------------


def lmdb_open(path: Path, write: bool):
    import lmdb

    if write:
        path.mkdir(parents=True, exist_ok=True)
    return lmdb.open(
        str(path),
        map_size=MAP_SIZE,
        max_dbs=2,
        readonly=not write,
        lock=write,
        readahead=False,
        sync=write,
        metasync=write,
    )


def lmdb_store(path: Path, keys: list[bytes], values: list[bytes], dict_bytes: bytes) -> float:
    t0 = time.perf_counter()
    env = lmdb_open(path, True)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn)
        txn.put(b"zstd-dict", dict_bytes, db=meta)
        docs = env.open_db(b"docs", txn=txn)
        consumed, added = txn.cursor(db=docs).putmulti(zip(keys, values, strict=True), append=True)
        assert consumed == added == len(keys), (consumed, added)
    env.sync(True)
    env.close()
    return time.perf_counter() - t0


class LmdbReader:
    def __init__(self, path: Path, fmt: str):
        self.env = lmdb_open(path, False)
        self.fmt = fmt
        self.txn = self.env.begin(buffers=True)
        meta = self.env.open_db(b"meta", txn=self.txn, create=False)
        self.db = self.env.open_db(b"docs", txn=self.txn, create=False)
        self.dec = zdict.Decompressor(bytes(self.txn.get(b"zstd-dict", db=meta)))

    def get(self, doc_id: int):
        v = self.txn.get(B.key_of(doc_id), db=self.db)
        return V.decode_value(self.dec.decompress(v), self.fmt, doc_id)

    def close(self):
        self.txn.abort()
        self.env.close()


# --- RocksDB ----------------------------------------------------------------------------


def rocks_options(dict_bytes: int, block_kib: int, level: int = 3):
    from rocksdict import BlockBasedOptions, DBCompressionType, Options

    o = Options(raw_mode=True)
    o.create_if_missing(True)
    o.set_compression_type(DBCompressionType.zstd())
    o.set_bottommost_compression_type(DBCompressionType.zstd())
    # (window bits, level, strategy, max_dict_bytes); -14 is RocksDB's default window
    o.set_compression_options(-14, level, 0, dict_bytes)
    o.set_bottommost_compression_options(-14, level, 0, dict_bytes, True)
    if dict_bytes:
        o.set_zstd_max_train_bytes(dict_bytes * 100)
        o.set_bottommost_zstd_max_train_bytes(dict_bytes * 100, True)
    bb = BlockBasedOptions()
    bb.set_block_size(block_kib * 1024)
    o.set_block_based_table_factory(bb)
    return o


def rocks_store(path: Path, keys: list[bytes], values: list[bytes], opts) -> float:
    from rocksdict import IngestExternalFileOptions, Rdict, SstFileWriter

    t0 = time.perf_counter()
    path.mkdir(parents=True, exist_ok=True)
    db = Rdict(str(path), opts)
    sst = str(path / "ingest.sst")
    w = SstFileWriter(opts)
    w.open(sst)
    for k, v in zip(keys, values, strict=True):
        w[k] = v
    w.finish()
    ing = IngestExternalFileOptions()
    ing.set_move_files(True)
    db.ingest_external_file([sst], ing)
    db.close()
    return time.perf_counter() - t0


class RocksReader:
    def __init__(self, path: Path, opts):
        from rocksdict import AccessType, Rdict

        self.db = Rdict(str(path), opts, access_type=AccessType.read_only(False))

    def get(self, doc_id: int):
        v = self.db.get(B.key_of(doc_id))
        return V.decode_value(v, "raw", doc_id)

    def close(self):
        self.db.close()


def latency(open_reader, path: Path, ids: np.ndarray, expect: B.DocBatch) -> dict:
    out = {}
    for mode in ("warm", "cold"):
        if mode == "warm":
            # read every file once: RocksDB's SstFileWriter drops what it wrote from the
            # page cache (invalidate_page_cache), so "just written" is not warm
            warm(path)
        r = open_reader()
        if mode == "warm":
            for i in ids[:2000].tolist():  # touch
                r.get(i)
        else:
            r.close()
            evict(path)
            r = open_reader()
        ts = []
        pc = time.perf_counter_ns
        for i in ids.tolist():
            t = pc()
            got = r.get(i)
            ts.append(pc() - t)
        r.close()
        # spot-check correctness of the last one
        assert got[2] == expect.text_of(int(ids[-1])) and got[1] == int(expect.created_at[int(ids[-1])])
        out[mode] = {"median_us": statistics.median(ts) / 1000, "p99_us": pct(ts, 0.99) / 1000}
    return out


# --- JSON directory peers ------------------------------------------------------------------


def sorted_json(directory: str) -> list[tuple[str, str]]:
    names = [f for f in os.listdir(directory) if f.endswith(".json")]
    names.sort(key=lambda x: int(x[:-5]))
    return [(n[:-5], os.path.join(directory, n)) for n in names]


def naive_lmdb(directory: str, path: Path) -> float:
    import lmdb

    t0 = time.perf_counter()
    path.mkdir(parents=True, exist_ok=True)
    with lmdb.open(str(path), MAP_SIZE) as env:
        with env.begin(write=True) as txn:
            for doc_id, p in sorted_json(directory):
                with open(p, encoding="utf-8") as f:
                    txn.put(int(doc_id).to_bytes(8, "big"), f.read().encode())
        env.sync(True)
    return time.perf_counter() - t0


def naive_rocksdict(directory: str, path: Path) -> float:
    from rocksdict import DBCompressionType, Options, Rdict

    t0 = time.perf_counter()
    o = Options(raw_mode=True)
    o.set_compression_type(DBCompressionType.zstd())
    db = Rdict(str(path), o)
    for doc_id, p in sorted_json(directory):
        with open(p, encoding="utf-8") as f:
            db[int(doc_id).to_bytes(8, "big")] = f.read().encode()
    db.flush()
    db.close()
    return time.perf_counter() - t0


def _read_all(paths: list[str]) -> int:
    total = 0
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        total += len(os.read(fd, 1 << 20))
        os.close(fd)
    return total


def floor_read(directory: str, pool) -> float:
    t0 = time.perf_counter()
    paths = [p for _i, p in sorted_json(directory)]
    step = 5000
    sum(pool.map(_read_all, [paths[i : i + step] for i in range(0, len(paths), step)]))
    return time.perf_counter() - t0


def pipe_load(source: str, uri: str, **kw) -> dict:
    """One `loader.load` (what `bulkload load` runs); its report's figures."""
    import loader

    t0 = time.perf_counter()
    r = loader.load(source, uri, shards=2, workers=2, progress="none", **kw)
    return {
        "s": time.perf_counter() - t0,
        "docs": r.records,
        "text_MB": r.bytes / 1e6,
        "MB_s": r.bytes / (time.perf_counter() - t0) / 1e6,
        "report_s": r.seconds,
    }


class PipeReader:
    def __init__(self, uri: str):
        import loader

        self.ds = loader.open(uri)

    def get(self, doc_id: int):
        d = self.ds.get(doc_id)
        return d.id, d.created_at, d.text.encode()

    def close(self):
        self.ds.close()


def naive_gen_lmdb(n: int, path: Path) -> float:
    import lmdb

    t0 = time.perf_counter()
    path.mkdir(parents=True, exist_ok=True)
    with lmdb.open(str(path), MAP_SIZE) as env:
        with env.begin(write=True) as txn:
            for s in range(0, n, GEN_CHUNK):
                b = G.generate_docs(SEED, s, min(GEN_CHUNK, n - s))
                for doc_id, ca, text in b.records():
                    txn.put(doc_id.to_bytes(8, "big"), V.encode_doc_capnp(doc_id, ca, text))
        env.sync(True)
    return time.perf_counter() - t0


# --- main ----------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="documents for size/latency (default 1,000,000)")
    ap.add_argument(
        "--json-n", type=int, default=None, help="documents for the load-time part (default min(N, 200000))"
    )
    ap.add_argument("--dir", default="/work/tmp-docs/bench", help="scratch directory on a real disk")
    ap.add_argument("--lookups", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each load contender (medians)")
    ap.add_argument("--skip-load", action="store_true", help="skip part (b)")
    ap.add_argument(
        "--parts",
        default="pipeline,load",
        help="comma-separated: size (a, c: phase-1 store variants), load (b), pipeline (d)",
    )
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "docs.json"))
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    if args.skip_load:
        parts.discard("load")
    n = args.n
    jn = min(n, 200_000) if args.json_n is None else args.json_n
    root = Path(args.dir)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    res: dict = {
        "n": n,
        "json_n": jn,
        "seed": SEED,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "zstandard": zstandard.__version__},
    }
    rows = []

    def row(name, **kv):
        rows.append((name, kv))
        print(
            f"  {name:28s} " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in kv.items()),
            flush=True,
        )

    t_all = time.perf_counter()
    try:
        # ---- (a) size ---------------------------------------------------------------
        t = time.perf_counter()
        batch = generate(n)
        tg = time.perf_counter() - t
        text_bytes = batch.text_nbytes
        row("generate", docs=n, text_MB=text_bytes / 1e6, MB_s=text_bytes / tg / 1e6)
        t = time.perf_counter()
        limit = len(zstandard.ZstdCompressor(level=3).compress(batch.text))
        row("limit zstd-3 one frame", bytes=limit, bits_per_char=limit * 8 / text_bytes, s=time.perf_counter() - t)
        res["text_bytes"] = text_bytes
        res["limit_bytes"] = limit
        keys = B.keys_of(batch.ids)
        rng = np.random.default_rng(7)
        ids = rng.integers(0, n, args.lookups)
        sizes = res["size"] = {}
        lat = res["get"] = {}

        for fmt in ("raw", "capnp") if "size" in parts else ():
            name = f"lmdb-{fmt}-zdict"
            t = time.perf_counter()
            values = V.encode_batch(batch, fmt)
            te = time.perf_counter() - t
            t = time.perf_counter()
            d = zdict.train(zdict.sample(values))
            tt = time.perf_counter() - t
            t = time.perf_counter()
            comp = zdict.Compressor(d).compress_many(values)
            tc = time.perf_counter() - t
            del values
            cbytes = sum(map(len, comp))
            path = root / name
            tw = lmdb_store(path, keys, comp, d)
            del comp
            size = disk_bytes(path)
            sizes[name] = {
                "bytes": size,
                "ratio": size / limit,
                "values_bytes": cbytes,
                "values_ratio": cbytes / limit,
                "encode_s": te,
                "train_s": tt,
                "compress_s": tc,
                "write_s": tw,
            }
            row(
                name,
                ratio=size / limit,
                values_ratio=cbytes / limit,
                MB=size / 1e6,
                compress_MB_s=text_bytes / tc / 1e6,
                write_s=tw,
            )
            lat[name] = latency(lambda path=path, fmt=fmt: LmdbReader(path, fmt), path, ids, batch)
            row(f"  get {name}", **{f"{m}_{k}": v for m, d_ in lat[name].items() for k, v in d_.items()})
            shutil.rmtree(path)

        raw_values = V.encode_batch(batch, "raw") if "size" in parts else []
        for dict_bytes, block_kib in ((0, 4), (16384, 4), (16384, 16)) if "size" in parts else ():
            name = f"rocksdb-zstd{'-dict' if dict_bytes else ''}-b{block_kib}k"
            path = root / name
            opts = rocks_options(dict_bytes, block_kib)
            tw = rocks_store(path, keys, raw_values, opts)
            size = disk_bytes(path)
            sizes[name] = {"bytes": size, "ratio": size / limit, "write_s": tw}
            row(name, ratio=size / limit, MB=size / 1e6, write_s=tw)
            if (dict_bytes, block_kib) in ((16384, 4), (16384, 16)):
                lat[name] = latency(
                    lambda path=path, d=dict_bytes, b=block_kib: RocksReader(path, rocks_options(d, b)),
                    path,
                    ids,
                    batch,
                )
                row(f"  get {name}", **{f"{m}_{k}": v for m, d_ in lat[name].items() for k, v in d_.items()})
            shutil.rmtree(path)
        del raw_values, keys

        # ---- (d) the pipeline at N: size and get-by-id -------------------------------------
        if "pipeline" in parts:
            pipe = res["pipeline"] = {}
            for scheme, fmt in (("rocksdb", "block"), ("lmdb", "block"), ("rocksdb", "raw"), ("lmdb", "raw")):
                name = f"pipe-gen-{scheme}-{fmt}"
                path = root / name
                uri = f"{scheme}://{path}"
                os.sync()
                r = pipe_load(f"gen://docs?n={n}&seed={SEED}", uri, format=fmt)
                size = disk_bytes(path)
                r.update(bytes=size, ratio=size / limit)
                r["get"] = latency(lambda uri=uri: PipeReader(uri), path, ids, batch)
                pipe[name] = r
                row(name, s=r["s"], MB_s=r["MB_s"], ratio=r["ratio"], MB=size / 1e6)
                row(f"  get {name}", **{f"{m}_{k}": v for m, d_ in r["get"].items() for k, v in d_.items()})
                shutil.rmtree(path)

        # ---- (b) load times: each contender --repeats times, interleaved; medians -----------
        if "load" in parts:
            jdir = root / "json"
            jb = batch.slice(0, jn).compact()
            del batch
            t = time.perf_counter()
            J.write_json_dir(jb, jdir)
            os.sync()
            row("write json dir", files=jn, s=time.perf_counter() - t)
            load = res["load"] = {"files": jn, "text_bytes": jb.text_nbytes, "repeats": args.repeats}
            times: dict[str, list[float]] = {}
            disk: dict[str, int] = {}

            def timed(name, fn, path=None):
                if path is not None:
                    shutil.rmtree(path, ignore_errors=True)
                    os.sync()  # the previous contender's writeback is not this one's
                s = fn()
                times.setdefault(name, []).append(s)
                if path is not None:
                    disk[name] = disk_bytes(path)
                    shutil.rmtree(path)
                return s

            ctx = mp.get_context("spawn")
            with ctx.Pool(2) as pool:
                pool.map(_read_all, [[]] * 2)  # start the workers
                for rep in range(args.repeats):
                    timed("floor", lambda: floor_read(str(jdir), pool))
                    timed("naive-lmdb", lambda: naive_lmdb(str(jdir), root / "n"), root / "n")
                    timed("naive-rocksdict", lambda: naive_rocksdict(str(jdir), root / "n"), root / "n")
                    for scheme in ("lmdb", "rocksdb"):
                        timed(
                            f"pipe-json-{scheme}",
                            lambda scheme=scheme: pipe_load(str(jdir), f"{scheme}://{root / 'p'}", layout="docs")["s"],
                            root / "p",
                        )
                    timed("naive-gen-lmdb", lambda: naive_gen_lmdb(jn, root / "n"), root / "n")
                    for scheme in ("lmdb", "rocksdb"):
                        timed(
                            f"pipe-gen-{scheme}",
                            lambda scheme=scheme: pipe_load(
                                f"gen://docs?n={jn}&seed={SEED}", f"{scheme}://{root / 'p'}"
                            )["s"],
                            root / "p",
                        )
                    print(f"  round {rep + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()), flush=True)
            shutil.rmtree(jdir)
            med = {k: statistics.median(v) for k, v in times.items()}
            load["seconds"] = times
            load["median_s"] = med
            load["disk_bytes"] = disk
            for k in med:
                kv = {"s": med[k], "min": min(times[k]), "max": max(times[k])}
                if k in disk:
                    kv["MB"] = disk[k] / 1e6
                if k.startswith("pipe-json"):
                    kv.update(
                        vs_naive_lmdb=med["naive-lmdb"] / med[k],
                        vs_naive_rocksdict=med["naive-rocksdict"] / med[k],
                        vs_floor=med[k] / med["floor"],
                    )
                if k.startswith("pipe-gen"):
                    kv.update(vs_naive_gen_lmdb=med["naive-gen-lmdb"] / med[k])
                row(k, **kv)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    res["total_s"] = time.perf_counter() - t_all
    res["rows"] = [{"name": nm, **kv} for nm, kv in rows]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    if args.json:
        print(json.dumps(res, indent=2))
    print(f"total {res['total_s']:.1f} s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
