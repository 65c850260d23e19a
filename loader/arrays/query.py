"""Box queries on 2-D arrays: ``read_box(ds, "grid", None, {"i0": (2, 5), "i1": (0, 100)})``.

A box is half-open per dimension (a missing dimension is unbounded). The chunk index
(loaded once per Dataset object and cached as numpy arrays) picks the pieces whose
bounds overlap the box with one vectorised test; only those are read, through a
zero-copy LMDB read transaction (``readahead`` off: random chunk reads), decoded
zero-copy (capnp) or column-wise (Arrow), and cut by binary search on the row-major
cell order (rows, then columns within a row) - no per-cell Python work. In the
random-read mode (``?readahead=0``) only the parts of a piece that can hold the box's
cells are read, where the index's sample of the piece allows (box_parts.py).

The result is a ``pyarrow.Table``: the two dimension columns, then the attributes (all,
or those asked for), then ``syn`` for arrays built with ``--duplicates keep``; rows in
row-major cell order (then ``syn``). A box that matches nothing gives an empty table
with the same schema.

Reads only, within the Dataset's snapshot: an index file or chunk piece that is gone
(the dataset was replaced, or an unpinned reader's build was collected) raises the
Dataset's ``missing`` error, which says why; nothing is ever written.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from ..errors import NotFoundError, UsageError, VerifyError
from ..model.arrow_numpy import from_numpy, to_numpy
from ..model.chunk_index import index_path, read_index
from ..model.layouts import VALIDITY, Layout
from ..model.optspec import DEFAULT_ARRAY
from ..model.times import duration_in_unit, instant_in_unit, time_type
from ..serializers import get_serializer
from ..stores.values import ValueReader
from .box_parts import can_read_parts, part_ranges, read_parts
from .chunks import chunk_keys
from .records import coordinates

_CACHE_ATTR = "_bulkload_array_cache"
_BOX_PART = re.compile(r"^\s*([A-Za-z][A-Za-z0-9]*)\s*=\s*(-?\d*)\s*:\s*(-?\d*)\s*$")
_BOX_SPAN = re.compile(r"^\s*([A-Za-z][A-Za-z0-9]*)\s*=\s*([^.]*(?:\.[^.]+)*)\s*\.\.\s*(.*?)\s*$")
_BOX_EXAMPLE = "e.g. --box 'i0=2:5,i1=1000000:1001000' or --box 'ts=2026-01-02T14:00..2026-01-02T15:00,size=100:300'"
#: rows of a piece cut one by one with binary searches; more rows use a vectorised mask
_ROW_SEARCH_MAX = 32


def parse_box(text: str) -> dict[str, tuple]:
    """``"i0=2:5,i1=1000000:1001000"`` -> {"i0": (2, 5), "i1": (1000000, 1001000)}.

    Half-open ranges; an empty bound is open (``i0=:5``, ``i1=3:``). ``DIM=LO..HI`` takes
    bounds that are not plain integers - instants of a time dimension
    (``ts=2026-01-02T14:00..2026-01-02T15:00Z``; ISO-8601 has colons of its own) - kept as
    text, converted by the dimension's type when the array is known (`box_coordinate`).
    """
    if not isinstance(text, str) or not text.strip():
        raise UsageError(
            f"--box is empty; write DIM=START:STOP (or DIM=LO..HI) for each bounded dimension, {_BOX_EXAMPLE}"
        )
    out: dict[str, tuple] = {}
    for part in text.split(","):
        mt = _BOX_PART.match(part) or _BOX_SPAN.match(part)
        if not mt:
            raise UsageError(
                f"--box {text!r}: {part.strip()!r} is not DIM=START:STOP with integer bounds "
                f"or DIM=LO..HI (half-open), {_BOX_EXAMPLE}"
            )
        name, lo, hi = mt.group(1), mt.group(2), mt.group(3)
        if name in out:
            raise UsageError(f"--box {text!r}: dimension {name!r} is given twice")
        if lo in ("-",) or hi in ("-",):
            raise UsageError(f"--box {text!r}: {part.strip()!r} has a bound that is not an integer")
        out[name] = (_bound_text(lo), _bound_text(hi))
    return out


def _bound_text(text: str):
    """A bound of --box: None (open), an int, or the text of an instant or duration."""
    if not text:
        return None
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def box_coordinate(dim: str, type_name: str, value) -> int:
    """The coordinate of a bound of dimension ``dim`` (a field of type ``type_name``): an
    integer; of a time dimension, also an instant (datetime64) or a duration (timedelta64) in
    any spelling of loader/model/times.py, rounded up to the field's unit (a half-open box
    holds the same cells)."""
    if type(value) is int:  # the common case, first: a count of the unit or an integer coordinate
        return value
    what = f"range for {dim!r}"
    timed = time_type(type_name)
    if timed is not None:
        kind, unit = timed
        if kind == "datetime64":
            return instant_in_unit(value, unit, what, ceil=True)
        return duration_in_unit(value, unit, what, ceil=True)
    try:
        if isinstance(value, (float, np.floating)) and np.isfinite(value):
            return math.ceil(value)  # the same integers lie in [lo, hi) and [ceil(lo), ceil(hi))
        if isinstance(value, bool) or not isinstance(value, (int, np.integer, str)):
            raise TypeError
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must have integer bounds; got {value!r}") from None


def check_box_dims(array: str, dims, ranges: dict) -> None:
    """Every dimension of a box must be one of the array's."""
    unknown = [k for k in ranges if k not in dims]
    if unknown:
        raise UsageError(
            f"array {array!r} has dimensions {', '.join(dims)}; "
            f"{', '.join(repr(u) for u in unknown)} is not one of them"
        )


