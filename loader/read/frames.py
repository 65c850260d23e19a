"""Polars and DuckDB over `Dataset.scan` (optional extras: ``pip install bulkload[polars]``,
``bulkload[duckdb]``).

`to_polars(ds, record_column)`: a ``polars.LazyFrame`` through Polars' IO-plugin interface
(``polars.io.plugins.register_io_source``). Polars hands the source the columns the query
uses (projection: only those fields are decoded), its filter (predicate) and a row limit
(``n_rows``: the scan stops once it has them). With ``record_column`` the frame has that
extra Int64 column of record numbers, and comparisons of it with integers in the filter
(``>=``, ``>``, ``<``, ``<=``, ``==``, ``is_between``, joined by ``&``) become the scan's
record range: only the batches of that range are read. Every batch is then filtered by the
whole predicate (comparisons on other columns included) before it is handed on. Collect
the frame while the dataset is open.

`sql(ds, query)`: a DuckDB query over the table ``data``, a scan of the fields the query
names (``*``: all of them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    import pyarrow as pa

    from .dataset import Dataset


def _extra(module: str, what: str) -> ModuleType:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"{what} needs {module}, which is not installed: pip install 'bulkload[{module}]' (or pip install {module})"
        ) from None


def to_polars(ds: Dataset, record_column: str | None = None) -> Any:
    """See the module docstring."""
    ds._fixed_only("to_polars")
    pl = _extra("polars", "to_polars")
    from polars.io.plugins import register_io_source

    fields = ds.layout.names
    if record_column is not None and record_column in fields:
        raise UsageError(f"record_column {record_column!r} is a field of layout {ds.layout.name!r}; pick another name")
    empty = pl.from_arrow(ds.layout.arrow_schema.empty_table())
    schema = dict(empty.schema)
    if record_column is not None:
        schema[record_column] = pl.Int64

    def source(
        with_columns: list[str] | None, predicate: Any, n_rows: int | None, batch_size: int | None
    ) -> Iterator[Any]:
        wanted = list(with_columns) if with_columns is not None else list(schema)
        used = set(wanted) | (set(predicate.meta.root_names()) if predicate is not None else set())
        decode = [f for f in fields if f in used] or [fields[0]]
        a, b = record_range(predicate, record_column, ds.records)
        left = n_rows
        pos = a
        for batch in ds.scan(decode, records=(a, b), batch_rows=batch_size or None):
            df = pl.from_arrow(batch)
            if record_column is not None:
                df = df.with_columns(
                    pl.int_range(pos, pos + batch.num_rows, dtype=pl.Int64, eager=True).alias(record_column)
                )
            pos += batch.num_rows
            if predicate is not None:
                df = df.filter(predicate)
            df = df.select(wanted)
            if left is not None:
                df = df.head(left)
                left -= df.height
            yield df
            if left is not None and left <= 0:
                return

    return register_io_source(source, schema=schema)


_BOUND_OPS = {"GtEq", "Gt", "Lt", "LtEq", "Eq"}


def record_range(predicate: Any, column: str | None, n: int) -> tuple[int, int]:
    """The record range [a, b) within which ``predicate`` can hold, from its conjunction of
    integer comparisons of ``column``; (0, n) when it names none."""
    a, b = 0, n
    if predicate is None or column is None:
        return a, b
    try:
        tree = json.loads(predicate.meta.serialize(format="json"))
    except Exception:
        return a, b
    for lo, hi in _bounds(tree, column):
        a, b = max(a, lo), min(b, hi)
    return a, max(a, b)


def _bounds(node: object, column: str) -> Iterator[tuple[int, int]]:
    """(lo, hi) half-open ranges of record numbers that each conjunct of ``node`` allows."""
    if not isinstance(node, dict):
        return
    if "BinaryExpr" in node:
        e = node["BinaryExpr"]
        if e["op"] in ("And", "LogicalAnd"):
            yield from _bounds(e["left"], column)
            yield from _bounds(e["right"], column)
            return
        if e["op"] in _BOUND_OPS:
            left, right, op = e["left"], e["right"], e["op"]
            if _int(left) is not None and right == {"Column": column}:  # 5 <= record
                left, right, op = right, left, {"GtEq": "LtEq", "Gt": "Lt", "Lt": "Gt", "LtEq": "GtEq"}.get(op, op)
            v = _int(right)
            if left == {"Column": column} and v is not None:
                yield {"GtEq": (v, 2**63), "Gt": (v + 1, 2**63), "Lt": (0, v), "LtEq": (0, v + 1), "Eq": (v, v + 1)}[op]
        return
    f = node.get("Function")
    if f and f.get("function") == {"Boolean": {"IsBetween": {"closed": "Both"}}}:
        col, lo, hi = f["input"]
        start, last = _int(lo), _int(hi)
        if col == {"Column": column} and start is not None and last is not None:
            yield start, last + 1


def _int(node: Any) -> int | None:
    """The integer of a literal node (``{"Literal": {"Dyn": {"Int": 5}}}`` or, as a source
    receives it, ``{"Literal": {"Scalar": {"Int64": 5}}}``), else None."""
    try:
        lit = node["Literal"]
        kind, inner = next(iter(lit.items()))
        ((t, v),) = inner.items()
    except (KeyError, TypeError, ValueError, AttributeError, StopIteration):
        return None
    ok = (kind == "Dyn" and t == "Int") or (kind == "Scalar" and re.fullmatch(r"U?Int\d+", t))
    return v if ok and isinstance(v, int) and not isinstance(v, bool) else None


def sql(ds: Dataset, query: str) -> pa.Table:
    """The result of the DuckDB ``query`` over the table ``data`` (this snapshot's records),
    as a pyarrow Table; only the fields the query names are decoded."""
    ds._fixed_only("sql")
    duckdb = _extra("duckdb", "bulkload sql")
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query))
    star = "*" in query.replace("count(*)", "").replace("COUNT(*)", "")
    cols = ds.layout.names if star else [f for f in ds.layout.names if f in words] or ds.layout.names[:1]
    con = duckdb.connect()
    try:
        con.register("data", ds.scan(cols))
        try:
            res = con.sql(query)
            if res is None:
                raise UsageError("the query returned no rows or columns: give a SELECT")
            t = res.arrow()
            return t.read_all() if hasattr(t, "read_all") else t
        except duckdb.Error as e:
            msg = str(e).splitlines()[0]
            raise UsageError(f"the query failed: {msg}") from None
    finally:
        con.close()
