"""bulkload against its peers: the ratios of the interleaved figures (the versus section),
each the ratio of the medians and the spread of the per-round ratios, and the bytes each
takes on disk.

Invariants: a comparison is only made between two ``ok`` throughput figures; a per-round
ratio pairs the samples of the same round (figures measured in the same interleaved run);
nothing is estimated. Pure computation: nothing is written.
"""

from __future__ import annotations

import statistics

from .figures import Figure, mb_s_median, stats
from .records import MB

ARCTICDB = ("peer-arcticdb-write-build", "peer-arcticdb-write")
TILEDB = "peer-tiledb-write"


def comparisons(figs: dict[str, Figure], bulkload: list[str], cores: int) -> list[dict]:
    """bulkload / peer for each interleaved bulkload figure against ArcticDB (with and
    without its DataFrame build), the headline load and finalize against TileDB."""
    pairs = [(x, p) for x in bulkload for p in ARCTICDB]
    pairs += [(bulkload[0], TILEDB), (f"finalize-w{cores}", TILEDB)] if bulkload else []
    return [c for c in (compare(figs.get(x), figs.get(p)) for x, p in pairs) if c is not None]


def compare(ours: Figure | None, peer: Figure | None) -> dict | None:
    a, b = mb_s_median(ours), mb_s_median(peer)
    if a is None or b is None or ours is None or peer is None:
        return None
    rounds = _round_ratios(ours, peer)
    ours_bytes, peer_bytes = _median_bytes(ours), _median_bytes(peer)
    return {
        "bulkload": ours.id,
        "peer": peer.id,
        "what": f"{ours.title} / {peer.title}",
        "bulkload_mb_s": _mb_s(ours),
        "peer_mb_s": _mb_s(peer),
        "ratio": round(a / b, 3),
        "round_ratios": rounds,
        "round_ratio": stats(rounds),
        "bulkload_disk_bytes": ours_bytes,
        "peer_disk_bytes": peer_bytes,
        "disk_bytes_ratio": round(ours_bytes / peer_bytes, 3) if ours_bytes and peer_bytes else None,
    }


def _mb_s(f: Figure) -> dict | None:
    return stats([f.bytes / s / MB for s in f.secs()])


def _round_ratios(ours: Figure, peer: Figure) -> list[float]:
    """ours / peer MB/s of the samples taken in the same round."""
    theirs = {s["round"]: peer.bytes / s["seconds"] for s in peer.samples if s.get("round") and s.get("seconds")}
    return [
        round(ours.bytes / s["seconds"] / theirs[s["round"]], 3)
        for s in ours.samples
        if s.get("round") in theirs and s.get("seconds")
    ]


def _median_bytes(f: Figure) -> float | None:
    vals = [s["disk_bytes"] for s in f.samples if s.get("disk_bytes")]
    return statistics.median(vals) if vals else None


def comparison_lines(rows: list[dict]) -> list[str]:
    """One progress line per comparison (the ratios printed by the suite)."""
    out = []
    for c in rows:
        rr = c["round_ratio"]
        spread = f" (rounds {rr['min']:.2f} - {rr['max']:.2f})" if rr else ""
        size = f"; on disk {c['disk_bytes_ratio']:.2f}x" if c["disk_bytes_ratio"] else ""
        out.append(f"{c['bulkload']} / {c['peer']}: {c['ratio']:.2f}x{spread}{size}")
    return out