def box_columns(array: str, dims, cell: Layout, keep: bool, attrs) -> list[str]:
    """The columns of a box of ``array`` (dimensions ``dims``, cells of layout ``cell``, built
    with duplicates ``keep`` or not) for ``attrs`` (None: all; ``"d0,d3"`` or a list): the
    dims, the attributes, then syn (keep)."""
    every = [n for n in cell.names if n not in dims and n != "syn"]
    if attrs is None:
        chosen = every
    else:
        if isinstance(attrs, str):
            attrs = [a.strip() for a in attrs.split(",") if a.strip()]
        chosen = []
        for a in attrs:
            if a in dims or a == "syn":
                continue  # always returned
            if a not in cell.names:
                raise UsageError(f"array {array!r} has no attribute {a!r}; its attributes are {', '.join(every)}")
            if a not in chosen:
                chosen.append(a)
    return [*dims, *chosen, *(["syn"] if keep else [])]


# --- the cached index ---------------------------------------------------------------------------


class ArrayIndex:
    """One array of one Dataset snapshot: its summary, index arrays and cell serializer."""

    def __init__(self, ds, name: str, summary: dict):
        self.name = name
        self.summary = summary
        self.table = summary["table"]
        self.dims = [d["name"] for d in summary["dims"]]
        self.chunks = [int(d["chunk"]) for d in summary["dims"]]
        self.cell = Layout.from_dict(summary["cell_layout"])
        self.keep = summary["policy"] == "keep"
        self.format = summary["format"]
        self.ser = get_serializer(summary["format"], self.cell, summary["compression"])
        try:
            idx = read_index(index_path(ds.spec.root, summary))
        except VerifyError as e:  # gone with a replaced dataset or a collected build?
            raise ds.missing(str(e)) from None
        d0, d1 = self.dims
        self.rmin = idx[f"min_{d0}"].astype(np.int64)
        self.rmax = idx[f"max_{d0}"].astype(np.int64)
        self.cmin = idx[f"min_{d1}"].astype(np.int64)
        self.cmax = idx[f"max_{d1}"].astype(np.int64)
        self.crow = idx["crow"]
        self.ccol = idx["ccol"]
        self.shard = idx["shard"].astype(np.int64)
        self.cells = idx["cells"]
        sampled = "sample_off" in idx  # the pieces' samples (box_parts.py); not in older index files
        self.every = idx["sample_every"] if sampled else None
        self.sample_off = idx["sample_off"] if sampled else None
        self.sample_r = idx["sample_r"] if sampled else None
        self.sample_c = idx["sample_c"] if sampled else None
        self.keys = chunk_keys(idx["crow"], idx["ccol"], idx["piece"])
        self.attrs = [n for n in self.cell.names if n not in self.dims and n != "syn"]
        self.fields = {f.name: f for f in self.cell.fields}
        self._schema_cache: dict[tuple, tuple[pa.Schema, list]] = {}
        self._dtypes = {f.name: f.dtype for f in self.cell.fields}
        self.nullable = self.cell.nullable_names  # bit j of _validity: the j-th one holds a value
        #: columns that go to Arrow as they are (single numbers, times, bool; never null)
        self.plain = {
            f.name
            for f in self.cell.fields
            if not f.nullable and f.spec.count is None and f.spec.base not in ("bytes", "string")
        }

    def columns(self, attrs) -> list[str]:
        return box_columns(self.name, self.dims, self.cell, self.keep, attrs)

    def schema(self, cols: list[str]) -> tuple[pa.Schema, list]:
        """The result's schema for ``cols`` and its column types (looked up once: a schema
        hands out a new type object per call, ~0.6 us each)."""
        key = tuple(cols)
        s = self._schema_cache.get(key)
        if s is None:
            schema = pa.schema(
                [pa.field(c, self.fields[c].arrow_type, nullable=self.fields[c].nullable) for c in cols],
                metadata={"bulkload.array": self.name, "bulkload.dims": ",".join(self.dims)},
            )
            s = self._schema_cache[key] = schema, schema.types
        return s


