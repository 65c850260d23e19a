"""Direct-build planning: cut each shard's chunks into windows read straight from the batches.

The scan (scan.py) gives rows (batch position, crow, ccol, count): how many records of
each chunk every flat batch holds. `plan_direct` cuts the chunks of each shard, in key
order, into *windows* of at most ``cap`` records (at least one whole chunk each) and lists
per window the batches holding its records, and for each whether the batch lies wholly
inside the window (then the build copies it as is, else only the window's records).

Auto mode gives up (returns None and the reason: spill instead) when some build worker
would read more than `DIRECT_MAX_SCAN_RATIO` records per record it owns (records spread
over many batches, e.g. random coordinates over a big dataset), and any mode gives up when
a window's chunk box is too wide for one int64 sort key. Pure functions over numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .chunks import box_fits, chunk_shard

#: auto picks direct when every build worker reads at most this many records per record it owns
DIRECT_MAX_SCAN_RATIO = 6
#: largest chunk box (rows x columns of chunks) of one direct window
MAX_WINDOW_BOX = 1 << 22
#: bytes per record of a direct window beyond the record (record index, key, order, sorted key)
DIRECT_OVERHEAD = 48


@dataclass(frozen=True)
class Window:
    """Consecutive chunks (key order) of one shard that one build step sorts and writes."""

    n: int  # records
    box: tuple[int, int, int]  # (crmin, ccmin, nc): the box of chunks the window lies in
    lut: np.ndarray  # bool per chunk ordinal in the box (row-major): the chunk is the window's
    batches: np.ndarray  # positions (in the flat batch list) of the batches holding its records
    whole: np.ndarray  # per listed batch: all its records belong to this window


@dataclass(frozen=True)
class _Cut:
    """A window before its batches are known."""

    shard: int
    n: int
    box: tuple[int, int, int]
    lut: np.ndarray


def direct_window_records(budget: int, record_size: int) -> int:
    """Most records of one direct window: 3/4 of the budget (the rest: chunk values in
    flight and LMDB's dirty pages, see build_emit.ChunkEmitter.group_limit)."""
    return max(1, (budget * 3 // 4) // (record_size + DIRECT_OVERHEAD))


def plan_direct(
    entries: np.ndarray, flat: list, nshards: int, workers: int, cap: int, chunks: tuple, strict: bool = False
) -> tuple[dict | None, str]:
    """Windows for the direct build ({shard: [Window, ...]}), or (None, reason) when
    spilling is the better plan.

    ``entries``: the scan's rows (batch position in ``flat``, crow, ccol, count); ``flat``:
    the batches (manifest BatchEntry) in record order. Not ``strict`` (auto): gives up when
    some build worker would read more than DIRECT_MAX_SCAN_RATIO records per record it owns.
    """
    if not len(entries):
        return {}, "empty"
    uid, u_crow, u_ccol, u_count = _unique_chunks(entries)
    cut = _cut_windows(u_crow, u_ccol, u_count, nshards, cap, chunks)
    if cut is None:
        return None, "chunk windows too wide for one sort key"
    cuts, u_win = cut
    plan, ratio = _attach_batches(cuts, u_win[uid], entries["batch"], flat, workers)
    if not strict and ratio > DIRECT_MAX_SCAN_RATIO:
        return None, f"each worker would read {ratio:.1f} records per record it owns"
    return plan, f"{len(cuts)} windows, {ratio:.2f} records read per record owned"


def _unique_chunks(entries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(chunk number of each entry, crow, ccol and records of each distinct chunk in key order)."""
    o = np.lexsort((entries["ccol"], entries["crow"]))
    er, ec = entries["crow"][o], entries["ccol"][o]
    newk = np.r_[True, (er[1:] != er[:-1]) | (ec[1:] != ec[:-1])]
    uid = np.empty(len(o), np.int64)
    uid[o] = np.cumsum(newk) - 1
    u_crow, u_ccol = er[newk], ec[newk]
    u_count = np.bincount(uid, weights=entries["count"], minlength=len(u_crow)).astype(np.int64)
    return uid, u_crow, u_ccol, u_count


def _cut_windows(u_crow, u_ccol, u_count, nshards: int, cap: int, chunks: tuple):
    """Per shard, its chunks (key order) cut into windows of at most ``cap`` records (at
    least one chunk each): ([_Cut, ...], window number of each chunk), or None when a
    window's box of chunks is too wide."""
    u_shard = chunk_shard(u_crow, u_ccol, nshards)
    u_win = np.empty(len(u_crow), np.int64)
    cuts: list[_Cut] = []
    for s in range(nshards):
        cs = np.flatnonzero(u_shard == s)
        if not len(cs):
            continue
        cum = np.cumsum(u_count[cs])
        a = 0
        while a < len(cs):
            base = int(cum[a - 1]) if a else 0
            b = max(int(np.searchsorted(cum, base + cap, side="right")), a + 1)
            sel = cs[a:b]
            crmin, crmax = int(u_crow[sel].min()), int(u_crow[sel].max())
            ccmin, ccmax = int(u_ccol[sel].min()), int(u_ccol[sel].max())
            nr, nc = crmax - crmin + 1, ccmax - ccmin + 1
            if nr * nc > MAX_WINDOW_BOX or not box_fits(crmin, crmax, ccmin, ccmax, chunks):
                return None
            lut = np.zeros(nr * nc, bool)
            lut[(u_crow[sel] - crmin) * nc + (u_ccol[sel] - ccmin)] = True
            u_win[sel] = len(cuts)
            cuts.append(_Cut(s, int(cum[b - 1]) - base, (crmin, ccmin, nc), lut))
            a = b
    return cuts, u_win


def _attach_batches(
    cuts: list[_Cut], e_win: np.ndarray, e_batch: np.ndarray, flat: list, workers: int
) -> tuple[dict, float]:
    """The plan {shard: [Window, ...]} from the cuts and each entry's window and batch, and
    the most records a build worker reads per record it owns."""
    # the (window, batch) pairs, batches in record order within each window (a sort, not
    # np.unique: its first call imports numpy.ma, ~15 ms)
    pair = np.sort(e_win * len(flat) + e_batch)
    pair = pair[np.r_[True, pair[1:] != pair[:-1]]]
    p_win, p_batch = pair // len(flat), pair % len(flat)
    wins_per_batch = np.bincount(p_batch, minlength=len(flat))
    counts = np.array([b.count for b in flat], np.int64)
    bnd = np.searchsorted(p_win, np.arange(len(cuts) + 1))
    plan: dict[int, list] = {}
    scanned = np.zeros(workers, np.int64)
    owned = np.zeros(workers, np.int64)
    for wi, cut in enumerate(cuts):
        bs = p_batch[bnd[wi] : bnd[wi + 1]]
        plan.setdefault(cut.shard, []).append(Window(cut.n, cut.box, cut.lut, bs, wins_per_batch[bs] == 1))
        scanned[cut.shard % workers] += int(counts[bs].sum())
        owned[cut.shard % workers] += cut.n
    return plan, float(np.max(scanned / np.maximum(owned, 1)))
