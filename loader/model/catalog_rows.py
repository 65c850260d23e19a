"""The manifest's tables in memory: `BatchRows`, `RunList`, `FileMap`.

Each is backed either by a plain list / dict (a version-1 manifest read whole, a dataset
not yet saved, a snapshot handed to a worker) or by a catalog snapshot (catalog.py) plus
the changes made since it was read. They keep the in-memory API the rest of the code
uses (iterate, ``len``, ``[-1]``, ``append`` / ``extend``, ``[k] = v``, whole
assignment) while a catalog-backed one reads only what it is asked for:

- `BatchRows`: ``len``/``bool``/``last`` and the sums (records, stored bytes, next seq and
  record) from the aggregates, O(1); iteration streams the rows in seq order from the read
  transaction; `covering(a, b)` finds the rows of a record range by ``by_first``,
  O(log n + k); appended rows are pending until the commit, which writes only them; a
  whole assignment rewrites the table at the commit; `BatchRows.streamed` (compaction's
  merged rows) is a whole table read from a source at each pass, never held as a list.
- `RunList`: runs in creation order, read one by one (forward or `reversed`, stopping
  early), each Run object handed out kept (the same object on every read) with the JSON it
  was read as: the commit writes the runs whose JSON changed and the appended ones; the
  aggregates index the unfinished runs, the last ``--replace`` and the last compaction so
  that resuming does not read the history. A whole assignment (pruning) rewrites the table.
- `FileMap`: ``get`` / ``in`` / ``[k]`` read one key; ``[k] = v`` is pending.

Pickling one (a task's manifest) materializes it as a list: a read transaction cannot
travel; such copies are for reading.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, ClassVar, Generic, Self, TypeVar, overload

from . import catalog as cg
from .json_object import JsonDict
from .runs import UNFINISHED, Run

if TYPE_CHECKING:
    from .manifest import BatchEntry

T = TypeVar("T")


def summarize(rows: Iterable[BatchEntry]) -> cg.Aggregates:
    """The aggregates of batch rows (a list: a version-1 manifest, a rewrite)."""
    agg = cg.Aggregates()
    add_rows(agg, rows)
    return agg


def add_rows(agg: cg.Aggregates, rows: Iterable[BatchEntry]) -> None:
    """Add appended batch rows to ``agg`` (the last row only is kept as a row)."""
    per_shard: Counter[int] = Counter()
    records = stored = text = batches = 0
    last = None
    for b in rows:  # (a commit of 200,000 small batches: locals, not attributes, per row)
        n = b.count if b.docs is None else b.docs
        records += n
        stored += b.nbytes
        if b.text_bytes:
            text += b.text_bytes
        batches += 1
        if n:
            per_shard[b.shard] += 1
        last = b
    agg.records += records
    agg.stored_bytes += stored
    agg.text_bytes += text
    agg.batches += batches
    shards = Counter(agg.shard_batches)
    for s, k in per_shard.items():
        shards[str(s)] += k
    agg.shard_batches = dict(shards)
    if last is not None:
        agg.last = last.row()
        agg.next_seq, agg.next_record = last.seq + 1, last.first + last.count


class _Rows(Generic[T]):
    """What BatchRows and RunList share: a list (``_list``) or a snapshot (``snap``, with
    its aggregates ``_agg``) plus ``new``. The host class reads its rows: `__len__`,
    `__iter__`, `_decode` (a stored row) and `_at` (a row by position)."""

    _list: list[T] | None
    new: list[T]
    snap: cg.Snap | None
    _agg: cg.Aggregates | None
    _table: ClassVar[str]  # the catalog table of the rows

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[T]:
        raise NotImplementedError

    def _decode(self, key: bytes, raw: bytes) -> T:
        raise NotImplementedError

    def _at(self, i: int) -> T:
        raise NotImplementedError

    @property
    def _snap(self) -> cg.Snap:
        """The snapshot of a table backed by a catalog (``_list`` None)."""
        if self.snap is None:
            raise TypeError(f"{type(self).__name__} holds a list, not a catalog snapshot")
        return self.snap

    @property
    def _aggs(self) -> cg.Aggregates:
        """The aggregates of the snapshot of a table backed by a catalog."""
        if self._agg is None:
            raise TypeError(f"{type(self).__name__} holds a list, not a catalog snapshot")
        return self._agg

    def __bool__(self) -> bool:
        return len(self) > 0

    def __reversed__(self) -> Iterator[T]:
        if self._list is not None:
            return reversed(list(self._list))
        return self._reversed()

    def _reversed(self) -> Iterator[T]:
        yield from reversed(list(self.new))
        for k, raw in self._snap.items(self._table, reverse=True):
            yield self._decode(k, raw)

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        if self._list is not None:
            return self._list[i]
        if isinstance(i, slice):
            return list(self)[i]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._at(i)

    def append(self, item: T) -> None:
        (self._list if self._list is not None else self.new).append(item)

    def extend(self, items: Iterable[T]) -> None:
        (self._list if self._list is not None else self.new).extend(items)

    def __reduce__(self) -> tuple[type[Self], tuple[list[T]]]:
        return (type(self), (list(self),))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Iterable) and list(self) == list(other)

    # a table is mutable: unhashable, as a list (defining __eq__ sets __hash__ to None)


class BatchRows(_Rows["BatchEntry"]):
    """The batch rows of a manifest (see the module docstring)."""

    def __init__(
        self, rows: Iterable[BatchEntry] | None = None, snap: cg.Snap | None = None, agg: cg.Aggregates | None = None
    ):
        from .manifest import BatchEntry  # the row type lives with the manifest

        self._entry = BatchEntry
        self.snap = snap
        self.rewrite = snap is None  # a list: the whole table is (re)written by the next commit
        self._list = list(rows or []) if snap is None else None
        self.new = []  # rows appended since the snapshot
        self._agg = agg if snap is not None else None
        self._firsts: list[int] | None = None
        self._with_new: tuple[int, cg.Aggregates] | None = None  # (len(new), aggregates with them): `agg`
        self._source: Callable[[], Iterator[BatchEntry]] | None = None  # `streamed`

    @classmethod
    def streamed(cls, source: Callable[[], Iterator[BatchEntry]]) -> BatchRows:
        """A whole table whose rows ``source()`` yields in seq order, afresh at each pass
        (compaction's merged rows, from files): the commit rewrites the table from it
        without a list of the rows. Iterating, ``len``, ``last`` and ``agg`` read it
        through; other reads are for catalog- or list-backed tables (TypeError)."""
        rows = cls()
        rows._list, rows._source = None, source
        return rows

    # --- aggregates ---------------------------------------------------------------------
    @property
    def agg(self) -> cg.Aggregates:
        if self._list is not None or self._source is not None:
            return summarize(self)
        stored = self._aggs
        if not self.new:
            return stored
        cached = self._with_new
        if cached is not None and cached[0] == len(self.new):
            return cached[1]
        agg = cg.Aggregates(**{f: getattr(stored, f) for f in stored.__struct_fields__})
        add_rows(agg, self.new)  # a new shard_batches dict: self._agg's stays as read
        self._with_new = (len(self.new), agg)  # rows are only appended: their count says what it holds
        return agg

    def __len__(self) -> int:
        if self._source is not None:
            return self.agg.batches
        return len(self._list) if self._list is not None else self._aggs.batches + len(self.new)

    @property
    def last(self) -> BatchEntry | None:
        if self._source is not None:
            last = self.agg.last
            return self._entry(*last) if last is not None else None
        if self._list is not None:
            return self._list[-1] if self._list else None
        if self.new:
            return self.new[-1]
        last = self._aggs.last
        return self._entry(*last) if last is not None else None

    # --- reading --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[BatchEntry]:
        if self._list is not None:
            yield from list(self._list)
            return
        if self._source is not None:
            yield from self._source()
            return
        snap = self._snap
        for _k, raw in snap.items("batches"):
            yield self._row(snap, raw)
        yield from list(self.new)

    def _row(self, snap: cg.Snap, raw: bytes | None) -> BatchEntry:
        if raw is None:
            raise cg.damaged(snap.cat.path, "an index names a batch row that is missing")
        try:
            return self._entry(*cg.row_of(snap, raw))
        except TypeError:
            raise cg.damaged(snap.cat.path, "a batch row has the wrong fields") from None

    _table = "batches"

    def _decode(self, key: bytes, raw: bytes) -> BatchEntry:
        return self._row(self._snap, raw)

    def _at(self, i: int) -> BatchEntry:
        if i == len(self) - 1:
            last = self.last
            if last is not None:
                return last
        stored = self._aggs.batches
        if i >= stored:
            return self.new[i - stored]
        for j, b in enumerate(self):  # by position: rare (callers look rows up by record or seq)
            if j == i:
                return b
        raise IndexError(i)

    def covering(self, a: int, b: int) -> list[BatchEntry]:
        """The rows (fixed-size records) holding records of [a, b), in record order."""
        if b <= a:
            return []
        out: list[BatchEntry] = []
        if self._list is not None:
            if self._firsts is None or len(self._firsts) != len(self._list):
                self._firsts = [r.first for r in self._list]
            i = max(0, bisect.bisect_right(self._firsts, a) - 1)
            for r in self._list[i:]:
                if r.first >= b:
                    break
                if r.first + r.count > a:
                    out.append(r)
            return out
        snap = self._snap
        start = snap.floor("by_first", cg.key(a))
        start_key = start[0] if start is not None else None
        for _k, seq in snap.items("by_first", start_key):
            r = self._row(snap, snap.get("batches", seq))
            if r.first >= b:
                break
            if r.first + r.count > a:
                out.append(r)
        else:
            out.extend(r for r in self.new if r.first < b and r.first + r.count > a)
        return out

    def seqs(self) -> Iterator[int]:
        """The rows' seqs in ascending order (a list-backed table: sorted)."""
        if self._list is not None:
            yield from sorted(b.seq for b in self._list)
        else:
            yield from (b.seq for b in self)

    def __repr__(self) -> str:
        if self._source is not None:
            return "BatchRows(streamed)"
        return f"BatchRows({len(self)} rows{', catalog' if self.snap else ''})"


class RunList(_Rows[Run]):
    """The runs of a manifest in creation order (see the module docstring)."""

    def __init__(
        self, runs: Iterable[Run] | None = None, snap: cg.Snap | None = None, agg: cg.Aggregates | None = None
    ):
        self.snap = snap
        self.rewrite = snap is None
        self._list = list(runs or []) if snap is None else None
        self._agg = agg
        self.loaded: dict[int, tuple[Run, bytes]] = {}  # number -> (the Run handed out, its JSON as read)
        self.new = []

    def __len__(self) -> int:
        return len(self._list) if self._list is not None else self._aggs.runs + len(self.new)

    def _run(self, n: int, raw: bytes | None = None) -> Run:
        held = self.loaded.get(n)
        if held is not None:
            return held[0]
        snap = self._snap
        if raw is None:
            raw = snap.get("runs", cg.key(n))
            if raw is None:
                raise cg.damaged(snap.cat.path, f"run number {n} is missing")
        try:
            d = cg.decode(raw)
            if not isinstance(d, dict):
                raise TypeError(d)
            run = Run.from_dict(d)
        except Exception:
            raise cg.damaged(snap.cat.path, f"run number {n} is not a valid run") from None
        self.loaded[n] = (run, bytes(raw))
        return run

    def __iter__(self) -> Iterator[Run]:
        if self._list is not None:
            yield from list(self._list)
            return
        for k, raw in self._snap.items("runs"):
            yield self._run(cg.unkey(k), raw)
        yield from list(self.new)

    _table = "runs"

    def _decode(self, key: bytes, raw: bytes) -> Run:
        return self._run(cg.unkey(key), raw)

    def _at(self, i: int) -> Run:
        stored = self._aggs.runs
        return self.new[i - stored] if i >= stored else self._run(i)

    # --- indexed questions (model/runs.py) ---------------------------------------------------
    def number(self, run: Run) -> int | None:
        """The creation-order number of ``run`` (an object of this list)."""
        if self._list is not None:
            return next((i for i, r in enumerate(self._list) if r is run), None)
        found = next((n for n, (r, _raw) in self.loaded.items() if r is run), None)
        if found is None:
            found = next((self._aggs.runs + i for i, r in enumerate(self.new) if r is run), None)
        return found

    def since_replace(self) -> list[Run]:
        """The runs since the last ``--replace`` (inclusive), oldest first."""
        if self._list is not None:
            for i in range(len(self._list) - 1, -1, -1):
                if self._list[i].replaces_dataset():
                    return self._list[i:]
            return list(self._list)
        for i in range(len(self.new) - 1, -1, -1):
            if self.new[i].replaces_dataset():
                return self.new[i:]
        start = max(self._aggs.last_replace, 0)
        return [self._run(cg.unkey(k), raw) for k, raw in self._snap.items("runs", cg.key(start))] + list(self.new)

    def tail(self, n: int) -> tuple[list[Run], int]:
        """The last ``n`` runs, oldest first, and the creation number of the first of them
        (reads only those: `info` shows a window of a history of any length)."""
        if self._list is not None:
            first = max(0, len(self._list) - n)
            return self._list[first:], first
        new = list(self.new)[-n:] if n else []
        stored: list[Run] = []
        for _k, raw in self._snap.items("runs", reverse=True):
            if len(stored) + len(new) >= n:
                break
            stored.append(self._run(cg.unkey(_k), raw))
        stored.reverse()
        return stored + new, len(self) - len(stored) - len(new)

    def last_replace(self) -> int:
        """The creation number of the last ``--replace`` run, or -1."""
        if self._list is not None:
            return next((i for i in range(len(self._list) - 1, -1, -1) if self._list[i].replaces_dataset()), -1)
        for i in range(len(self.new) - 1, -1, -1):
            if self.new[i].replaces_dataset():
                return self._aggs.runs + i
        return self._aggs.last_replace

    def by_status(self) -> dict[str, int]:
        """How many runs have each status, as recorded (the aggregates; a list: counted)."""
        if self._list is not None:
            return dict(Counter(r.status for r in self._list))
        out = dict(self._aggs.runs_by_status)
        for r in self.new:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def recent(self) -> Iterator[Run]:
        """The runs since the last ``--replace`` (inclusive), newest first, read lazily:
        a caller that stops at the run it looks for reads no older one."""
        if self._list is not None:
            yield from reversed(self.since_replace())
            return
        for r in reversed(list(self.new)):
            yield r
            if r.replaces_dataset():
                return
        last_replace = self._aggs.last_replace
        for k, raw in self._snap.items("runs", reverse=True):
            n = cg.unkey(k)
            if n < last_replace:
                return
            yield self._run(n, raw)

    def of_source(self, source: str) -> list[Run]:
        """The runs since the last ``--replace`` that loaded ``source`` (alone or as one of
        their inputs; and every new one), oldest first: the catalog's ``by_source`` index."""
        if self._list is not None:
            return self.since_replace()
        prefix = source.encode() + b"\0"
        numbers = []
        last_replace = self._aggs.last_replace
        for k, _v in self._snap.items("by_source", prefix):
            if not k.startswith(prefix):
                break
            n = cg.unkey(k[len(prefix) :])
            if n >= last_replace:
                numbers.append(n)
        since = [r for r in self.new if r.replaces_dataset()]
        if since:
            return self.new[self.new.index(since[-1]) :]
        return [self._run(n) for n in numbers] + list(self.new)

    def unfinished(self) -> list[Run]:
        """The runs whose status is running, failed or interrupted (and the new ones)."""
        if self._list is not None:
            return [r for r in self._list if r.status in UNFINISHED]
        held = {n for n, (r, _raw) in self.loaded.items()}
        numbers = sorted(set(self._aggs.unfinished) | held)
        return [r for r in (self._run(n) for n in numbers) if r.status in UNFINISHED] + [
            r for r in self.new if r.status in UNFINISHED
        ]

    def compacted_after(self, run: Run) -> bool:
        """Is there a done compaction created after ``run``?"""
        n = self.number(run)
        if self._list is not None or n is None:
            after = False
            for r in self:
                if r is run:
                    after = True
                elif after and r.kind == "compact" and r.status == "done":
                    return True
            return False
        stored = self._aggs
        if stored.last_compact > n:
            return True
        later = [r for m, (r, _raw) in self.loaded.items() if m > n] + [
            r for i, r in enumerate(self.new) if stored.runs + i > n
        ]
        return any(r.kind == "compact" and r.status == "done" for r in later)

    def __repr__(self) -> str:
        return f"RunList({len(self)} runs{', catalog' if self.snap else ''})"


class FileMap:
    """The ingested files (name -> its JSON): dict-like, one key read at a time."""

    def __init__(self, files: dict[str, JsonDict] | None = None, snap: cg.Snap | None = None, count: int = 0):
        self.snap = snap
        self.rewrite = snap is None
        self._dict = dict(files or {}) if snap is None else None
        self.new: dict[str, JsonDict] = {}

    @property
    def _snap(self) -> cg.Snap:
        if self.snap is None:
            raise TypeError("FileMap holds a dict, not a catalog snapshot")
        return self.snap

    def get(self, name: str, default: JsonDict | None = None) -> JsonDict | None:
        if self._dict is not None:
            return self._dict.get(name, default)
        if name in self.new:
            return self.new[name]
        raw = self._snap.get("files", name.encode())
        return default if raw is None else self._decode(raw)

    def _decode(self, raw: bytes) -> JsonDict:
        d = cg.decode(raw)
        if not isinstance(d, dict):
            raise cg.damaged(self._snap.cat.path, "an ingested file's entry is not a JSON object")
        return d

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __getitem__(self, name: str) -> JsonDict:
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __setitem__(self, name: str, value: JsonDict) -> None:
        (self._dict if self._dict is not None else self.new)[name] = value

    def items(self) -> list[tuple[str, JsonDict]]:
        if self._dict is not None:
            return list(self._dict.items())
        out = {k.decode(): self._decode(v) for k, v in self._snap.items("files")}
        out.update(self.new)
        return list(out.items())

    def keys(self) -> list[str]:
        return [k for k, _v in self.items()]

    def values(self) -> list[JsonDict]:
        return [v for _k, v in self.items()]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.items())

    def __bool__(self) -> bool:
        if self._dict is not None:
            return bool(self._dict)
        return bool(self.new) or next(self._snap.items("files"), None) is not None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FileMap | dict):
            return dict(self.items()) == dict(other.items())
        return isinstance(other, Iterable) and dict(self.items()) == dict(other)

    def __reduce__(self) -> tuple[type[FileMap], tuple[dict[str, JsonDict]]]:
        return (FileMap, (dict(self.items()),))

    def __repr__(self) -> str:
        return f"FileMap({'catalog' if self.snap else len(self._dict or {})})"
