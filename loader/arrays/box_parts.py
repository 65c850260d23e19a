"""Box queries that read only the parts of a chunk piece that can hold the box's cells: the
random-read mode (``?readahead=0``) of query.py.

A chunk piece of the reference array is ~9.6 MB, and a box of 1,000 cells is ~96 KB of it,
in 10 runs (one per row of the box: cells are stored row-major). Finding the runs by
binary search in the piece would take ~150 dependent page reads; reading the piece whole
reads 100 x the bytes. Instead, the index's sample of the piece (chunk_index.py: the row
and column of every K-th cell, K cells ~4 KiB) brackets each run to within K cells on
either side without reading anything (`part_ranges`). All the runs of all the pieces of a
box are then asked of the disk at once (`ValueReader.prefetch`: the device works on them
together) before each is read with ``pread`` (`ValueReader.read_spans`), and cut exactly
(`read_parts`).

A piece is read whole instead (query.py) when the index has no sample (built before it
had one), its cells are compressed or Arrow (their places are not arithmetic), the store
copies values (RocksDB), the box spans more than MAX_ROWS of the piece's rows, or its runs
would cover more than WHOLE_FRACTION of it. As with the partial record reads, the piece's
checksum is not computed (it is not read whole); its header must be exactly the framing
of the index row's cells, else the piece is read whole, which names what is wrong.

Reads only, within the caller's read transaction; nothing is written.
"""

from __future__ import annotations

import threading

import numpy as np

from ..stores.read_stats import ReadStats
from .records import coordinates

#: most rows of a piece a box may span for the piece to be read in parts
MAX_ROWS = 64
#: a piece whose parts would cover more than this fraction of its cells is read whole
WHOLE_FRACTION = 0.5


def can_read_parts(ds, ai) -> bool:
    """Whether the pieces of array ``ai`` may be read in parts in ``ds``: the random-read
    mode, a sample in the index and a format whose cells are at arithmetic places."""
    return ai.sample_off is not None and bool(getattr(ds, "partial_reads", False)) and ai.ser.reads_parts


def part_ranges(ai, i: int, box) -> list[tuple[int, int]] | None:
    """Cell ranges [a, b) of piece ``i`` (index row) that hold every cell of ``box``
    (query._Box), in order and merged, from the piece's sample; None: read it whole."""
    rmin, rmax, cmin, cmax = int(ai.rmin[i]), int(ai.rmax[i]), int(ai.cmin[i]), int(ai.cmax[i])
    r_lo, r_hi = max(box.lo0, rmin), min(box.hi0, rmax + 1)
    width = cmax - cmin + 2  # a cell's place in the piece's row-major order: (row - rmin) * width + col - cmin
    if r_hi - r_lo > MAX_ROWS or (rmax - rmin + 1) * width >= 2**62:
        return None
    if r_lo >= r_hi:
        return []
    c_lo, c_hi = max(box.lo1, cmin) - cmin, min(box.hi1, cmax + 1) - cmin
    k, m = int(ai.every[i]), int(ai.cells[i])
    o0, o1 = int(ai.sample_off[i]), int(ai.sample_off[i + 1])
    places = (ai.sample_r[o0:o1] - rmin) * width + (ai.sample_c[o0:o1] - cmin)
    rows = np.arange(r_lo - rmin, r_hi - rmin, dtype=np.int64) * width
    # samples before each row's first box cell, and before the cell after its last: sample
    # j_lo - 1 lies before the row's run, sample j_hi (if any) after it
    j_lo = np.searchsorted(places, rows + c_lo).tolist()
    j_hi = np.searchsorted(places, rows + c_hi).tolist()
    out: list[tuple[int, int]] = []
    for a, b in zip(j_lo, j_hi):  # a few rows: plain Python beats a dozen numpy calls on them
        start, end = max(0, (a - 1) * k), min(m, b * k)
        if start >= end:
            continue
        if out and start <= out[-1][1]:  # runs that overlap merge (their ends only grow)
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    if sum(e - s for s, e in out) > WHOLE_FRACTION * m:
        return None
    return out


def read_parts(ai, box, todo: list, stats: ReadStats | None = None) -> dict:
    """Read the parts of the pieces in ``todo`` ((index row, value reader, untouched value,
    ranges) each): every part asked of the disk first, then each piece's header and parts
    read into one buffer (one `read_spans`, its bytes added to ``stats``) and cut. Returns {index row: {column: cells
    inside the box (new arrays)} or None (no cell inside)}; a piece that is not
    the size of its index row's cells, or whose header is not their framing, is left out
    (read it whole)."""
    ser = ai.ser
    spans = {}
    for i, rd, v, ranges in todo:
        m = int(ai.cells[i])
        head = ser.part_spans(0, 0, len(v), m)
        if head is None:  # not the size of its index row's cells
            continue
        spans[i] = [head[0], *(ser.part_spans(a, b, len(v), m)[1] for a, b in ranges)]  # header, each range's records
        if len(todo) > 1:  # the other pieces' parts too (read_spans asks for its own spans together)
            rd.prefetch(v, spans[i])  # the header too: the lookup read none of the piece's pages
    d0, d1 = ai.dims
    out = {}
    for i, rd, v, _ranges in todo:
        if i not in spans:
            continue
        head_n = spans[i][0][1]
        buf = _buffer(sum(n for _, n in spans[i]))
        rd.read_spans(v, spans[i], buf)
        if stats is not None:
            stats.add(len(buf))
        recs = ser.decode_part([bytes(buf[:head_n]), buf[head_n:]], len(v), 0, int(ai.cells[i]))
        if recs is None:
            continue
        rv, cv = coordinates(recs[d0]), coordinates(recs[d1])
        inside = (rv >= box.lo0) & (rv < box.hi0) & (cv >= box.lo1) & (cv < box.hi1)
        # each column cut on its own: new contiguous arrays (cutting the records first, then
        # copying each column out of them, took 2.6 x as long: 84 vs 32 us for a box)
        out[i] = {name: recs[name][inside] for name in recs.dtype.names} if inside.any() else None
    return out


_BUFFERS = threading.local()


def _buffer(size: int) -> memoryview:
    """``size`` bytes of this thread's read buffer (reused: the cut copies out of it). A new
    buffer per read costs a fresh mapping and its page faults, and its unmap stalls the
    other threads of the process (TLB shootdown): 2 threads ran slower than 1 with it."""
    buf = getattr(_BUFFERS, "buf", None)
    if buf is None or len(buf) < size:
        buf = _BUFFERS.buf = np.empty(max(size, 1 << 20), np.uint8)
    return buf.data[:size]