def _cache(ds) -> dict:
    c = ds.__dict__.get(_CACHE_ATTR)
    if c is None:
        c = ds.__dict__[_CACHE_ATTR] = {}
    return c


def array_index(ds, name: str) -> ArrayIndex:
    c = _cache(ds)
    ai = c.get(name)
    if ai is None:
        arrays = ds.manifest.arrays
        if name not in arrays:
            known = ", ".join(sorted(arrays)) or "none (run `bulkload finalize` first)"
            raise NotFoundError(f"dataset {ds.uri} has no array {name!r}; arrays: {known}")
        ai = c[name] = ArrayIndex(ds, name, arrays[name])
    return ai


def use_index(ds, ai: ArrayIndex) -> None:
    """Have ``ds`` use ``ai``, the index of the same build loaded by another reader (a Dask
    worker keeps indexes across its tasks: read/dask_read.py)."""
    _cache(ds)[ai.name] = ai


# --- listing ------------------------------------------------------------------------------------


def list_arrays(ds) -> list[dict]:
    """The arrays of a dataset: name, dims (name, type, chunk), attributes, policy, bounds,
    cells, chunks, bytes, and ``stale`` (records were appended since it was built)."""
    out = []
    for name, a in sorted(ds.manifest.arrays.items()):
        out.append(
            {
                "name": name,
                "dims": a["dims"],
                "attrs": a["attrs"],
                "synthetic": a.get("synthetic", []),
                "policy": a["policy"],
                "bounds": a["bounds"],
                "cells": a["cells"],
                "chunks": a["chunks"],
                "pieces": a.get("pieces", a["chunks"]),
                "bytes": a.get("bytes", 0),
                "format": a["format"],
                "built_from_records": a["built_from_records"],
                "stale": bool(a.get("stale")) or a["built_from_records"] != ds.manifest.records,
                "dropped": a.get("dropped", 0),
            }
        )
    return out


# --- box reads ----------------------------------------------------------------------------------


class _Box(NamedTuple):
    """The box asked for: half-open ranges of both dims."""

    lo0: int
    hi0: int
    lo1: int
    hi1: int


class _PieceBounds(NamedTuple):
    """A piece's cells lie in rows rmin..rmax and columns cmin..cmax (inclusive, indexed)."""

    rmin: int
    rmax: int
    cmin: int
    cmax: int


def _norm_range(dim: str, v, type_name: str) -> tuple[int, int]:
    lo_inf, hi_inf = -(2**63), 2**63
    if v is None:
        return lo_inf, hi_inf
    if isinstance(v, slice):
        if v.step not in (None, 1):
            raise UsageError(f"range for {dim!r}: steps are not supported")
        lo, hi = v.start, v.stop
    elif isinstance(v, range):
        if v.step != 1:
            raise UsageError(f"range for {dim!r}: steps are not supported")
        lo, hi = v.start, v.stop
    else:
        try:
            lo, hi = v
            if isinstance(v, str):
                raise TypeError
        except (TypeError, ValueError):
            raise UsageError(f"range for {dim!r} must be (start, stop), half-open; got {v!r}") from None
    lo = lo_inf if lo is None else box_coordinate(dim, type_name, lo)
    hi = hi_inf if hi is None else box_coordinate(dim, type_name, hi)
    return max(lo, lo_inf), min(hi, hi_inf)


