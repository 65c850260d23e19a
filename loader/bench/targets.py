"""The targets the suite checks: each a ratio computed from figures measured in the same run
(a load over the disk limit, over ArcticDB's write measured interleaved with it, over
itself with fewer workers; bytes on disk against ArcticDB's; finalize over 400 MB/s; a box
query under 2 ms; cold random reads against np.memmap; peak RSS under 1 GiB and flat in N).

Invariants: a target is only ever computed from measured figures; when one is missing,
skipped or failed the target is "not measured", naming the figures that were not ``ok``,
never estimated. `Target.to_dict` gives the JSON row of ``targets``.

Crash behaviour: pure computation; nothing is written.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .figures import Figure, mb_s_median

#: the headline figure: a load with default options (versus.py)
DEFAULT_LOAD = "load-lmdb-default"

GIB = 1 << 30


@dataclass(frozen=True)
class Target:
    id: str
    what: str
    target: float
    status: str  # pass | short | not measured[ (figure ids)]
    value: float | None = None
    reference: float | None = None
    ratio: float | None = None  # None: not measured
    passed: bool | None = None
    note: str | None = None
    at_most: bool = False  # passes at ratio <= target (memory flat), else at >= target
    unit: str | None = None  # of value and reference: ms, s, bytes; None: MB/s (or as the id says)

    @classmethod
    def measured(
        cls,
        id: str,
        what: str,
        value: float,
        reference: float,
        ratio: float,
        target: float,
        passed: bool,
        note: str | None = None,
        at_most: bool = False,
        unit: str | None = None,
    ) -> Target:
        return cls(
            id, what, target, "pass" if passed else "short", value, reference, ratio, passed, note, at_most, unit
        )

    def to_dict(self) -> dict:
        if self.ratio is None:
            d = {
                "id": self.id,
                "what": self.what,
                "target": self.target,
                "ratio": None,
                "pass": None,
                "status": self.status,
            }
        else:
            d = {
                "id": self.id,
                "what": self.what,
                "value": self.value,
                "reference": self.reference,
                "ratio": self.ratio,
                "target": self.target,
                "pass": self.passed,
                "status": self.status,
            }
        if self.note is not None:
            d["note"] = self.note
        if self.at_most:
            d["at_most"] = True
        if self.unit is not None:
            d["unit"] = self.unit
        return d


def ratio_target(
    tid: str, what: str, num: Figure | None, den: Figure | None, target: float, den_value: float | None = None
) -> Target:
    """MB/s of ``num`` over MB/s of ``den`` (or over ``den_value``), passing at >= ``target``."""
    a = mb_s_median(num)
    b = den_value if den_value is not None else mb_s_median(den)
    if a is None or b is None or b == 0:
        missing = [x.id for x in (num, den) if x is not None and x.status != "ok"]
        return Target(tid, what, target, "not measured" + (f" ({', '.join(missing)})" if missing else ""))
    r = a / b
    return Target.measured(tid, what, round(a, 3), round(b, 3), round(r, 3), target, r >= target)


def bytes_target(tid: str, what: str, ours: Figure | None, peer: Figure | None) -> Target:
    """The peer's median bytes on disk over ours, passing at >= 1 (ours no bigger)."""
    a, b = (statistics.median(v) if (v := _disk_bytes(f)) else None for f in (ours, peer))
    if a is None or b is None:
        missing = [x.id for x in (ours, peer) if x is not None and x.status != "ok"]
        return Target(tid, what, 1.0, "not measured" + (f" ({', '.join(missing)})" if missing else ""))
    return Target.measured(tid, what, a, b, round(b / a, 3), 1.0, a <= b)


def _disk_bytes(f: Figure | None) -> list[int]:
    return [s["disk_bytes"] for s in f.samples if s.get("disk_bytes")] if f is not None and f.status == "ok" else []


def arcticdb_targets(figs: dict[str, Figure], suite: str) -> list[Target]:
    """Issue 14's targets against ArcticDB's write (its DataFrame build included), measured
    interleaved: the durable load with default options (>= 1.3 x in the full suite, >= 1.0 x
    at the quick suite's 1M records), each compressed load and the default one (bytes on disk
    <= ArcticDB's at >= 1.0 x its speed) and a load from a warm file (>= 0.95 x the gen://
    load, both with default options)."""
    arctic = figs.get("peer-arcticdb-write-build")
    head = figs.get(DEFAULT_LOAD)
    out = [
        ratio_target(
            "load-vs-arcticdb",
            "durable load, default options / ArcticDB DataFrame build + write (interleaved)",
            head,
            arctic,
            1.3 if suite == "full" else 1.0,
        ),
        bytes_target("load-bytes-vs-arcticdb", "ArcticDB bytes on disk / load, default options", head, arctic),
    ]
    for f in figs.values():
        if f.group == "load" and f.params.get("interleaved") and f.params.get("compression") not in (None, "none"):
            out += [
                bytes_target(f"{f.id}-bytes-vs-arcticdb", f"ArcticDB bytes on disk / {f.title}", f, arctic),
                ratio_target(f"{f.id}-vs-arcticdb", f"{f.title} / ArcticDB build + write", f, arctic, 1.0),
            ]
    if "load-file-warm" in figs:
        out.append(
            ratio_target(
                "load-file-vs-gen", "load FILE (page cache warm) / load gen://", figs["load-file-warm"], head, 0.95
            )
        )
    return out


