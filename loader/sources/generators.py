"""Record generators: records ``start .. start+n-1`` of a layout, in C or in numpy.

Record ``j`` (an unsigned 64-bit index) of ``scidb96`` follows the SciDB binary-load
example (see generators/scidb96.h)::

    d0 = j   d1 = 2j   d2 = j - 1   d3 = j*j   d9 = 881 j     float64, one IEEE op from float64(j)
    d4 = j % 55   d5 = j % 113   d6 = j % 17   d7 = j % 3   d8 = j % 577    exact, then float64
    i0 = j % 10   i1 = int32(j mod 2**32)   i2 = (17 j) % 100   i3 = (113 j) % 100   exact

Record ``i`` of ``ticks`` (41 bytes: a ns timestamp, an 8-byte symbol, float64 price, int32
size, float32 bid/ask, uint8 flags, a bool, a nullable int16 venue and its validity byte) is
defined in generators/ticks.h: a function of ``i`` and the options ``t0`` (ns since the epoch
of record 0) and ``step`` (ns between records) only.

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
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from ..errors import UsageError
from ..model.layouts import Layout, get_layout

IMPLS = ("c", "python")
MAX_END = 2**64  # records are numbered 0 .. 2**64-1: start + n may not exceed this

#: records per block of :func:`write_records` (about 1 MiB of scidb96)
DEFAULT_BLOCK_RECORDS = 10922

FillFn = Callable[..., None]


@dataclass(frozen=True)
class Generator:
    """The fill functions of one layout: ``fill(array, start, **options)`` fills every record
    of a 1-D C-contiguous array of the layout's dtype with records ``start, start+1, ...``.
    ``check(start, n, options)`` returns the options completed with their defaults, or raises a
    UsageError (an option out of range, records the options cannot define)."""

    layout: str
    dtype: np.dtype  # the record bytes the fill functions write
    c_fill: FillFn | None
    py_fill: FillFn
    check: Callable[[int, int, dict], dict] = lambda start, n, options: _no_options(options)
    #: the options of a gen:// URI: name -> "instant" (ISO-8601, as ns) or "duration" (as ns)
    option_kinds: tuple[tuple[str, str], ...] = ()
    #: their values when not given
    defaults: tuple[tuple[str, int], ...] = ()

    def fill_fn(self, impl: str) -> FillFn:
        if impl == "python":
            return self.py_fill
        if impl == "c":
            if self.c_fill is None:
                raise UsageError(f"layout {self.layout!r} has no C generator; use --impl python")
            return self.c_fill
        raise UsageError(f"unknown generator implementation {impl!r}; use one of: {', '.join(IMPLS)}")


# --- scidb96: C -----------------------------------------------------------------------------


_GEN = f"{__package__}._gen"


def c_generators(fallback: str):
    """The C generators (``loader.sources._gen``), or a UsageError saying how to get them or what
    to use instead (``fallback``)."""
    gen = sys.modules.get(_GEN)
    if gen is not None:  # (asked once a batch: the import statement costs ~1 us)
        return gen
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


@functools.cache
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
    tables = {name: _periodic_table(name, "<f8" if name[0] == "d" else "<i4") for name in _PERIODIC}
    views = {name: arr[name] for name in arr.dtype.names or ()}
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


# --- ticks ---------------------------------------------------------------------------------

TICKS_DTYPE = np.dtype(
    [
        ("ts", "<M8[ns]"),
        ("sym", "S8"),
        ("price", "<f8"),
        ("size", "<i4"),
        ("bid", "<f4"),
        ("ask", "<f4"),
        ("flags", "u1"),
        ("halted", "?"),
        ("venue", "<i2"),
        ("_validity", "u1", (1,)),
    ]
)
TICKS_DEFAULT_T0 = 1767364200000000000  # 2026-01-02T14:30:00Z in ns since the epoch
TICKS_DEFAULT_STEP = 1_000_000_000  # 1 s
TICKS_SYMBOLS = np.array(
    [
        b"AAPL",
        b"MSFT",
        b"GOOG",
        b"AMZN",
        b"NVDA",
        b"META",
        b"TSLA",
        b"BRK.B",
        b"JPM",
        b"V",
        b"XOM",
        b"UNH",
        b"JNJ",
        b"WMT",
        b"PG",
        b"MA",
    ],
    dtype="S8",
)
_TICKS_BASE = np.array(
    [19000, 41000, 17500, 18500, 12000, 50000, 25000, 41500, 20000, 28000, 11500, 52000, 15500, 6800, 16800, 46000],
    dtype=np.int32,
)
_U = np.uint64
_GOLDEN, _SALT1, _SALT2 = _U(0x9E3779B97F4A7C15), _U(0x632BE59BD9B4E019), _U(0x8CB92BA72F3D8DD7)
_MIX1, _MIX2 = _U(0xBF58476D1CE4E5B9), _U(0x94D049BB133111EB)
_M32 = _U(0xFFFFFFFF)


def check_ticks(start: int, n: int, options: dict) -> dict:
    """The ticks options (``t0``: int ns since the epoch, ``step``: int ns >= 1) with their
    defaults; a UsageError when one is out of range or the timestamps of records
    ``start .. start+n-1`` would leave datetime64[ns] (int64)."""
    unknown = set(options) - {"t0", "step"}
    if unknown:
        raise UsageError(f"unknown ticks option(s) {', '.join(sorted(unknown))}; ticks takes t0 and step")
    t0 = options.get("t0", TICKS_DEFAULT_T0)
    step = options.get("step", TICKS_DEFAULT_STEP)
    for name, v in (("t0", t0), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise UsageError(f"ticks option {name} must be an integer of ns, got {v!r}")
    t0, step = int(t0), int(step)
    if not -(2**63) <= t0 < 2**63:
        raise UsageError(f"ticks option t0={t0} ns is outside datetime64[ns] (int64)")
    if not 1 <= step < 2**63:
        raise UsageError(f"ticks option step={step} ns must be at least 1 ns and below 2**63 ns")
    if n and t0 + (start + n) * step - 1 >= 2**63:
        raise UsageError(
            f"the timestamps of ticks records {start} .. {start}+{n}-1 (t0={t0} ns, step={step} ns) run past "
            "datetime64[ns]'s last instant (2262-04-11); lower start, n or step, or an earlier t0"
        )
    return {"t0": t0, "step": step}


def _c_fill_ticks(arr: np.ndarray, start: int, t0: int = TICKS_DEFAULT_T0, step: int = TICKS_DEFAULT_STEP) -> None:
    c_generators("--impl python").fill_ticks(arr, start, t0, step)


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, in place (uint64 arithmetic wraps modulo 2**64)."""
    x ^= x >> _U(30)
    x *= _MIX1
    x ^= x >> _U(27)
    x *= _MIX2
    x ^= x >> _U(31)
    return x


