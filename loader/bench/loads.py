"""bulkload's own load figures: the ``load`` section (1 worker vs all, capnp vs Arrow
none/lz4/zstd, lmdb vs rocksdb vs mem://, a stdin pipe), the ``scaling`` section (load over
workers 1..cores) and the ``rss`` section (peak RSS of the whole job for a large N vs a
small N). Every load is `bulkload load ... --json` in a fresh, sampled process tree.

A figure already measured by an earlier section (the versus section measures the headline
and the compressed loads interleaved with the peers) is not measured again.

Invariants: a load's time is its report's own ``seconds`` (from entering load() to the
fsynced shards and the committed manifest), its wall time is kept beside it; a load that
does not report exactly ``n`` records fails its figure; shards = cores; the dataset of a
figure is deleted (and the page cache flushed) before each repeat and after the figure.

Crash behaviour: datasets live in the run's work directory (or /dev/shm/bulkload for
mem://) and are removed by the runner; a killed run may leave them.
"""

from __future__ import annotations

import functools
import json
import shlex
import time
from dataclasses import dataclass

from .processes import cached_fraction, rm, run_sampled, settle, tail
from .records import LAYOUT, WORKLOADS
from .runner import Bench


@dataclass(frozen=True)
class LoadConfig:
    """One load figure of the ``load`` section."""

    id: str
    title: str
    scheme: str
    workers: int | None  # None: not given (bulkload's default: the cores, in-process when small)
    limit: str
    note: str = ""
    format: str | None = None
    compression: str | None = None
    stdin: bool | None = None
    layout: str = LAYOUT  # the workload: gen://LAYOUT (records of WORKLOADS[layout] bytes)

    def params(self, shards: int) -> dict:
        """The figure's params: the options that are set, and the shard count."""
        return {
            k: v
            for k, v in (
                ("scheme", self.scheme),
                ("format", self.format),
                ("compression", self.compression),
                ("stdin", self.stdin),
                ("layout", None if self.layout == LAYOUT else self.layout),
            )
            if v is not None
        } | {"shards": shards}


def load_configs(cores: int, workloads: tuple[str, ...] = tuple(WORKLOADS)) -> list[LoadConfig]:
    """The load figures: every configuration on scidb96; the main ones on each other workload."""
    return _scidb96_configs(cores) + (_ticks_configs(cores) if "ticks" in workloads else [])


def _ticks_configs(c: int) -> list[LoadConfig]:
    """gen://ticks (41-byte records: a ns timestamp, bytes[8], bool, a nullable field): the
    default load, the compressed ones ArcticDB is compared with, and a stdin pipe."""
    return [
        LoadConfig(
            "load-ticks-lmdb-capnp",
            f"load ticks lmdb capnp uncompressed, {c} workers",
            "lmdb",
            c,
            "gen-file-fsync",
            layout="ticks",
        ),
        LoadConfig(
            "load-ticks-lmdb-capnp-zstd",
            "load ticks lmdb capnp zstd (byte shuffle)",
            "lmdb",
            c,
            "gen-file-fsync",
            format="capnp",
            compression="zstd",
            layout="ticks",
        ),
        LoadConfig(
            "load-ticks-lmdb-arrow-lz4",
            "load ticks lmdb arrow lz4",
            "lmdb",
            c,
            "gen-file-fsync",
            format="arrow",
            compression="lz4",
            layout="ticks",
        ),
        LoadConfig(
            "load-ticks-stdin-capnp",
            "bulkload-gen --layout ticks | load - (stdin pipe), lmdb capnp",
            "lmdb",
            c,
            "gen-file-fsync",
            stdin=True,
            layout="ticks",
        ),
    ]


