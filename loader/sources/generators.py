"""Record generators: records ``start .. start+n-1`` of a layout, in C or in numpy.

Record ``j`` (an unsigned 64-bit index) of ``scidb96`` follows the SciDB binary-load
example (see generators/scidb96.h)::

    d0 = j   d1 = 2j   d2 = j - 1   d3 = j*j   d9 = 881 j     float64, one IEEE op from float64(j)
    d4 = j % 55   d5 = j % 113   d6 = j % 17   d7 = j % 3   d8 = j % 577    exact, then float64
    i0 = j % 10   i1 = int32(j mod 2**32)   i2 = (17 j) % 100   i3 = (113 j) % 100   exact

Both implementations produce the same bytes for any ``start`` and ``n`` (with
``start + n <= 2**64``), so disjoint ranges produced anywhere concatenate to one run.

- ``impl="c"``: the C library (``loader.sources._gen``), filling the buffer in place with the GIL
  released. The default path of the loader.
- ``impl="python"``: numpy-vectorised, no compiler needed; the reference the C code is
  tested against.

Only layouts in :data:`GENERATORS` can be generated; add an entry there to add one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import BinaryIO, Callable

import numpy as np

from ..errors import UsageError
from ..model.layouts import Layout, get_layout

IMPLS = ("c", "python")
MAX_END = 2**64  # records are numbered 0 .. 2**64-1: start + n may not exceed this

#: records per block of :func:`write_records` (about 1 MiB of scidb96)
DEFAULT_BLOCK_RECORDS = 10922

FillFn = Callable[[np.ndarray, int], None]


@dataclass(frozen=True)
class Generator:
    """The fill functions of one layout: ``fill(array, start)`` fills every record of a
    1-D C-contiguous array of the layout's dtype with records ``start, start+1, ...``."""

    layout: str
    dtype: np.dtype  # the record bytes the fill functions write
    c_fill: FillFn | None
    py_fill: FillFn

    def fill_fn(self, impl: str) -> FillFn:
        if impl == "python":
            return self.py_fill
        if impl == "c":
            if self.c_fill is None:
                raise UsageError(f"layout {self.layout!r} has no C generator; use --impl python")
            return self.c_fill
        raise UsageError(f"unknown generator implementation {impl!r}; use one of: {', '.join(IMPLS)}")


# --- scidb96: C -----------------------------------------------------------------------------


def c_generators(fallback: str):
    """The C generators (``loader.sources._gen``), or a UsageError saying how to get them or what
    to use instead (``fallback``)."""
    try:
        from . import _gen  # the C extension: optional on a broken install (the message says what to do)
    except ImportError as e:  # pragma: no cover - only on a broken install
        raise UsageError(
            f"the C generator is not built ({e}); reinstall bulkload with `pip install .` "
            f"(or `pip install -e .`), or use {fallback}"
        ) from None
    return _gen


def _c_fill_scidb96(arr: np.ndarray, start: int) -> None:
    c_generators("--impl python").fill_scidb96(arr, start)


# --- scidb96: numpy -------------------------------------------------------------------------

# Records per inner step: keeps the temporaries in cache.
_PY_CHUNK = 16384