def _mulhi(a: np.ndarray, b: int) -> np.ndarray:
    """The high 64 bits of a * b (uint64 a, 0 <= b < 2**64), from 32-bit halves."""
    b0, b1 = _U(b & 0xFFFFFFFF), _U(b >> 32)
    a0, a1 = a & _M32, a >> _U(32)
    p01, p10 = a0 * b1, a1 * b0
    mid = ((a0 * b0) >> _U(32)) + (p01 & _M32) + (p10 & _M32)
    return a1 * b1 + (p01 >> _U(32)) + (p10 >> _U(32)) + (mid >> _U(32))


def _py_fill_ticks(arr: np.ndarray, start: int, t0: int = TICKS_DEFAULT_T0, step: int = TICKS_DEFAULT_STEP) -> None:
    rec = arr.view(TICKS_DTYPE)  # the layout's dtype may name its types differently: same bytes
    n = len(rec)
    _check_range(start, n)
    ts = rec["ts"].view(np.uint64)
    t0u, stepu = _U(t0 % 2**64), _U(step)
    for lo in range(0, n, _PY_CHUNK):
        k = min(_PY_CHUNK, n - lo)
        sl = slice(lo, lo + k)
        i = np.arange(k, dtype=np.uint64) + _U(start + lo)  # start + lo + k - 1 < 2**64
        base = i * _GOLDEN
        h1 = _mix(base + _SALT1)
        h2 = _mix(base + _SALT2)
        s = (h1 & _U(15)).astype(np.intp)
        ts[sl] = t0u + i * stepu + _mulhi(h1, step)
        rec["sym"][sl] = TICKS_SYMBOLS[s]
        w = ((i >> _U(10)) & _U(1023)).astype(np.int32)
        drift = np.where(w < 512, w, 1023 - w) - 256
        cents = _TICKS_BASE[s] + drift + (h2 & _U(63)).astype(np.int32) - 32
        spread = 1 + ((h2 >> _U(6)) & _U(3)).astype(np.int32)
        rec["price"][sl] = cents.astype(np.float64) / 100.0
        r = (h2 >> _U(8)) & _U(255)
        odd = 1 + ((h2 >> _U(16)) & _U(63)).astype(np.int32)
        lots = 100 * (1 + ((h2 >> _U(16)) & _U(31)).astype(np.int32))
        rec["size"][sl] = np.where(r < _U(32), odd, lots)
        rec["bid"][sl] = ((cents - spread).astype(np.float64) / 100.0).astype(np.float32)
        rec["ask"][sl] = ((cents + spread).astype(np.float64) / 100.0).astype(np.float32)
        rec["flags"][sl] = ((h2 >> _U(24)) & (h2 >> _U(32)) & _U(0xFF)).astype(np.uint8)
        rec["halted"][sl] = ((h2 >> _U(40)) & _U(1023)) == _U(0)
        valid = ((h2 >> _U(50)) & _U(7)) != _U(0)
        rec["venue"][sl] = np.where(valid, 1 + ((h2 >> _U(53)) & _U(15)).astype(np.int16), 0)
        rec["_validity"][sl, 0] = valid


