"""``gen://LAYOUT?n=N&start=S[&impl=c|python]``: the built-in generators as a source.

Each worker generates its own batches' records in place (C library or numpy, the same
bytes: sources/generators.py), so any split of the range gives the same dataset. The
fingerprint is the URI: the same range is recognised on a re-run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..infra.uri import query_options
from ..model.layouts import Layout
from .base import Source, parse_count
from .generators import fill


@dataclass(frozen=True)
class GenSource(Source):
    """``gen://LAYOUT?n=N&start=S``: records S..S+N-1 of the layout's generator, produced
    in the workers by record range (byte-identical however the range is split)."""

    layout: str
    n: int
    start: int = 0
    impl: str = "c"

    @property
    def uri(self) -> str:
        return f"gen://{self.layout}?n={self.n}&start={self.start}"

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
        fill(records, self.start + offset, impl=self.impl, layout=self.layout)




def parse_generated(ref: str, query: str, layout: Layout | None) -> GenSource:
    """``gen://NAME?QUERY`` of a layout with a built-in generator (NAME checked by the caller)."""
    name = ref[len("gen://"):].partition("?")[0]
    q = query_options(query, f"source {ref!r}", "parameter")
    unknown = set(q) - {"n", "start", "impl"}
    if unknown:
        raise UsageError(f"source {ref!r}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                         "gen:// takes n, start and impl")
    n, start = parse_range(ref, q, f"gen://{name}?n=1000000")
    impl = q.get("impl", "c")
    if impl not in ("c", "python"):
        raise UsageError(f"source {ref!r}: impl must be c or python")
    return GenSource(name, n, start, impl)


def parse_range(ref: str, q: dict, example: str) -> tuple[int, int]:
    """(n, start) of a gen:// query: n required, start + n within 2**64."""
    if "n" not in q:
        raise UsageError(f"source {ref!r} needs n=COUNT, e.g. {example}")
    n = parse_count(q["n"], "n")
    start = parse_count(q.get("start", "0"), "start")
    if start + n > 2**64:
        raise UsageError(f"source {ref!r}: start + n exceeds 2**64")
    return n, start
