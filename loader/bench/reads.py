"""The ``reads`` section (issue 31's targets): bulkload's streaming reads against ArcticDB,
DuckDB and a Parquet file of the same records, in one interleaved run.

The data, per kind: ``scidb96`` (``gen://scidb96``) and ``random`` (records of the same
layout with random values: `random_records`, seeded, every field), ``n`` records each,
written once, untimed, before the first round: bulkload (``bulkload load``, default options:
lmdb, capnp + lz4, shards = cores), an ArcticDB library on ``lmdb://`` (``lib.write`` of
the records' DataFrame, as the versus section writes it), a DuckDB database file (table
``data``) and a zstd Parquet file, all in the run's work directory (`child_reads_prepare`).

Round r (1..repeats) measures one sample of each row of each kind, in this order; every
sample but the CLI's is a fresh child process (`child_reads`) that opens its store, reads
once untimed (all warm: the files in the page cache, the library's lazy set-up done), then
times the same read once more:

``full``           `Dataset.to_arrow()`: every column of every record
``column``         ``scan(columns=[COLUMN]).read_all()``: one field of fourteen
``range``          ``scan(records=(n/2, n/2 + n/100)).read_all()``: 1 % of the records
``arcticdb``       ArcticDB ``lib.read`` -> DataFrame
``duckdb``         DuckDB ``SELECT * FROM data`` to an Arrow table, from its own file
``parquet``        ``pyarrow.parquet.read_table`` of the zstd file
``groupby-scan``   DuckDB's `GROUP_BY` query over ``ds.scan(columns=[the 3 fields it names])``
``polars-range``   ``ds.to_polars(record_column="record").filter(record in the 1 % range)
                   .select(COLUMN.sum())``: its sample and note show the stored bytes it
                   read (``Dataset.read_stats``) against the dataset's stored bytes
``groupby-duckdb`` the same query on DuckDB's own table
``cli-npy``        ``bulkload scan DS --format npy --out - > /dev/null``: wall time of the
                   whole command (interpreter start-up included), right after the reads above
``cli-arrow``      the same with ``--format arrow``

MB/s counts the 96-byte records read (the one-column read too: the records it was read
from), so a ratio of MB/s is one of records/s. The targets (`read_targets`): full read >=
1.5 x ArcticDB's and >= 1.0 x DuckDB's ``SELECT *``; one column >= 5 x the full read;
the 1 % range >= 50 x faster than the full read (seconds); the GROUP BY over a scan within
1.5 x DuckDB's own table (seconds); each CLI scan >= 1,000 MB/s.

Invariants: every row of a kind reads the same records; a peer that is not installed is
"skipped: not installed", never estimated; nothing is timed but the read itself (opening a
store, connecting, the warm-up read are not).

Crash behaviour: every dataset and peer file lives under ``reads-KIND`` in the run's work
directory, removed at the end of the section (and with the work directory by the runner).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .figures import Figure
from .loads import load_once
from .peers import NOT_INSTALLED, arctic_library, installed
from .processes import rm, run_sampled, settle, tail
from .records import RECORD_SIZE
from .runner import Bench, Row, each_round
from .targets import Target, ratio_target

KINDS = {"scidb96": "gen://scidb96", "random": "random values, same layout (seeded numpy)"}
COLUMN = "d3"  # the one column of fourteen
GROUP_BY = "SELECT i2 % 16 AS g, count(*) AS n, sum(d0) AS s, avg(d1) AS a FROM data GROUP BY g ORDER BY g"
GROUP_COLUMNS = ["i2", "d0", "d1"]
CLI_FORMATS = ("npy", "arrow")
RANDOM_SEED = 31
WARM = "warm: a fresh process, the store opened and read once untimed, then the timed read"


def record_range(n: int) -> tuple[int, int]:
    """1 % of ``n`` records (at least one), from the middle."""
    lo = n // 2
    return lo, lo + max(1, n // 100)


def section_reads(b: Bench) -> None:
    n = b.p.n
    rows: list[KindRow] = []
    kinds = {}
    for kind in KINDS:
        d = b.work / f"reads-{kind}"
        kinds[kind] = d
        rows += [r for r in _rows(b, kind, d, n) if r is not None]
    live = [r for r in rows if r.active()]
    if not live:
        return
    for kind, d in kinds.items():
        if not any(r.kind == kind for r in live):
            continue  # none of its figures selected (or its peers installed): nothing to write
        try:
            prepare(b, kind, d, n)
        except Exception as e:
            for r in rows:
                if r.kind == kind:
                    r.fail(f"could not prepare the {kind} records: {type(e).__name__}: {e}")
    b.interleave(rows)
    for d in kinds.values():
        rm(d)


def prepare(b: Bench, kind: str, d: Path, n: int) -> None:
    """The records of ``kind`` in bulkload (default options) and in each installed peer."""
    rm(d)
    d.mkdir(parents=True)
    raw = d / "records.bin"
    b.child_sample(
        "reads_prepare",
        records=kind,
        n=n,
        dir=str(d),
        raw=str(raw),
        arcticdb=installed("arcticdb") and installed("pandas"),
        duckdb=installed("duckdb"),
    )
    load_once(
        b,
        n,
        f"lmdb://{d / 'ds'}",
        workers=None,
        format=None,
        compression=None,
        source=str(raw) if kind == "random" else None,
    )
    rm(raw)


class KindRow(Row):
    """A row of one kind of records (so that a failed preparation fails only its rows)."""

    def __init__(self, kind: str, one: Callable[[int], dict], outputs: list[tuple[Figure | None, str]]):
        super().__init__(one, outputs)
        self.kind = kind


def _rows(b: Bench, kind: str, d: Path, n: int) -> list[KindRow | None]:
    lo, hi = record_range(n)
    ds = f"lmdb://{d / 'ds'}"
    what = KINDS[kind]

    def fig(name: str, title: str, records: int = n, note: str = WARM, **kw) -> Figure | None:
        return b.fig(
            f"reads-{kind}-{name}",
            "reads",
            f"{title} ({kind})",
            records,
            limit="npload",
            note=note,
            params={"kind": kind, "records_from": what, "interleaved": True, **kw},
        )

    def child_row(f: Figure | None, have: bool, **args) -> KindRow | None:
        if f is None:
            return None
        if not have:
            b.skip(f, NOT_INSTALLED)
            return None

        def one(i: int) -> dict:
            settle()
            s = b.child_sample("reads", uri=ds, dir=str(d), n=n, **args)
            if "bytes_read" in s:  # the same every round: shown in the figure's note
                f.note = f"{WARM}; {bytes_read_note(s['bytes_read'], s['stored_bytes'])}"
            return s

        return KindRow(kind, one, [(f, "seconds")])

    arctic = installed("arcticdb") and installed("pandas")
    duck = installed("duckdb")
    rows = [
        child_row(fig("full", "bulkload to_arrow(), all 14 columns"), True, what="full"),
        child_row(
            fig(
                "column",
                f"bulkload scan(columns=[{COLUMN!r}]) to Arrow, 1 of 14 columns",
                note=f"{WARM}; MB/s of the 96-byte records the column is read from",
                column=COLUMN,
            ),
            True,
            what="column",
            column=COLUMN,
        ),
        child_row(
            fig("range", "bulkload scan(records=1 % range) to Arrow", hi - lo, records_range=[lo, hi]),
            True,
            what="range",
            lo=lo,
            hi=hi,
        ),
        child_row(fig("arcticdb", "ArcticDB lib.read -> DataFrame"), arctic, what="arcticdb"),
        child_row(fig("duckdb", "DuckDB SELECT * to Arrow (its own table)"), duck, what="duckdb"),
        child_row(fig("parquet", "pyarrow.parquet read_table (zstd file)"), True, what="parquet"),
        child_row(
            fig("groupby-scan", "DuckDB GROUP BY over ds.scan(columns=...)", query=GROUP_BY, columns=GROUP_COLUMNS),
            duck,
            what="groupby-scan",
        ),
        child_row(
            fig("groupby-duckdb", "DuckDB GROUP BY on its own table", query=GROUP_BY), duck, what="groupby-duckdb"
        ),
        child_row(
            fig(
                "polars-range",
                f"Polars filter(range).select({COLUMN!r}).sum(): bytes read / stored bytes",
                hi - lo,
                records_range=[lo, hi],
                column=COLUMN,
            ),
            installed("polars"),
            what="polars-range",
            column=COLUMN,
            lo=lo,
            hi=hi,
        ),
    ]
    for fmt in CLI_FORMATS:
        f = fig(
            f"cli-{fmt}",
            f"bulkload scan --format {fmt} --out - > /dev/null",
            note="wall time of the whole command (interpreter start-up included), page cache warm from the "
            "reads before it in the round",
            format=fmt,
        )
        rows.append(None if f is None else KindRow(kind, each_round(cli_sample, b, ds, fmt, n), [(f, "seconds")]))
    return rows


def bytes_read_note(read: int, stored: int) -> str:
    """The stored bytes a read fetched, against the dataset's."""
    return f"bytes read / stored bytes: {read:,} / {stored:,} ({100 * read / max(stored, 1):.2f} %)"