def _scidb96_configs(cores: int) -> list[LoadConfig]:
    c = cores
    return [
        LoadConfig(
            "load-lmdb-capnp-w1",
            "load lmdb capnp, 1 worker",
            "lmdb",
            1,
            "gen-file-fsync",
            note="SciDB single-process flat load: 37 MB/s",
        ),
        LoadConfig(
            f"load-lmdb-capnp-w{c}",
            f"load lmdb capnp uncompressed, {c} workers",
            "lmdb",
            c,
            "gen-file-fsync",
            note="SciDB 32-core parallel flat load: 491 MB/s",
        ),
        LoadConfig(
            "load-lmdb-arrow-none",
            "load lmdb arrow (no compression)",
            "lmdb",
            c,
            "gen-file-fsync",
            format="arrow",
            compression="none",
        ),
        LoadConfig(
            "load-lmdb-arrow-lz4", "load lmdb arrow lz4", "lmdb", c, "gen-file-fsync", format="arrow", compression="lz4"
        ),
        LoadConfig(
            "load-lmdb-arrow-zstd",
            "load lmdb arrow zstd",
            "lmdb",
            c,
            "gen-file-fsync",
            format="arrow",
            compression="zstd",
        ),
        LoadConfig(
            "load-lmdb-capnp-lz4",
            "load lmdb capnp lz4 (byte shuffle), --workers given",
            "lmdb",
            c,
            "gen-file-fsync",
            format="capnp",
            compression="lz4",
        ),
        LoadConfig(
            "load-lmdb-capnp-zstd",
            "load lmdb capnp zstd (byte shuffle)",
            "lmdb",
            c,
            "gen-file-fsync",
            format="capnp",
            compression="zstd",
        ),
        LoadConfig("load-rocksdb-capnp", "load rocksdb capnp", "rocksdb", c, "gen-file-fsync"),
        LoadConfig("load-mem-capnp", "load mem:// capnp (LMDB on /dev/shm)", "mem", c, "gen-shm"),
        LoadConfig(
            "load-stdin-capnp",
            "bulkload-gen | load - (stdin pipe), lmdb capnp",
            "lmdb",
            c,
            "gen-file-fsync",
            stdin=True,
            note="durable, so bounded by the disk limit; the pipe's own limit is gen-pipe",
        ),
    ]


def load_once(
    b: Bench,
    n: int,
    uri: str,
    *,
    workers: int | None,
    format: str | None = "capnp",
    compression: str | None = "none",
    stdin: bool = False,
    source: str | None = None,
    prepare=None,
    batch_records: int | None = None,
    bulkload: list[str] | None = None,
    layout: str = LAYOUT,
) -> dict:
    """One `bulkload load` run in a fresh process tree; returns a sample. ``format`` /
    ``compression`` / ``workers`` / ``batch_records`` None: bulkload's defaults (the option is not
    given); ``bulkload``: the command that runs bulkload (default: this one's); ``source``: a file
    of raw records instead of the generator (the sample says how much of it was in the page
    cache before ``prepare``, as the load started, and how long ``prepare`` took); ``prepare()``:
    untimed, before `settle`, so that every load starts right after its settle: reading a
    warm 1.9 GB file takes 1.1-1.7 s on this machine, time in which the VM may take back the
    free memory settle warmed."""
    rm(b.ds_root(uri))
    before = cached_fraction(source) if source else None
    t = time.perf_counter()
    if prepare:
        prepare()
    prepare_s = time.perf_counter() - t
    settle()
    resident = cached_fraction(source) if source else None
    args = [uri, "--json", "--quiet", "--shards", str(b.cores)] + (["--workers", str(workers)] if workers else [])
    if layout != LAYOUT:
        args += ["--layout", layout]
    args += [
        x
        for opt, v in (("--format", format), ("--compression", compression), ("--batch-records", batch_records))
        if v
        for x in (opt, str(v))
    ]
    if stdin:
        gen = f"{shlex.quote(b.gen)}{'' if layout == LAYOUT else ' --layout ' + shlex.quote(layout)}"
        cmd = [
            "sh",
            "-c",
            f"{gen} {n} | " + " ".join(shlex.quote(a) for a in [*(bulkload or [b.bulkload]), "load", "-", *args]),
        ]
    else:
        cmd = [
            *(bulkload or [b.bulkload]),
            "load",
            *([source] + (["--layout", LAYOUT] if layout == LAYOUT else []) if source else [f"gen://{layout}?n={n}"]),
            *args,
        ]
    p = run_sampled(cmd)
    if p.rc != 0:
        raise RuntimeError(tail(p.err) or f"bulkload load exited with {p.rc}")
    rep = json.loads(p.out)
    if rep["records"] != n:
        raise RuntimeError(f"loaded {rep['records']} records, expected {n}")
    return {
        "seconds": rep["seconds"],
        "wall_s": p.wall_s,
        "peak_tree_rss_bytes": p.peak_tree_rss_bytes,
        "peak_tree_anon_bytes": p.peak_tree_anon_bytes,
        "report_peak_rss_bytes": rep.get("peak_rss_bytes"),
        "stages": rep.get("stages"),
        "stored_bytes": rep.get("stored_bytes"),
        "batches": rep.get("batches"),
        "workers": rep.get("workers"),
        "in_process": rep.get("in_process"),
        "compression": rep.get("compression"),
    } | (
        {
            "source_cached": round(resident, 4),
            "source_cached_before": round(before, 4),
            "prepare_s": round(prepare_s, 3),
        }
        if resident is not None and before is not None  # a source file
        else {}
    )