# --- the registry ---------------------------------------------------------------------------

SCIDB96_DTYPE = np.dtype([(f"d{k}", "<f8") for k in range(10)] + [(f"i{k}", "<i4") for k in range(4)])

GENERATORS: dict[str, Generator] = {
    "scidb96": Generator("scidb96", SCIDB96_DTYPE, _c_fill_scidb96, _py_fill_scidb96),
    "ticks": Generator(
        "ticks",
        TICKS_DTYPE,
        _c_fill_ticks,
        _py_fill_ticks,
        check_ticks,
        (("t0", "instant"), ("step", "duration")),
        (("t0", TICKS_DEFAULT_T0), ("step", TICKS_DEFAULT_STEP)),
    ),
}


def _no_options(options: dict) -> dict:
    if options:
        raise UsageError(f"unknown generator option(s) {', '.join(sorted(options))}; this generator takes none")
    return {}


def generator_for(layout: str | Layout) -> tuple[Layout, Generator]:
    """The layout and its generator; UsageError when the layout has no generator."""
    lay = get_layout(layout)
    gen = GENERATORS.get(lay.name)
    if gen is None:
        raise UsageError(f"no generator for layout {lay.name}; generators exist for: {', '.join(sorted(GENERATORS))}")
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
        raise UsageError(f"records {start} .. {start}+{n}-1 run past the last record index 2**64-1; lower start or n")


def _check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise UsageError(f"unknown generator implementation {impl!r}; use one of: {', '.join(IMPLS)}")


def fill(
    buf_array: np.ndarray, start: int, impl: str = "c", layout: str | Layout | None = None, **options
) -> np.ndarray:
    """Fill every record of ``buf_array`` with records ``start, start+1, ...``; returns it.

    ``buf_array`` is a 1-D C-contiguous writable array of the layout's dtype (the layout
    is found from the dtype when not given), or any C-contiguous writable array whose
    size is a whole number of records when ``layout`` is given. ``options``: the
    generator's (ticks: ``t0``, ``step``).
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
                f"buffer of {buf_array.nbytes} bytes is not a whole number of {lay.record_size}-byte {lay.name} records"
            )
        records = buf_array.reshape(-1).view(lay.dtype)
    else:
        records = buf_array
    _check_range(start, len(records))
    opts = gen.check(int(start), len(records), options)
    if len(records):
        gen.fill_fn(impl)(records, int(start), **opts)
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
    layout: str | Layout, start: int, n: int, impl: str = "c", out: np.ndarray | None = None, **options
) -> np.ndarray:
    """Records ``start .. start+n-1`` as a structured array of the layout's dtype.

    With ``out`` (an array of at least ``n`` records of that dtype), the records are
    written into ``out[:n]`` and that view is returned. ``options``: the generator's.
    """
    _check_impl(impl)
    lay, gen = generator_for(layout)
    _check_range(start, n)
    opts = gen.check(int(start), int(n), options)
    if out is None:
        arr = np.empty(int(n), dtype=lay.dtype)
    else:
        if out.dtype != lay.dtype or out.ndim != 1 or len(out) < n:
            raise UsageError(f"out must be a 1-D array of at least {n} {lay.name} records")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise UsageError("out must be a writable C-contiguous array")
        arr = out[: int(n)]
    if n:
        gen.fill_fn(impl)(arr, int(start), **opts)
    return arr


def write_records(
    layout: str | Layout,
    start: int,
    n: int,
    fileobj: BinaryIO,
    impl: str = "c",
    block_records: int = DEFAULT_BLOCK_RECORDS,
    **options,
) -> int:
    """Write records ``start .. start+n-1`` to a binary file object, one block of
    ``block_records`` at a time (memory stays bounded whatever ``n``). Returns bytes written.

    OSErrors of the file object (BrokenPipeError, ENOSPC, ...) propagate to the caller.
    """
    _check_impl(impl)
    lay, gen = generator_for(layout)
    _check_range(start, n)
    opts = gen.check(int(start), int(n), options)
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
        fill_fn(block, pos, **opts)
        view = raw[: k * lay.record_size].data
        while len(view):
            w = fileobj.write(view)
            if w is None:  # a non-blocking raw stream that could not take it all
                raise BlockingIOError("output stream would block")
            view = view[w:]
            written += w
        pos += k
    return written