def cli_sample(b: Bench, uri: str, fmt: str, n: int) -> dict:
    """``bulkload scan URI --format FMT --out -`` into /dev/null, timed whole; the sample
    keeps the bytes it wrote (its report, on stderr)."""
    settle()
    with open("/dev/null", "wb") as null:
        p = run_sampled([b.bulkload, "scan", uri, "--format", fmt, "--out", "-", "--json"], stdout=null)
    if p.rc != 0:
        raise RuntimeError(tail(p.err) or f"bulkload scan exited with {p.rc}")
    rep = json.loads(p.err)
    if rep["records"] != n:
        raise RuntimeError(f"bulkload scan wrote {rep['records']} records, expected {n}")
    return {
        "seconds": p.wall_s,
        "bytes_out": rep["bytes"],
        "peak_tree_rss_bytes": p.peak_tree_rss_bytes,
        "peak_tree_anon_bytes": p.peak_tree_anon_bytes,
    }


# --- targets ------------------------------------------------------------------------------------------------------


def seconds_target(
    tid: str, what: str, num: Figure | None, den: Figure | None, target: float, at_most: bool = False
) -> Target:
    """Median seconds of ``den`` over those of ``num`` (how many times faster ``num`` is),
    passing at >= ``target``; ``at_most``: seconds of ``num`` over ``den``, at <= ``target``."""
    a, b = (None if f is None or f.status != "ok" or not f.secs() else _median(f.secs()) for f in (num, den))
    if a is None or b is None or a == 0 or b == 0:
        missing = [x.id for x in (num, den) if x is not None and x.status != "ok"]
        return Target(
            tid,
            what,
            target,
            "not measured" + (f" ({', '.join(missing)})" if missing else ""),
            at_most=at_most,
            unit="s",
        )
    r = a / b if at_most else b / a
    return Target.measured(
        tid,
        what,
        round(a, 6),
        round(b, 6),
        round(r, 3),
        target,
        r <= target if at_most else r >= target,
        at_most=at_most,
        unit="s",
    )