def read_box(ds, array: str = DEFAULT_ARRAY, attrs=None, ranges: dict | None = None) -> pa.Table:
    """The cells of ``array`` inside the half-open box ``ranges`` ({dim: (start, stop)})."""
    ai = array_index(ds, array)
    ranges = dict(ranges or {})
    check_box_dims(array, ai.dims, ranges)
    d0, d1 = ai.dims
    lo0, hi0 = _norm_range(d0, ranges.get(d0), ai.fields[d0].type)
    lo1, hi1 = _norm_range(d1, ranges.get(d1), ai.fields[d1].type)
    cols = ai.columns(attrs)
    schema, types = ai.schema(cols)
    nullable = [c for c in cols if c in ai.nullable]
    gather = [*cols, VALIDITY] if nullable else cols  # the bits of the nullable columns asked for
    box = _Box(lo0, hi0, lo1, hi1)
    if lo0 >= hi0 or lo1 >= hi1 or not len(ai.rmin):
        return schema.empty_table()
    hit = np.flatnonzero((ai.rmax >= lo0) & (ai.rmin < hi0) & (ai.cmax >= lo1) & (ai.cmin < hi1))
    if not len(hit):
        return schema.empty_table()

    parts: dict[str, list] = {c: [] for c in gather}
    readers = []
    contributing = []
    try:
        by_shard: dict[int, list[int]] = {}
        for i in hit.tolist():
            by_shard.setdefault(int(ai.shard[i]), []).append(i)
        got: dict[int, object] = {}
        # (index row, reader, untouched value, cell ranges): read in parts
        in_parts: list[tuple[int, ValueReader, object, list[tuple[int, int]]]] = []
        partly = can_read_parts(ds, ai)
        for s, items in by_shard.items():
            rd = _reader(ds, s, ai.table)
            readers.append(rd)
            for i in items:
                cell_ranges = part_ranges(ai, i, box) if partly and rd.view is not None else None
                got[i] = _get(ds, ai, rd, i, touch=cell_ranges is None)
                if cell_ranges is not None:
                    in_parts.append((i, rd, got[i], cell_ranges))
        cut = read_parts(ai, box, in_parts, ds.read_stats) if in_parts else {}
        for i, rd, _, _ in in_parts:
            if i not in cut:  # its header is not what the index says: read it whole
                got[i] = _get(ds, ai, rd, i, touch=True)
        for i in hit.tolist():  # key (= row-major chunk) order
            if i in cut:
                if cut[i] is not None:
                    contributing.append(i)
                    for c in gather:
                        parts[c].append(cut[i][c])
                continue
            cells = _columns(ai, got[i])
            piece = _PieceBounds(int(ai.rmin[i]), int(ai.rmax[i]), int(ai.cmin[i]), int(ai.cmax[i]))
            sel = _select(coordinates(cells[d0]), coordinates(cells[d1]), piece, box)
            if sel is None:
                continue
            contributing.append(i)
            for c in gather:
                parts[c].append(cells[c][sel])
        if not contributing:
            return schema.empty_table()
        out = {c: np.concatenate(p) if len(p) > 1 else _owned(p[0]) for c, p in parts.items()}
    finally:
        for rd in readers:
            rd.__exit__(None, None, None)

    # several chunk columns side by side: restore global row-major order
    cr = ai.crow[contributing]
    if len(contributing) > 1 and len(np.unique(cr)) < len(np.unique(np.stack([cr, ai.ccol[contributing]]), axis=1)[0]):
        keys: tuple[np.ndarray, ...] = (coordinates(out[d1]), coordinates(out[d0]))
        keys = (out["syn"], *keys) if ai.keep else keys
        order = np.lexsort(keys)
        out = {c: a[order] for c, a in out.items()}
    valid = {c: _valid_bits(out[VALIDITY], ai.nullable.index(c)) for c in nullable}
    plain = ai.plain
    return pa.Table.from_arrays(
        [from_numpy(out[c], t) if c in plain else _arrow_column(out[c], t, valid.get(c)) for c, t in zip(cols, types)],
        schema=schema,
    )


