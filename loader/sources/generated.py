"""``gen://LAYOUT?n=N&start=S[&impl=c|python]``: the built-in generators as a source.

``gen://ticks`` also takes ``t0=`` (the ISO-8601 instant of record 0, default
2026-01-02T14:30:00Z) and ``step=`` (the time between records, e.g. ``250ms``, default 1s).

Each worker generates its own batches' records in place (C library or numpy, the same
bytes: sources/generators.py), so any split of the range gives the same dataset. The
fingerprint is the URI: the same range is recognised on a re-run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..infra.uri import query_options
from ..model.layouts import Layout
from ..model.times import duration_ns, format_ns, instant_ns
from .base import Source, parse_count
from .generators import GENERATORS, fill, generator_for


@dataclass(frozen=True)
class GenSource(Source):
    """``gen://LAYOUT?n=N&start=S``: records S..S+N-1 of the layout's generator, produced
    in the workers by record range (byte-identical however the range is split)."""

    layout: str
    n: int
    start: int = 0
    impl: str = "c"
    options: tuple[tuple[str, int], ...] = ()  # the generator's options (ticks: t0, step in ns)

    @property
    def uri(self) -> str:
        """The URI without the implementation, its options in canonical form when given."""
        kinds = dict(GENERATORS[self.layout].option_kinds) if self.options else {}
        extra = "".join(f"&{k}={format_ns(v) if kinds[k] == 'instant' else f'{v}ns'}" for k, v in self.options)
        return f"gen://{self.layout}?n={self.n}&start={self.start}{extra}"

    def count(self, layout: Layout) -> int:
        return self.n

    def fingerprint(self, layout: Layout) -> str:
        """What identifies the records this source yields (for resume / already loaded)."""
        return self.uri

    @property
    def layout_name(self) -> str:
        return self.layout

    def fill(self, records: np.ndarray, offset: int) -> None:
        """Fill records with source records offset.. (offset relative to the source)."""
        fill(records, self.start + offset, impl=self.impl, layout=self.layout, **dict(self.options))

    def filler(self) -> Callable[[np.ndarray, int], None]:
        """`fill` with the generator, its options and the range checked once for the whole
        source; a batch of another dtype or records outside the source take `fill`."""
        lay, gen = generator_for(self.layout)
        fn = gen.fill_fn(self.impl)
        opts = gen.check(self.start, self.n, dict(self.options))
        start, n, dtype, slow = self.start, self.n, lay.dtype, self.fill
        same: dict[int, np.dtype] = {}  # id -> dtypes equal to dtype (kept: ids stay theirs)

        def fill_records(records: np.ndarray, offset: int) -> None:
            rd = records.dtype  # (comparing structured dtypes costs ~0.4 us: once per dtype object)
            if same.get(id(rd)) is not rd:
                if rd != dtype:
                    slow(records, offset)
                    return
                same[id(rd)] = rd
            if offset < 0 or offset + len(records) > n or not records.flags.c_contiguous:
                slow(records, offset)
            elif len(records):
                fn(records, start + offset, **opts)

        return fill_records


def parse_generated(ref: str, query: str, layout: Layout | None) -> GenSource:
    """``gen://NAME?QUERY`` of a layout with a built-in generator (NAME checked by the caller)."""
    name = ref[len("gen://") :].partition("?")[0]
    q = query_options(query, f"source {ref!r}", "parameter")
    gen = GENERATORS.get(name)
    kinds = dict(gen.option_kinds) if gen else {}
    unknown = set(q) - {"n", "start", "impl", *kinds}
    if unknown:
        raise UsageError(
            f"source {ref!r}: unknown parameter(s) {', '.join(sorted(unknown))}; "
            f"gen://{name} takes {', '.join(['n', 'start', 'impl', *kinds])}"
        )
    n, start = parse_range(ref, q, f"gen://{name}?n=1000000")
    impl = q.get("impl", "c")
    if impl not in ("c", "python"):
        raise UsageError(f"source {ref!r}: impl must be c or python")
    options = {}
    for k, kind in kinds.items():
        if k in q:
            what = f"source {ref!r}: {k}"
            if kind == "instant":  # a URI query decodes + to a space: 12:00+01:00 arrives as "12:00 01:00"
                options[k] = instant_ns(re.sub(r"(T[\d:.,]+) (\d\d:?\d\d)$", r"\1+\2", q[k]), what)
            else:
                options[k] = duration_ns(q[k], what)
    if gen is not None:
        try:
            gen.check(start, n, options)  # out of range: refused now, before any worker starts
        except UsageError as e:
            raise UsageError(f"source {ref!r}: {e}") from None
        defaults = dict(gen.defaults)
        options = {k: v for k, v in options.items() if v != defaults.get(k)}  # one URI per range
    return GenSource(name, n, start, impl, tuple(options.items()))  # in the generator's order


def parse_range(ref: str, q: dict, example: str) -> tuple[int, int]:
    """(n, start) of a gen:// query: n required, start + n within 2**64."""
    if "n" not in q:
        raise UsageError(f"source {ref!r} needs n=COUNT, e.g. {example}")
    n = parse_count(q["n"], "n")
    start = parse_count(q.get("start", "0"), "start")
    if start + n > 2**64:
        raise UsageError(f"source {ref!r}: start + n exceeds 2**64")
    return n, start