def _median(v: list[float]) -> float:
    import statistics

    return statistics.median(v)


def read_targets(figs: dict[str, Figure]) -> list[Target]:
    """Issue 31's targets, per kind of records the reads section measured."""
    out = []
    for kind in KINDS:

        def g(name: str, kind: str = kind) -> Figure | None:
            return figs.get(f"reads-{kind}-{name}")

        if g("full") is None:
            continue
        out += [
            ratio_target(
                f"reads-{kind}-full-vs-arcticdb",
                f"full read to Arrow / ArcticDB read ({kind})",
                g("full"),
                g("arcticdb"),
                1.5,
            ),
            ratio_target(
                f"reads-{kind}-full-vs-duckdb",
                f"full read to Arrow / DuckDB SELECT * to Arrow ({kind})",
                g("full"),
                g("duckdb"),
                1.0,
            ),
            ratio_target(
                f"reads-{kind}-column-vs-full",
                f"one column of 14 / full read, records/s ({kind})",
                g("column"),
                g("full"),
                5.0,
            ),
            seconds_target(
                f"reads-{kind}-range-vs-full",
                f"1 % record range: times faster than the full read ({kind})",
                g("range"),
                g("full"),
                50.0,
            ),
            seconds_target(
                f"reads-{kind}-groupby-vs-duckdb",
                f"DuckDB GROUP BY over scan / on DuckDB's own table, seconds <= 1.5 ({kind})",
                g("groupby-scan"),
                g("groupby-duckdb"),
                1.5,
                at_most=True,
            ),
            *(
                ratio_target(
                    f"reads-{kind}-cli-{fmt}-1gbs",
                    f"bulkload scan --format {fmt} --out - to /dev/null / 1,000 MB/s ({kind})",
                    g(f"cli-{fmt}"),
                    None,
                    1.0,
                    den_value=1000.0,
                )
                for fmt in CLI_FORMATS
            ),
        ]
    return out


# ============================================================================================
# child benchmark processes
# ============================================================================================


def random_records(n: int, seed: int = RANDOM_SEED):
    """``n`` records of the scidb96 layout with random values: floats uniform in [0, 1),
    integers uniform over int32 (a fixed seed: the same records every run)."""
    import numpy as np  # heavy: only in the children

    from .records import empty_records

    rng = np.random.default_rng(seed)
    arr = empty_records(n)
    for name in arr.dtype.names or ():
        t = arr.dtype[name]
        arr[name] = rng.random(n) if t.kind == "f" else rng.integers(-(2**31), 2**31, n, dtype=t)
    return arr


