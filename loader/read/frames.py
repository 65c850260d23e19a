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

Only the record column maps to a record range: the dataset keeps no per-batch bounds of
its fields, so a range on a field (even one that grows with the record number, as i1 of
gen://scidb96) is filtered after every batch is read (projection still applies).
``Dataset.read_stats`` shows the stored bytes a query read.

`sql(ds, query)`: a DuckDB query over the table ``data``, a scan of the fields the query
names (``*``: all of them) plus, when the query names it, the Int64 column ``record`` of
record numbers. The record range the WHERE allows (`sql_record_range`, from DuckDB's own
parse of the query: a top-level AND of integer comparisons and BETWEENs of ``record``, in
a single SELECT that reads ``data`` once) is the scan's: only those batches are read.
DuckDB still applies the whole query, so the result is the one over every record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
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
        if predicate is None and n_rows is not None:  # the first n_rows records: only their batches
            b = min(b, a + n_rows)
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


#: the column of record numbers (Int64) a `sql` query may name (when no field has that name)
RECORD_COLUMN = "record"
#: DuckDB's comparison node types -> the record range [lo, hi) of ``record OP v``
_SQL_BOUNDS: dict[str, Callable[[int], tuple[int, int]]] = {
    "COMPARE_GREATERTHANOREQUALTO": lambda v: (v, 2**63),
    "COMPARE_GREATERTHAN": lambda v: (v + 1, 2**63),
    "COMPARE_LESSTHAN": lambda v: (0, v),
    "COMPARE_LESSTHANOREQUALTO": lambda v: (0, v + 1),
    "COMPARE_EQUAL": lambda v: (v, v + 1),
}
#: ``v OP record`` is ``record FLIPPED v``
_SQL_FLIPPED = {
    "COMPARE_GREATERTHANOREQUALTO": "COMPARE_LESSTHANOREQUALTO",
    "COMPARE_GREATERTHAN": "COMPARE_LESSTHAN",
    "COMPARE_LESSTHAN": "COMPARE_GREATERTHAN",
    "COMPARE_LESSTHANOREQUALTO": "COMPARE_GREATERTHANOREQUALTO",
    "COMPARE_EQUAL": "COMPARE_EQUAL",
}


def sql(ds: Dataset, query: str) -> pa.Table:
    """The result of the DuckDB ``query`` over the table ``data`` (this snapshot's records,
    and the Int64 column ``record`` of record numbers when the query names it and no field
    is called so), as a pyarrow Table. Only the fields the query names are decoded, and
    only the batches of the record range its WHERE allows (`sql_record_range`). A query
    that reads ``data`` more than once (a subquery, a UNION, a self-join) gets those fields
    read into memory once (a scan streams once)."""
    ds._fixed_only("sql")
    duckdb = _extra("duckdb", "bulkload sql")
    fields = ds.layout.names
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    star = "*" in re.sub(r"(?i)count\s*\(\s*\*\s*\)", "", query)
    record = RECORD_COLUMN if RECORD_COLUMN in words and RECORD_COLUMN not in fields else None
    cols = list(fields) if star else [f for f in fields if f.lower() in words] or ([] if record else fields[:1])
    con = duckdb.connect()
    try:
        tree = parsed(con, query)
        # `data` named more than once (or inside a string: query_table('data')): read it whole, once
        once = tree is not None and len(re.findall(r"(?i)\bdata\b", query)) == 1
        a, b = sql_record_range(tree, record, ds.records) if record and once else (0, ds.records)
        reader = _with_records(ds, cols, record, a, b) if record else ds.scan(cols)
        con.register("data", reader if once or tree is None else reader.read_all())
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


def parsed(con: Any, query: str) -> dict[str, Any] | None:
    """DuckDB's parse of a SELECT ``query`` (``json_serialize_sql``), or None (not a single
    SELECT, or not valid: running it then says why)."""
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [query]).fetchall()[0][0])
    except Exception:  # anything DuckDB cannot parse: no pushdown (running the query reports it)
        return None
    if not isinstance(tree, dict) or tree.get("error") or len(tree.get("statements") or ()) != 1:
        return None
    return tree