def _valid_bits(validity: np.ndarray, j: int) -> np.ndarray:
    """Which cells hold a value of the j-th nullable field (bit j of their _validity bytes)."""
    return (validity[:, j // 8] >> (j % 8)) & 1 != 0


def _arrow_column(values: np.ndarray, t, valid: np.ndarray | None):
    """A result column as an Arrow array of its field's type: numbers zero-copy; times, bool,
    bytes and strings through pyarrow; nulls where ``valid`` is False; T[k] as fixed-size lists."""
    if values.ndim > 1:  # T[k]
        flat = from_numpy(np.ascontiguousarray(values).reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, type=t, mask=None if valid is None else pa.array(~valid))
    if valid is not None and not valid.all():
        return pa.array(values, type=t, mask=~valid)
    if values.dtype.kind == "S" and pa.types.is_string(t):  # string[N]: the bytes up to the padding
        return pa.array(values, type=pa.binary()).cast(t)
    return from_numpy(values, t)


def _owned(a: np.ndarray) -> np.ndarray:
    """``a``, or a copy of it when it is a view (into a chunk piece, valid only while its
    read transaction is open)."""
    return a if a.flags.owndata else a.copy()


def _get(ds, ai: ArrayIndex, rd: ValueReader, i: int, touch: bool):
    """The value of piece ``i`` (index row) through ``rd``, a reader of its shard;
    ``touch=False``: none of its pages read yet (box_parts.py reads the parts it needs)."""
    v = rd.get(ai.keys[i], touch)
    if v is None:
        raise ds.missing(
            f"array {ai.name!r}: chunk piece {i} is missing from shard {int(ai.shard[i])}; "
            "run `bulkload verify` and re-run `bulkload finalize`"
        )
    if touch:  # read whole (read in parts: box_parts.read_parts counts what it reads)
        ds.read_stats.add(len(v))
    return v


def _reader(ds, s: int, table: str) -> ValueReader:
    rd = ValueReader(ds.shard(s, random_reads=True), table)  # OS readahead off: random chunk reads
    rd.__enter__()
    return rd


def _columns(ai: ArrayIndex, value):
    """name -> 1-D numpy array over the piece's cells (zero-copy where the format allows)."""
    if ai.format == "arrow" and ai.ser.compression == "none" and ai.cell.numbers_only:
        reader = pa.ipc.open_stream(pa.py_buffer(value))
        cols: dict[str, list[np.ndarray]] = {}
        for batch in reader:
            for j, name in enumerate(batch.schema.names):
                cols.setdefault(name, []).append(to_numpy(batch.column(j)))
        return {k: v[0] if len(v) == 1 else np.concatenate(v) for k, v in cols.items()}
    _, cells = ai.ser.decode(value)
    return cells


def _select(rv, cv, piece: _PieceBounds, box: _Box):
    """The cells of one piece (sorted row-major) inside the box: a slice, an index array or None."""
    rmin, rmax, cmin, cmax = piece
    lo0, hi0, lo1, hi1 = box
    n = len(rv)
    p = 0 if lo0 <= rmin else bisect_left(rv, lo0)
    q = n if hi0 > rmax else bisect_left(rv, hi0, p)
    if p >= q:
        return None
    if lo1 <= cmin and hi1 > cmax:
        return slice(p, q)
    lo1, hi1 = max(lo1, cmin), min(hi1, cmax + 1)
    if lo1 >= hi1:
        return None
    rfirst, rlast = int(rv[p]), int(rv[q - 1])
    if rfirst == rlast:  # one row: columns are sorted
        a = bisect_left(cv, lo1, p, q)
        b = bisect_left(cv, hi1, a, q)
        return slice(a, b) if a < b else None
    if rlast - rfirst < _ROW_SEARCH_MAX:
        pieces = []
        start = p
        while start < q:
            row = int(rv[start])
            end = bisect_left(rv, row + 1, start, q)
            a = bisect_left(cv, lo1, start, end)
            b = bisect_left(cv, hi1, a, end)
            if a < b:
                pieces.append((a, b))
            start = end
        if not pieces:
            return None
        if len(pieces) == 1:
            return slice(*pieces[0])
        return np.concatenate([np.arange(a, b) for a, b in pieces])
    seg = cv[p:q]
    m = np.flatnonzero((seg >= lo1) & (seg < hi1))
    if not len(m):
        return None
    return m + p
