"""A figure: one thing the suite measures (a limit, a load, a finalize, a query, a peer),
its raw samples, and the JSON it becomes (`Figure.to_dict`).

Invariants: every statistic of a figure (seconds, MB/s, records/s, latency, peak RSS) is
the median and min-max of its own samples, never an estimate; ``ratio_to_limit`` is the
figure's MB/s over the median MB/s of its reference limit *measured in the same run*, and is
``None`` when that limit was not measured; a figure that is not ``ok`` carries a reason.

Crash behaviour: pure data; nothing is written.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from .records import MB, RECORD_SIZE


def stats(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


@dataclass
class Figure:
    id: str
    group: str  # limits | load | finalize | query | peers | random | rss | catalog | catalog-load
    title: str
    records: int
    kind: str = "throughput"  # throughput | latency | memory | build (catalog.py: a dataset's making)
    limit: str | None = None  # id of the matching reference limit
    note: str = ""
    samples: list[dict] = field(default_factory=list)
    status: str = "ok"  # ok | skipped | failed
    reason: str = ""
    workers: int | None = None
    params: dict = field(default_factory=dict)
    record_size: int = RECORD_SIZE  # bytes of one record of the figure's workload (ticks: 41)

    @property
    def bytes(self) -> int:
        return self.records * self.record_size

    def secs(self) -> list[float]:
        return [s["seconds"] for s in self.samples if s.get("seconds")]

    def sample_stats(self, key: str) -> dict | None:
        """Statistics of one sample key over the samples that have it (non-zero)."""
        return stats([s[key] for s in self.samples if s.get(key)])

    def to_dict(self, limits: dict[str, Figure]) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "group": self.group,
            "title": self.title,
            "kind": self.kind,
            "status": self.status,
            "records": self.records,
            "bytes": self.bytes,
            "workers": self.workers,
            "params": self.params,
            "note": self.note,
            "repeats": len(self.samples),
            "samples": self.samples,
        }
        if self.status != "ok":
            d["reason"] = self.reason
        secs = self.secs()
        d["seconds"] = stats(secs)
        if self.kind == "throughput" and secs:
            d["mb_s"] = stats([self.bytes / s / MB for s in secs])
            d["records_s"] = stats([self.records / s for s in secs])
        elif self.kind == "latency" and secs:
            d["latency_ms"] = stats([s * 1e3 for s in secs])
        d["peak_tree_rss_bytes"] = self.sample_stats("peak_tree_rss_bytes")
        d["peak_tree_anon_bytes"] = self.sample_stats("peak_tree_anon_bytes")
        on_disk = self.sample_stats("disk_bytes")
        if on_disk:
            d["disk_bytes"] = on_disk
        report_rss = self.sample_stats("report_peak_rss_bytes")
        if report_rss:
            d["report_peak_rss_bytes"] = report_rss
        d["limit"] = self.limit
        d["ratio_to_limit"] = self.ratio_to_limit(limits.get(self.limit) if self.limit else None, d.get("mb_s"))
        return d

    @staticmethod
    def ratio_to_limit(lim: Figure | None, mb_s: dict | None) -> dict | None:
        """``mb_s`` over the median MB/s of the limit figure, when that limit was measured."""
        if lim is None or lim.status != "ok" or not lim.secs() or not mb_s:
            return None
        limit_mb_s = lim.median_mb_s()
        return {k: v / limit_mb_s for k, v in mb_s.items()}

    def median_mb_s(self) -> float:
        return statistics.median(self.bytes / s / MB for s in self.secs())


def mb_s_median(f: Figure | None) -> float | None:
    """The median MB/s of an ``ok`` throughput figure, else None."""
    if f is None or f.status != "ok" or not f.secs() or f.kind != "throughput":
        return None
    return f.median_mb_s()