def _with_records(ds: Dataset, cols: list[str], record: str, a: int, b: int) -> pa.RecordBatchReader:
    """A scan of the fields ``cols`` of records [a, b), with the column ``record`` of their
    numbers (no field: one field is decoded for the row count, then dropped)."""
    import numpy as np
    import pyarrow as pa

    decode = cols or ds.layout.names[:1]
    rd = ds.scan(decode, records=(a, b))
    schema = pa.schema([f for f in rd.schema if f.name in cols] + [pa.field(record, pa.int64(), nullable=False)])

    def batches() -> Iterator[pa.RecordBatch]:
        pos = a
        for batch in rd:
            n = batch.num_rows
            arrays = [batch.column(c) for c in cols] + [pa.array(np.arange(pos, pos + n, dtype=np.int64))]
            pos += n
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


def sql_record_range(tree: dict[str, Any] | None, record: str, n: int) -> tuple[int, int]:
    """The record range [a, b) outside which no row of ``data`` can pass the WHERE of the
    parsed query ``tree`` (`parsed`): the conjunction (AND) of integer comparisons (``=``,
    ``<``, ``<=``, ``>``, ``>=``, either side) and BETWEENs of the column ``record`` at the
    top of the WHERE of a single SELECT that reads ``data`` once, in its FROM, without a
    join or sample. Anything else (an OR, a NOT, a set operation, a CTE, a second
    reference to ``data``, a comparison with an expression): (0, n), every record. DuckDB still applies
    the whole WHERE: the range is only what need not be read."""
    if tree is None:
        return 0, n
    node = tree["statements"][0].get("node") or {}
    src = node.get("from_table") or {}
    if (
        node.get("type") != "SELECT_NODE"
        or (node.get("cte_map") or {}).get("map")
        or src.get("type") != "BASE_TABLE"
        or str(src.get("table_name", "")).lower() != "data"
        or src.get("schema_name") not in ("", "main", None)
        or src.get("catalog_name") not in ("", "memory", None)
        or src.get("at_clause") is not None
        or src.get("sample") is not None  # a sample of fewer rows would pick others
        or node.get("sample") is not None
        or sum(1 for _ in _data_refs(tree)) != 1
    ):
        return 0, n
    names = {(record,), ("data", record), *([(src["alias"].lower(), record)] if src.get("alias") else [])}
    a, b = 0, n
    for lo, hi in _sql_bounds(node.get("where_clause"), names):
        a, b = max(a, lo), min(b, hi)
    a = min(a, n)
    return a, max(a, b)


def _data_refs(node: object) -> Iterator[None]:
    """One item per reference to the table ``data`` anywhere in a parsed query."""
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE" and str(node.get("table_name", "")).lower() == "data":
            yield None
        for v in node.values():
            yield from _data_refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _data_refs(v)


def _sql_bounds(node: object, names: set[tuple[str, ...]]) -> Iterator[tuple[int, int]]:
    """(lo, hi) half-open record ranges that each conjunct of a parsed WHERE allows."""
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind == "CONJUNCTION_AND":
        for c in node.get("children", []):
            yield from _sql_bounds(c, names)
    elif kind in _SQL_BOUNDS:
        left, right = node.get("left"), node.get("right")
        if _sql_int(left) is not None and _is_record(right, names):
            left, right, kind = right, left, _SQL_FLIPPED[kind]
        v = _sql_int(right)
        if v is not None and _is_record(left, names):
            yield _SQL_BOUNDS[kind](v)
    elif kind == "COMPARE_BETWEEN":
        lo, hi = _sql_int(node.get("lower")), _sql_int(node.get("upper"))
        if lo is not None and hi is not None and _is_record(node.get("input"), names):
            yield lo, hi + 1


def _is_record(node: object, names: set[tuple[str, ...]]) -> bool:
    if not isinstance(node, dict) or node.get("type") != "COLUMN_REF":
        return False
    return tuple(str(c).lower() for c in node.get("column_names", ())) in names


def _sql_int(node: object) -> int | None:
    """The integer of a parsed integer constant (``{"literal": {"kind": "INTEGER", "text":
    "10"}}``), else None."""
    if not isinstance(node, dict) or node.get("type") != "VALUE_CONSTANT":
        return None
    lit = node.get("literal")
    if isinstance(lit, dict) and str(lit.get("kind", "")).upper() in ("INTEGER", "BIGINT", "HUGEINT", "UBIGINT"):
        text = str(lit.get("text", ""))
        return int(text) if re.fullmatch(r"-?\d+", text) else None
    value = node.get("value")  # older DuckDB: {"value": {"type": {"id": "INTEGER"}, "value": 10}}
    if isinstance(value, dict) and isinstance(value.get("value"), int) and not isinstance(value.get("value"), bool):
        tid = str((value.get("type") or {}).get("id", ""))
        return int(value["value"]) if re.fullmatch(r"U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)", tid) else None
    return None