@functools.lru_cache(maxsize=None)
def _periodic_table(kind: str, dtype: str) -> np.ndarray:
    """Values of a periodic field for residues 0, 1, 2, ... repeated to cover any chunk
    starting at any residue: table[r + k] is the field of a record j with j % m == r,
    advanced by k records."""
    m, fn = _PERIODIC[kind]
    base = np.array([fn(r) for r in range(m)], dtype=dtype)
    reps = -(-(_PY_CHUNK + m) // m)
    table = np.tile(base, reps)
    table.flags.writeable = False
    return table


# field -> (period m, value for j % m == r); all are exact functions of j mod m
_PERIODIC: dict[str, tuple[int, Callable[[int], int]]] = {
    "d4": (55, lambda r: r),
    "d5": (113, lambda r: r),
    "d6": (17, lambda r: r),
    "d7": (3, lambda r: r),
    "d8": (577, lambda r: r),
    "i0": (10, lambda r: r),
    "i2": (100, lambda r: (17 * r) % 100),  # (17 j) mod 100 depends on j mod 100 only
    "i3": (100, lambda r: (113 * r) % 100),
}


def _py_fill_scidb96(arr: np.ndarray, start: int) -> None:
    n = len(arr)
    _check_range(start, n)
    step = _PY_CHUNK
    j = np.empty(min(n, step), dtype=np.uint64)
    jd = np.empty(min(n, step), dtype=np.float64)
    ramp = np.arange(min(n, step), dtype=np.uint64)
    tables = {
        name: _periodic_table(name, "<f8" if name[0] == "d" else "<i4") for name in _PERIODIC
    }
    views = {name: arr[name] for name in arr.dtype.names}
    i1 = views["i1"].view(np.uint32)
    for lo in range(0, n, step):
        k = min(step, n - lo)
        s = start + lo
        jj, dd = j[:k], jd[:k]
        np.add(ramp[:k], np.uint64(s), out=jj)  # s + k - 1 < 2**64: no wrap-around
        np.copyto(dd, jj, casting="unsafe")  # uint64 -> float64, round to nearest as in C
        sl = slice(lo, lo + k)
        views["d0"][sl] = dd
        np.multiply(dd, 2.0, out=views["d1"][sl])
        np.subtract(dd, 1.0, out=views["d2"][sl])
        np.multiply(dd, dd, out=views["d3"][sl])
        np.multiply(dd, 881.0, out=views["d9"][sl])
        for name, (m, _) in _PERIODIC.items():
            r = s % m
            views[name][sl] = tables[name][r : r + k]
        np.copyto(i1[sl], jj, casting="unsafe")  # uint64 -> uint32 keeps j mod 2**32


# --- the registry ---------------------------------------------------------------------------

SCIDB96_DTYPE = np.dtype([(f"d{k}", "<f8") for k in range(10)] + [(f"i{k}", "<i4") for k in range(4)])

GENERATORS: dict[str, Generator] = {
    "scidb96": Generator("scidb96", SCIDB96_DTYPE, _c_fill_scidb96, _py_fill_scidb96),
}


def generator_for(layout: str | Layout) -> tuple[Layout, Generator]:
    """The layout and its generator; UsageError when the layout has no generator."""
    lay = get_layout(layout)
    gen = GENERATORS.get(lay.name)
    if gen is None:
        raise UsageError(
            f"no generator for layout {lay.name}; generators exist for: {', '.join(sorted(GENERATORS))}"
        )
    if lay.dtype != gen.dtype:
        raise UsageError(
            f"layout {lay.name!r} declares {lay.dtype} but its generator writes {gen.dtype}; "
            "the generator cannot fill this declaration"
        )
    return lay, gen


def _check_range(start: int, n: int) -> None:
    for name, v in (("start", start), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise UsageError(f"{name} must be an integer, got {v!r}")
        if v < 0:
            raise UsageError(f"{name} must be >= 0, got {v}")
    if start > MAX_END or (start == MAX_END and n):  # an empty range may end the numbering
        raise UsageError(f"start must be at most 2**64-1 (the last record index), got {start}")
    if int(start) + int(n) > MAX_END:
        raise UsageError(
            f"records {start} .. {start}+{n}-1 run past the last record index 2**64-1; "
            "lower start or n"
        )


def _check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise UsageError(f"unknown generator implementation {impl!r}; use one of: {', '.join(IMPLS)}")


def fill(buf_array: np.ndarray, start: int, impl: str = "c", layout: str | Layout | None = None) -> np.ndarray:
    """Fill every record of ``buf_array`` with records ``start, start+1, ...``; returns it.

    ``buf_array`` is a 1-D C-contiguous writable array of the layout's dtype (the layout
    is found from the dtype when not given), or any C-contiguous writable array whose
    size is a whole number of records when ``layout`` is given.
    """
    _check_impl(impl)
    if layout is None:
        layout = _layout_of_dtype(buf_array.dtype)
    lay, gen = generator_for(layout)
    if not isinstance(buf_array, np.ndarray):
        buf_array = np.frombuffer(buf_array, dtype=np.uint8)
    if not buf_array.flags.c_contiguous or not buf_array.flags.writeable:
        raise UsageError("fill needs a writable C-contiguous array")
    if buf_array.dtype != lay.dtype or buf_array.ndim != 1:
        if buf_array.nbytes % lay.record_size:
            raise UsageError(
                f"buffer of {buf_array.nbytes} bytes is not a whole number of "
                f"{lay.record_size}-byte {lay.name} records"
            )
        records = buf_array.reshape(-1).view(lay.dtype)
    else:
        records = buf_array
    _check_range(start, len(records))
    if len(records):
        gen.fill_fn(impl)(records, int(start))
    return buf_array


def _layout_of_dtype(dtype: np.dtype) -> str:
    for name, gen in GENERATORS.items():
        if gen.dtype == dtype:
            return name
    raise UsageError(
        f"cannot tell the layout of an array of dtype {dtype}; pass layout=NAME "
        f"(generators exist for: {', '.join(sorted(GENERATORS))})"
    )


def generate(
    layout: str | Layout, start: int, n: int, impl: str = "c", out: np.ndarray | None = None
) -> np.ndarray:
    """Records ``start .. start+n-1`` as a structured array of the layout's dtype.

    With ``out`` (an array of at least ``n`` records of that dtype), the records are
    written into ``out[:n]`` and that view is returned.
    """
    _check_impl(impl)
    lay, gen = generator_for(layout)
    _check_range(start, n)
    if out is None:
        arr = np.empty(int(n), dtype=lay.dtype)
    else:
        if out.dtype != lay.dtype or out.ndim != 1 or len(out) < n:
            raise UsageError(f"out must be a 1-D array of at least {n} {lay.name} records")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise UsageError("out must be a writable C-contiguous array")
        arr = out[: int(n)]
    if n:
        gen.fill_fn(impl)(arr, int(start))
    return arr


def write_records(
    layout: str | Layout,
    start: int,
    n: int,
    fileobj: BinaryIO,
    impl: str = "c",
    block_records: int = DEFAULT_BLOCK_RECORDS,
) -> int:
    """Write records ``start .. start+n-1`` to a binary file object, one block of
    ``block_records`` at a time (memory stays bounded whatever ``n``). Returns bytes written.

    OSErrors of the file object (BrokenPipeError, ENOSPC, ...) propagate to the caller.
    """
    _check_impl(impl)
    lay, gen = generator_for(layout)
    _check_range(start, n)
    if isinstance(block_records, bool) or not isinstance(block_records, int) or block_records < 1:
        raise UsageError(f"block_records must be a positive integer, got {block_records!r}")
    fill_fn = gen.fill_fn(impl)
    buf = np.empty(min(int(n), block_records), dtype=lay.dtype)
    raw = buf.view(np.uint8)
    written = 0
    pos, end = int(start), int(start) + int(n)
    while pos < end:
        k = min(block_records, end - pos)
        block = buf[:k]
        fill_fn(block, pos)
        view = memoryview(raw[: k * lay.record_size])
        while len(view):
            w = fileobj.write(view)
            if w is None:  # a non-blocking raw stream that could not take it all
                raise BlockingIOError("output stream would block")
            view = view[w:]
            written += w
        pos += k
    return written