def throughput_targets(figs: dict[str, Figure], cores: int, suite: str = "quick") -> list[Target]:
    head = figs.get(f"load-lmdb-capnp-w{cores}")  # uncompressed, all workers
    fin = figs.get(f"finalize-w{cores}")
    disk = figs.get("gen-file-fsync")
    return [
        ratio_target(
            "load-vs-disk",
            "load (lmdb capnp uncompressed, all workers, durable) / disk limit (gen -> file + fsync)",
            head,
            disk,
            0.5,
        ),
        *arcticdb_targets(figs, suite),
        ratio_target(
            "load-vs-naive-lmdb",
            "load into mem:// / naive py-lmdb per-record loop (MB/s; "
            "restated against mem://: 10 x the loop is above the disk's limit)",
            figs.get("load-mem-capnp"),
            figs.get("peer-lmdb-per-record"),
            10.0,
        ),
        ratio_target(
            "load-2w-vs-1w", f"load speed-up, {cores} workers vs 1", head, figs.get("load-lmdb-capnp-w1"), 1.6
        ),
        ratio_target("arrow-vs-disk", "load arrow (none) / disk limit", figs.get("load-lmdb-arrow-none"), disk, 0.35),
        ratio_target("rocksdb-vs-disk", "load rocksdb capnp / disk limit", figs.get("load-rocksdb-capnp"), disk, 0.35),
        ratio_target("mem-vs-lmdb", "load mem:// / load lmdb://", figs.get("load-mem-capnp"), head, 1.0),
        ratio_target("finalize-400", f"finalize ({cores} workers) / 400 MB/s", fin, None, 1.0, den_value=400.0),
        ratio_target(
            "finalize-2w-vs-1w", f"finalize speed-up, {cores} workers vs 1", fin, figs.get("finalize-w1"), 1.6
        ),
    ]


def budget_target(fin: Figure | None) -> Target:
    """The largest peak RSS of one finalize worker, over all samples, within --memory-budget."""
    what = "finalize: largest worker peak RSS <= --memory-budget"
    rss = (
        [s["report_worker_max_rss_bytes"] for s in fin.samples if s.get("report_worker_max_rss_bytes")]
        if fin is not None and fin.status == "ok"
        else []
    )
    if not rss or fin is None:
        return Target("finalize-worker-rss", what, 1.0, "not measured")
    peak, budget = max(rss), fin.samples[0]["report_memory_budget"]
    return Target.measured(
        "finalize-worker-rss",
        f"{what}: budget / peak",
        peak,
        budget,
        round(budget / peak, 3),
        1.0,
        peak <= budget,
        note=f"{peak / 2**20:,.0f} MiB under {budget / 2**20:,.0f} MiB",
    )


def query_target(q: Figure | None) -> Target:
    """The warm ~1,000-cell box query against 2 ms."""
    if q is None or q.status != "ok" or not q.secs():
        return Target("query-2ms", "box query ~1,000 cells <= 2 ms", 1.0, "not measured")
    ms = statistics.median(q.secs()) * 1e3
    return Target.measured(
        "query-2ms",
        "box query ~1,000 cells, warm: 2 ms / median latency",
        round(ms, 4),
        2.0,
        round(2.0 / ms, 3),
        1.0,
        ms <= 2.0,
    )


def rss_targets(small: Figure, big: Figure) -> list[Target]:
    """Peak private RSS of the big-N load under 1 GiB, and at most 1.25 x the small-N one."""
    small_anon, big_anon = (max(s["peak_tree_anon_bytes"] for s in x.samples) for x in (small, big))
    big_rss = max(s["peak_tree_rss_bytes"] for s in big.samples)
    return [
        Target.measured(
            "rss-1gib",
            f"peak RSS (private, all processes) of the n={big.records:,} load / 1 GiB",
            big_anon,
            GIB,
            round(GIB / big_anon, 3),
            1.0,
            big_anon <= GIB,
            note=f"VmRSS incl. file-backed pages: {big_rss / 2**20:,.0f} MiB",
        ),
        Target.measured(
            "rss-flat",
            f"peak private RSS n={big.records:,} / n={small.records:,} (memory flat in N: <= 1.25)",
            big_anon,
            small_anon,
            round(big_anon / small_anon, 3),
            1.25,
            big_anon / small_anon <= 1.25,
            at_most=True,
        ),
    ]


def random_read_targets(figs: dict[str, Figure]) -> list[Target]:
    """Issue 14's target 6: cold random reads with readahead off >= 2 x np.memmap of the raw
    records (for each workload and thread count the random section measured)."""
    out = []
    for f in figs.values():
        if f.group == "random" and f.params.get("target") == "raoff":
            mm = figs.get(f.id.replace("-raoff-", "-memmap-"))
            out.append(ratio_target(f"{f.id}-vs-memmap", f"{f.title} / np.memmap of the raw records", f, mm, 2.0))
    return out


def targets(figs: dict[str, Figure], cores: int, rss_n: tuple[int, ...] | None, suite: str = "quick") -> list[Target]:
    """Every target of a run, in the order of the report."""
    out = throughput_targets(figs, cores, suite)
    out.append(budget_target(figs.get(f"finalize-w{cores}")))
    out.append(query_target(figs.get("query-box-1000")))
    out += random_read_targets(figs)
    rss = [figs.get(f"rss-load-n{n}") for n in (rss_n or ())]
    ok = [x for x in rss if x is not None and x.status == "ok"]
    if len(rss) == 2 and len(ok) == 2:
        out += rss_targets(ok[0], ok[1])
    return out