def child_reads_prepare(records: str, n: int, dir: str, raw: str, arcticdb: bool, duckdb: bool) -> dict:
    """The records of kind ``records`` written once for the peers (ArcticDB library, DuckDB
    file, zstd Parquet file) and, for ``random``, as a raw file for ``bulkload load``."""
    import pyarrow as pa  # heavy: only in this child
    import pyarrow.parquet as pq  # heavy: only in this child

    from .records import generate_records

    kind = records
    recs = random_records(n) if kind == "random" else generate_records(n)
    if kind == "random":
        recs.tofile(raw)
    table = pa.table({name: recs[name] for name in recs.dtype.names or ()})
    d = Path(dir)
    pq.write_table(table, d / "records.parquet", compression="zstd")
    if duckdb:
        import duckdb as ddb  # optional: the duckdb extra

        con = ddb.connect(str(d / "duck.db"))
        con.register("records", table)
        con.execute("CREATE TABLE data AS SELECT * FROM records")
        con.close()
    if arcticdb:
        import pandas as pd  # optional: the [peers] extra; heavy

        del table
        lib = arctic_library(str(d / "arctic"), n * RECORD_SIZE * 3)
        lib.write("records", pd.DataFrame({name: recs[name] for name in recs.dtype.names or ()}, copy=False))
    return {"seconds": 0.0}


def child_reads(
    what: str, uri: str, dir: str, n: int, column: str | None = None, lo: int | None = None, hi: int | None = None
) -> dict:
    """One warm read: the store opened and ``what`` read once untimed, then timed once."""
    d = Path(dir)
    read, close = _reader(what, uri, d, column, lo, hi)
    try:
        rows = read()  # warm-up: page cache, lazy set-up
        del rows
        t = time.perf_counter()
        rows = read()
        s = time.perf_counter() - t
    finally:
        close()
    ranged = what in ("range", "polars-range")
    want = ((n if hi is None else hi) - (lo or 0)) if ranged else n  # None: open (`scan`)
    if rows == want or (what.startswith("groupby") and rows > 0):  # a GROUP BY: its groups
        return {"seconds": s, "rows": rows, **getattr(read, "sample", {})}
    raise RuntimeError(f"{what}: read {rows} rows, expected {want}")


class _PolarsRange:
    """``to_polars().filter(record range).select(col.sum(), len)``: rows read; ``sample``:
    the stored bytes the last read fetched and the dataset's stored bytes."""

    def __init__(self, ds: Any, column: str, lo: int, hi: int) -> None:
        self.ds, self.column, self.lo, self.hi = ds, column, lo, hi
        self.sample: dict[str, int] = {}

    def __call__(self) -> int:
        import polars as pl  # optional: the polars extra; only in this child

        before = self.ds.read_stats.copy()
        lf = self.ds.to_polars(record_column="record")
        df = lf.filter(pl.col("record").is_between(self.lo, self.hi - 1)).select(pl.col(self.column).sum(), pl.len())
        rows = int(df.collect()["len"][0])
        self.sample = {
            "bytes_read": self.ds.read_stats.since(before).bytes,
            "stored_bytes": self.ds.manifest.stored_bytes,
        }
        return rows


def _reader(what: str, uri: str, d: Path, column, lo, hi):
    """(read() -> rows read, close()) of one kind of read."""
    if what in ("full", "column", "range", "groupby-scan", "polars-range"):
        from ..read.dataset import open as open_ds  # heavy: numpy, pyarrow; only in this child

        ds = open_ds(uri)
        if what == "polars-range":
            return _PolarsRange(ds, column, lo, hi), ds.close
        if what == "full":
            return (lambda: ds.to_arrow().num_rows), ds.close
        if what == "column":
            return (lambda: ds.scan(columns=[column]).read_all().num_rows), ds.close
        if what == "range":
            return (lambda: ds.scan(records=(lo, hi)).read_all().num_rows), ds.close
        import duckdb  # optional: the duckdb extra

        con = duckdb.connect()

        def grouped() -> int:
            con.register("data", ds.scan(columns=GROUP_COLUMNS))
            return con.sql(GROUP_BY).to_arrow_table().num_rows

        def close() -> None:
            con.close()
            ds.close()

        return grouped, close
    if what == "arcticdb":
        from arcticdb import Arctic  # optional: the [peers] extra; heavy

        lib = Arctic(f"lmdb://{d / 'arctic'}").get_library("bench")
        return (lambda: len(lib.read("records").data)), (lambda: None)
    if what == "parquet":
        import pyarrow.parquet as pq  # heavy: only in this child

        return (lambda: pq.read_table(d / "records.parquet").num_rows), (lambda: None)
    import duckdb  # optional: the duckdb extra

    con = duckdb.connect(str(d / "duck.db"), read_only=True)
    query = GROUP_BY if what == "groupby-duckdb" else "SELECT * FROM data"
    return (lambda: con.sql(query).to_arrow_table().num_rows), con.close
