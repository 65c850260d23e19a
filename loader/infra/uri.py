"""The ``?k=v&...`` part of the URIs bulkload takes (dataset URIs, source URIs).

Strict: a key given twice is a UsageError (``shards=2&shards=3`` has no honest meaning).
Pure parsing: nothing here touches the filesystem.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from ..errors import UsageError


def query_options(query: str, what: str, noun: str = "option") -> dict[str, str]:
    """The ``k=v&...`` of a URI as a dict; a key given twice is a UsageError."""
    pairs = parse_qsl(query, keep_blank_values=True)
    seen: set[str] = set()
    for k, _ in pairs:
        if k in seen:
            raise UsageError(f"{what}: {noun} {k} is given more than once; give each {noun} once")
        seen.add(k)
    return dict(pairs)