def compressed_config(spec: str, cores: int) -> LoadConfig:
    """The load figure of a compressed configuration ``FORMAT:COMPRESSION`` (arrow:lz4)."""
    fmt, _, comp = spec.partition(":")
    if not fmt or not comp:
        raise ValueError(f"compressed configuration {spec!r} is not FORMAT:COMPRESSION (e.g. arrow:lz4)")
    return LoadConfig(
        f"load-lmdb-{fmt}-{comp}",
        f"load lmdb {fmt} {comp}",
        "lmdb",
        cores,
        "gen-file-fsync",
        format=fmt,
        compression=comp,
    )


def section_load(b: Bench) -> None:
    n = b.p.n
    for cfg in load_configs(b.cores, b.p.workloads):
        if b.measured(cfg.id):
            continue  # measured interleaved with the peers (the versus section)
        f = b.fig(
            cfg.id,
            "load",
            cfg.title,
            n,
            limit=cfg.limit,
            note=cfg.note,
            workers=cfg.workers,
            params=cfg.params(b.cores),
            record_size=WORKLOADS[cfg.layout],
        )
        uri = b.dataset(cfg.scheme, cfg.id)

        def one(i: int, cfg: LoadConfig = cfg, uri: str = uri) -> dict:
            return load_once(
                b,
                n,
                uri,
                workers=cfg.workers,
                format=cfg.format or "capnp",
                compression=cfg.compression or "none",
                stdin=bool(cfg.stdin),
                layout=cfg.layout,
            )

        b.repeat(f, one, teardown=functools.partial(_remove, b, uri))


def section_scaling(b: Bench) -> None:
    """load lmdb capnp over workers 1..cores (those the load section measured are kept)."""
    n = b.p.n
    for w in range(1, b.cores + 1):
        fid = f"load-lmdb-capnp-w{w}"
        if b.measured(fid):
            continue  # measured (or tried) by the versus or load section
        f = b.fig(
            fid,
            "load",
            f"load lmdb capnp, {w} workers",
            n,
            limit="gen-file-fsync",
            workers=w,
            params={"scheme": "lmdb", "shards": b.cores},
        )
        uri = b.dataset("lmdb", fid)

        def one(i: int, w: int = w, uri: str = uri) -> dict:
            return load_once(b, n, uri, workers=w)

        b.repeat(f, one, teardown=functools.partial(_remove, b, uri))


def section_rss(b: Bench) -> None:
    """Peak RSS of the whole load job for each N of ``rss_n`` (memory flat in N)."""
    if not b.p.rss_n:
        return
    for n in b.p.rss_n:
        f = b.fig(
            f"rss-load-n{n}",
            "rss",
            f"load lmdb capnp, {b.cores} workers, n={n:,}",
            n,
            kind="throughput",
            limit="gen-file-fsync",
            workers=b.cores,
            note="peak RSS of the whole job (all processes)",
        )
        uri = b.dataset("lmdb", f"rss{n}")

        def one(i: int, n: int = n, uri: str = uri) -> dict:
            return load_once(b, n, uri, workers=b.cores)

        b.repeat(f, one, teardown=functools.partial(_remove, b, uri))


def _remove(b: Bench, uri: str) -> None:
    """Remove the dataset at ``uri`` (a figure's teardown)."""
    rm(b.ds_root(uri))
