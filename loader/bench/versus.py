"""The ``versus`` section: bulkload against ArcticDB and TileDB on the same records, in one
interleaved run (disk, load, arcticdb, tiledb, compressed, file rows per round). The rows,
invariants and crash behaviour: docs/design/bench.md."""

from __future__ import annotations

from pathlib import Path

from .figures import Figure
from .limits import disk_sample
from .loads import LoadConfig, compressed_config, load_once
from .peers import NOT_INSTALLED, installed
from .processes import disk_bytes, evict, rm, settle
from .records import box
from .runner import Bench, Row
from .targets import DEFAULT_LOAD

RECORDS_FILE = "records.bin"


def section_versus(b: Bench) -> None:
    records = b.work / RECORDS_FILE
    rows = [*_load_rows(b), _arcticdb_row(b), _tiledb_row(b), *_compressed_rows(b), *_file_rows(b, records)]
    rows = [r for r in rows if r is not None]
    keep = any(f.id.startswith("load-file") for r in rows for f, _ in r.outputs if f is not None)
    b.interleave(rows, between=lambda phase: disk_sample(b, phase, records, keep=keep and phase != "after"))
    rm(records)


def bulkload_ids(cores: int, compressed: tuple[str, ...]) -> list[str]:
    """The bulkload figures this section measures, in the order of its rows."""
    return [DEFAULT_LOAD, *(compressed_config(c, cores).id for c in compressed), "load-file-warm", "load-file-cold"]


def _load_figure(b: Bench, cfg: LoadConfig) -> Figure | None:
    if b.measured(cfg.id):
        return None
    return b.fig(
        cfg.id,
        "load",
        cfg.title,
        b.p.n,
        limit=cfg.limit,
        note=cfg.note,
        workers=cfg.workers,
        params=cfg.params(b.cores) | {"interleaved": True},
    )


def _load_row(b: Bench, cfg: LoadConfig, source: Path | None = None, prepare=None) -> Row | None:
    f = _load_figure(b, cfg)
    if f is None:
        return None
    uri = b.dataset(cfg.scheme, cfg.id)

    def one(i: int) -> dict:
        s = load_once(
            b,
            b.p.n,
            uri,
            workers=cfg.workers,
            format=cfg.format,
            compression=cfg.compression,
            source=str(source) if source else None,
            prepare=prepare,
        )
        s["disk_bytes"] = disk_bytes(b.ds_root(uri))
        rm(b.ds_root(uri))
        return s

    return Row(one, [(f, "seconds")])


def _load_rows(b: Bench) -> list[Row | None]:
    default = LoadConfig(
        DEFAULT_LOAD,
        "load lmdb, default options (headline)",
        "lmdb",
        None,
        "gen-file-fsync",
        note="no --workers / --format / --compression (capnp + lz4; in-process up to 1 GiB of "
        "records), --shards = cores, durable; interleaved with the peers",
    )
    return [_load_row(b, default)]


def _compressed_rows(b: Bench) -> list[Row | None]:
    return [_load_row(b, compressed_config(c, b.cores)) for c in b.p.compressed]


def _file_rows(b: Bench, records: Path) -> list[Row | None]:
    warm = LoadConfig(
        "load-file-warm",
        "load FILE of raw records (page cache warm), lmdb",
        "lmdb",
        None,
        "gen-file-fsync",
        note="the records file read right before the load (untimed; the sample's "
        "source_cached: the part of it in the page cache then); default options",
    )
    cold = LoadConfig(
        "load-file-cold",
        "load FILE of raw records (evicted: cold), lmdb",
        "lmdb",
        None,
        "cold-read",
        note="the file evicted with posix_fadvise(DONTNEED) before; ratio to the disk's cold "
        "read limit; default options",
    )
    return [
        _load_row(b, warm, records, prepare=lambda: _read_through(records)),
        _load_row(b, cold, records, prepare=lambda: evict(records)),
    ]


def _read_through(path: Path) -> None:
    """Read the file once, so that its pages are in the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(64 << 20):
            pass


def _arcticdb_row(b: Bench) -> Row | None:
    na, d = b.p.n_arctic, b.work / "peer"
    kw = dict(limit="gen-file-fsync", workers=1)
    outputs = [
        (
            b.fig(
                "peer-arcticdb-write-build",
                "peers",
                "ArcticDB DataFrame build + write to lmdb://",
                na,
                note="pd.DataFrame of the records' columns (views) then lib.write (LZ4, fdatasync'd); interleaved",
                **kw,
            ),
            "build_write_s",
        ),
        (
            b.fig(
                "peer-arcticdb-write",
                "peers",
                "ArcticDB write(DataFrame) to lmdb://",
                na,
                note="DataFrame built beforehand, not timed; interleaved",
                **kw,
            ),
            "write_s",
        ),
        (b.fig("peer-arcticdb-read", "peers", "ArcticDB read -> DataFrame from lmdb://", na, limit="npload"), "read_s"),
    ]
    return _peer_row(
        b,
        installed("arcticdb") and installed("pandas"),
        outputs,
        lambda i: b.child_sample("arcticdb", path=str(d), n=na),
        d,
    )


def _tiledb_row(b: Bench) -> Row | None:
    nt, d = b.p.n_tiledb, b.work / "peer"
    outputs = [
        (
            b.fig(
                "peer-tiledb-write",
                "peers",
                "TileDB sparse 2-D write (i0, i1)",
                nt,
                limit="gen-file-fsync",
                note="dims i0 (tile 10), i1 (tile 100000), other fields as attributes; arrays built "
                "beforehand; interleaved",
                workers=1,
            ),
            "write_s",
        ),
        (
            b.fig(
                "peer-tiledb-box",
                "query",
                "TileDB box read ~1,000 cells, warm",
                nt,
                kind="latency",
                note=f"same box shape on the TileDB array of {nt:,} records",
                params={"box": box(nt)},
            ),
            "box_s",
        ),
    ]
    return _peer_row(
        b,
        installed("tiledb"),
        outputs,
        lambda i: b.child_sample("tiledb", path=str(d), n=nt, box=box(nt), reps=b.p.query_reps),
        d,
    )


def _peer_row(b: Bench, have: bool, outputs: list, measure, d: Path) -> Row | None:
    """The row of an optional peer, or None (its figures skipped) when it is not installed."""
    if not have:
        for f, _ in outputs:
            b.skip(f, NOT_INSTALLED)
        return None

    def one(i: int) -> dict:
        rm(d)
        settle()
        try:
            return measure(i)
        finally:
            rm(d)

    return Row(one, outputs)
