"""Reading a dataset on Dask: `Dataset.to_dask_dataframe()` and `Dataset.to_dask_array()`.

Both build a lazy Dask collection from one reader's snapshot (manifest generation G) and
read it through the same readers as the Dataset: a partition decodes whole batches
(`Dataset.scan`, checksums checked), an array block is one box query
(arrays/query.py's `read_box`, OS readahead off) scattered into a dense numpy block.

- DataFrame: the layout's columns in pandas types (those of `Dataset.to_pandas`:
  datetimes with their zone, nullable dtypes for nullable fields; a numeric layout's are
  those of `Dataset.read_records`), indexed
  by record number (``record``, int64; known divisions). A partition is a run of whole
  consecutive batches holding about ``partition_bytes`` of records (default 128 MiB, at
  least one batch): batches are the unit of storage, so a partition never reads part of
  one. An empty dataset is one empty partition.
- Array: one attribute (``attr``; needed when the array has several) of a 2-D array as
  a dask Array, axis 0 and 1 its two dimensions in order. Element [r, c] is cell
  (start0 + r, start1 + c) of the box read: ``box`` {dim: (start, stop)} (half-open,
  a missing or None bound: the array's extent), by default from the corner of the array's
  first chunk to its last cell. Blocks follow the array's chunk grid (``chunks``: cells
  per block along each dimension, multiples of the array's chunks; default the chunks):
  each block reads only the chunks it covers. Empty cells hold ``fill``: NaN by default
  for float attributes; integer attributes have no natural "empty", so they need one.
  Arrays built with ``--duplicates keep`` have several values per cell and are refused.

Snapshot. Every task reads snapshot G, never a later one, whatever commits happen between
building the collection and computing it: each task carries G's manifest header (layout,
format, the array's summary) and its own batch rows (seq, shard, checksum), so it reads
exactly G's batches / G's array build, checked against G's checksums. The collection
holds a pin on G (read/snapshots.py) while it exists in the client - taken only when the
reader that built it is pinned - so compact / finalize keep G's data on disk until the
collection is gone; each task also pins G while it reads. A task whose data was removed
anyway (the collection was built from an unpinned reader, or the pin could not hold)
raises SnapshotExpiredError ("build the collection again"); a dataset replaced by
``load --replace`` raises DatasetReplacedError; never data of two snapshots.

dask is imported only inside these functions (ImportError -> UsageError naming the
extra). Tasks open their own read-only handles (nothing open crosses a process), so the
threaded scheduler and a distributed cluster (the dataset root on a filesystem every
worker sees) both work. Crash behaviour: reads only; a task that dies holds nothing (its
flock goes with its process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import itertools
import socket
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..arrays.query import ArrayIndex, array_index, box_coordinate, read_box, use_index
from ..errors import DatasetNotFoundError, DatasetReplacedError, EngineError, SnapshotExpiredError, UsageError
from ..infra.pins import Pin
from ..model import manifest as mf
from ..model.catalog_rows import BatchRows, FileMap, RunList
from ..stores.spec import parse_dataset_uri
from .dataset import Dataset
from .snapshots import read_snapshot

if TYPE_CHECKING:
    import pyarrow as pa

    from ..model.layouts import Layout

#: default record bytes per DataFrame partition (whole batches, at least one)
PARTITION_BYTES = 128 << 20
#: array indexes a worker process keeps across tasks (one build's index is read once per process)
_INDEX_CACHE_SIZE = 8
_indexes: OrderedDict[tuple[str, str, str], ArrayIndex] = OrderedDict()


def _dask(module: str, what: str) -> ModuleType:
    try:  # dask is imported only here: other readers and commands never load it
        return importlib.import_module(module)
    except ImportError as e:
        raise UsageError(f"{what} needs {module} ({e}): pip install 'bulkload[dask]'") from None


# --- the snapshot a collection's tasks read ------------------------------------------------------


@dataclasses.dataclass(eq=False)
class Snapshot:
    """What a task needs to read generation G of a dataset: its URI and G's manifest
    header (no batches, runs, files or garbage). ``pin`` holds G in the client while the
    collection exists; it is not pickled (a task takes its own)."""

    uri: str
    header: mf.Manifest
    pin: Pin | None = None

    @classmethod
    def of(cls, ds: Dataset, arrays: dict[str, Any] | None = None) -> Snapshot:
        m = ds.manifest
        header = dataclasses.replace(
            m, batches=BatchRows([]), runs=RunList([]), files=FileMap({}), garbage=[], arrays=arrays or {}
        )
        pin = Pin.take(ds.spec.root, m.generation) if ds.pinned else None  # ds holds G: race-free
        return cls(ds.uri, header, pin)

    @property
    def generation(self) -> int:
        return self.header.generation

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "pin": None}

    def __dask_tokenize__(self) -> tuple[str, str, str, int]:
        return ("bulkload-snapshot", self.uri, self.header.dataset_id, self.generation)

    @contextlib.contextmanager
    def reader(self, batches: Iterable[mf.BatchEntry] = ()) -> Iterator[Dataset]:
        """A Dataset of this snapshot limited to ``batches`` (rows of G), in a task."""
        root = parse_dataset_uri(self.uri).root
        pin = Pin.take(root, self.generation)
        try:
            try:
                now, ident, _ = read_snapshot(root, self.uri, pin=False)
            except DatasetNotFoundError as e:
                raise _unseen_on_worker(root) or e from None
            if now.dataset_id != self.header.dataset_id:
                raise DatasetReplacedError(
                    f"dataset {self.uri} was replaced (load --replace) after this Dask "
                    "collection was built from it; open it again and build it again"
                )
            current = now.generation == self.generation  # pinned while G is current: G's data is held
            m = dataclasses.replace(self.header, batches=BatchRows(batches))
            ds = Dataset(self.uri, pin=False, snapshot=(m, ident if current else None, pin if current else None))
            try:
                yield ds
            except SnapshotExpiredError:
                raise SnapshotExpiredError(
                    f"dataset {self.uri} changed since this Dask collection was built from it (generation "
                    f"{self.generation}, now {now.generation}) and compact/finalize removed data of that snapshot, "
                    "which no reader pinned any more; open the dataset again and build the collection again"
                ) from None
            finally:
                ds.close()
        finally:
            if pin is not None:
                pin.release()


def _unseen_on_worker(root: str) -> EngineError | None:
    """In a task on a Dask worker, the error naming that worker and ``root`` when the
    dataset is not there (its filesystem is not the one the collection was built on);
    None under another scheduler (threads, processes: the dataset is gone)."""
    try:
        from distributed import get_worker

        from ..infra.dask_exec import unseen

        address = get_worker().address
    except (ImportError, ValueError):
        return None
    return unseen(address, root, "does not exist there, but the collection was built from it", socket.gethostname())


# --- DataFrame --------------------------------------------------------------------------------------


def dask_dataframe(ds: Dataset, partition_bytes: int | None = None) -> Any:
    """See the module docstring."""
    ds._fixed_only("to_dask_dataframe")
    dd = _dask("dask.dataframe", "to_dask_dataframe")
    pd = _dask("pandas", "to_dask_dataframe")
    meta = _frame(pd, ds.layout.arrow_schema.empty_table(), np.empty(0, np.int64), ds.layout)
    parts = _partitions(ds.manifest.batches, ds.layout.record_size, _partition_bytes(partition_bytes))
    if not parts:
        return dd.from_pandas(meta, npartitions=1)
    divisions = [p[0].first for p in parts] + [parts[-1][-1].first + parts[-1][-1].count - 1]
    return dd.from_map(
        _read_partition, parts, args=[Snapshot.of(ds)], meta=meta, divisions=divisions, label="bulkload-records"
    )


def _partition_bytes(value: object) -> int:
    if value is None:
        return PARTITION_BYTES
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"partition_bytes must be a positive integer (record bytes per partition), not {value!r}")
    return value


def _partitions(batches: Iterable[mf.BatchEntry], record_size: int, target: int) -> list[list[mf.BatchEntry]]:
    """Consecutive batches grouped into runs of about ``target`` record bytes (>= 1 batch each)."""
    parts: list[list[mf.BatchEntry]] = []
    size = target
    for b in batches:
        if size >= target:
            parts.append([])
            size = 0
        parts[-1].append(b)
        size += b.count * record_size
    return parts


def _read_partition(rows: list[mf.BatchEntry], snap: Snapshot) -> Any:
    """One partition: the records of ``rows`` (batches of G) as a pandas DataFrame."""
    import pandas as pd

    with snap.reader(rows) as ds:
        table = ds.scan().read_all()  # the scan's decode: checksums checked
        layout = ds.layout
    index = np.concatenate([np.arange(b.first, b.first + b.count, dtype=np.int64) for b in rows])
    return _frame(pd, table, index, layout)


def _frame(pd: ModuleType, table: pa.Table, index: np.ndarray, layout: Layout) -> Any:
    """A scan's Table as a DataFrame of the layout's pandas types (model/arrow_records.py)."""
    from ..model.arrow_records import frame_of_table

    return frame_of_table(table, layout, pd.Index(index, name="record"))


# --- Array ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _BlockSpec:
    """What every block of one collection reads: array, attribute, its dtype, fill, origin."""

    array: str
    dims: tuple[str, str]
    attr: str
    dtype: np.dtype[Any]
    fill: object
    origin: tuple[int, int]


def dask_array(
    ds: Dataset,
    array: str,
    attr: str | None,
    fill: object,
    chunks: Sequence[int] | None,
    box: Mapping[str, tuple[object, object]] | None,
) -> Any:
    """See the module docstring."""
    ds._fixed_only("to_dask_array")
    da = _dask("dask.array", "to_dask_array")
    ai = array_index(ds, array)
    if ai.keep:
        raise UsageError(
            f"array {array!r} keeps duplicate cells (a synthetic third dimension, --duplicates keep): "
            "it has no dense 2-D form; read it with read_box or to_dask_dataframe"
        )
    attr = _attribute(ai, attr)
    dtype = ai.fields[attr].dtype
    fill = _fill(attr, dtype, fill)
    starts, stops = _box(ai, box)
    sizes = _block_sizes(ai, chunks)
    grid = tuple(_cuts(lo, hi, size) for lo, hi, size in zip(starts, stops, sizes))
    spec = _BlockSpec(array, tuple(ai.dims), attr, dtype, fill, starts)
    snap = Snapshot.of(ds, {array: ai.summary})
    return da.map_blocks(
        _read_block,
        snap,
        spec,
        chunks=grid,
        dtype=dtype,
        meta=np.empty((0, 0), dtype),
        token=f"bulkload-{array}-{attr}",
    )


def _attribute(ai: ArrayIndex, attr: str | None) -> str:
    if attr is None and len(ai.attrs) == 1:
        return ai.attrs[0]
    if attr is None or attr not in ai.attrs:
        what = "needs attr=" if attr is None else f"has no attribute {attr!r}:"
        raise UsageError(f"to_dask_array reads one attribute; array {ai.name!r} {what} one of {', '.join(ai.attrs)}")
    return attr


def _fill(attr: str, dtype: np.dtype[Any], fill: object) -> Any:
    if fill is None:
        if dtype.kind == "f":
            return dtype.type("nan")
        if dtype.kind in "mM":  # a time attribute: NaT where no record is
            return dtype.type("NaT")
        raise UsageError(
            f"attribute {attr!r} is {dtype.name}, which has no empty value: give fill= the value of "
            "cells without a record (e.g. fill=0 or fill=-1)"
        )
    if dtype.kind == "f" and isinstance(fill, (int, float, np.integer, np.floating)) and not isinstance(fill, bool):
        return dtype.type(fill)
    if dtype.kind == "b" and isinstance(fill, (bool, np.bool_)):
        return dtype.type(fill)
    if isinstance(fill, (int, np.integer)) and not isinstance(fill, bool) and dtype.kind in "iu":
        info = np.iinfo(dtype)
        if info.min <= fill <= info.max:
            return dtype.type(fill)
    raise UsageError(f"fill={fill!r} is not a {dtype.name} value (the type of attribute {attr!r})")


def _box(ai: ArrayIndex, box: Mapping[str, tuple[object, object]] | None) -> tuple[tuple[int, int], tuple[int, int]]:
    """(start0, start1), (stop0, stop1) of the cells to read (see the module docstring)."""
    box = dict(box or {})
    unknown = [k for k in box if k not in ai.dims]
    if unknown:
        raise UsageError(f"box: array {ai.name!r} has dimensions {', '.join(ai.dims)}, not {', '.join(unknown)}")
    bounds = ai.summary.get("bounds") or {d: [0, -1] for d in ai.dims}  # no cells: an empty box
    starts, stops = [], []
    for dim, chunk in zip(ai.dims, ai.chunks):
        lo, hi = bounds[dim]
        start, stop = _range(dim, box.get(dim), (lo // chunk) * chunk, hi + 1, ai.fields[dim].type)
        starts.append(start)
        stops.append(max(start, stop))
    return (starts[0], starts[1]), (stops[0], stops[1])


def _range(dim: str, given: object, start: int, stop: int, type_name: str) -> tuple[int, int]:
    """The half-open range of ``dim`` asked for, its bounds as read_box takes them (integers; of
    a time dimension also instants or durations: arrays/query.py `box_coordinate`)."""
    if given is None:
        return start, stop
    try:
        if not isinstance(given, Iterable):
            raise TypeError
        given_lo, given_hi = given
        if isinstance(given, str):
            raise TypeError
    except (TypeError, ValueError):
        raise UsageError(
            f"box: the range of {dim!r} must be (start, stop) integers, start <= stop "
            f"(half-open; None: the array's extent; a time dimension also takes instants), "
            f"not {given!r}"
        ) from None
    lo = start if given_lo is None else box_coordinate(dim, type_name, given_lo)
    hi = stop if given_hi is None else box_coordinate(dim, type_name, given_hi)
    if lo > hi:
        raise UsageError(
            f"box: the range of {dim!r} must be (start, stop) integers, start <= stop "
            f"(half-open; None: the array's extent; a time dimension also takes instants), "
            f"not {given!r}"
        )
    return lo, hi


def _block_sizes(ai: ArrayIndex, chunks: Sequence[int] | None) -> tuple[int, int]:
    if chunks is None:
        return ai.chunks[0], ai.chunks[1]
    try:
        sizes = tuple(int(c) for c in chunks)
        ok = len(sizes) == 2 and all(s > 0 and s % c == 0 for s, c in zip(sizes, ai.chunks))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise UsageError(
            f"chunks={chunks!r}: give two block sizes that are multiples of array {ai.name!r}'s "
            f"chunks {tuple(ai.chunks)}"
        )
    return sizes[0], sizes[1]


def _cuts(start: int, stop: int, size: int) -> tuple[int, ...]:
    """Block lengths over [start, stop) cut at the multiples of ``size`` (the chunk grid)."""
    if start >= stop:
        return (0,)
    edges = [start, *range((start // size + 1) * size, stop, size), stop]
    return tuple(b - a for a, b in itertools.pairwise(edges))


def _read_block(snap: Snapshot, spec: _BlockSpec, block_info: dict[Any, Any]) -> np.ndarray:
    """One block: the cells of its box, ``spec.fill`` where there is none."""
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    lo0, lo1 = spec.origin[0] + r0, spec.origin[1] + c0
    out = np.full((r1 - r0, c1 - c0), spec.fill, spec.dtype)
    if not out.size:
        return out
    d0, d1 = spec.dims
    with snap.reader() as ds:
        _share_index(ds, snap, spec.array)
        cells = read_box(ds, spec.array, [spec.attr], {d0: (lo0, lo0 + out.shape[0]), d1: (lo1, lo1 + out.shape[1])})
    rows = cells.column(d0).to_numpy().astype(np.int64) - lo0
    cols = cells.column(d1).to_numpy().astype(np.int64) - lo1
    out[rows, cols] = cells.column(spec.attr).to_numpy()
    return out


def _share_index(ds: Dataset, snap: Snapshot, array: str) -> None:
    """Load G's index of ``array`` once per process (an index file is written once per
    build: its path names the build) and let ``ds`` use it."""
    summary = snap.header.arrays[array]
    key = (snap.header.dataset_id, summary["index"], summary["table"])
    ai = _indexes.get(key)
    if ai is None:
        ai = _indexes[key] = array_index(ds, array)
        while len(_indexes) > _INDEX_CACHE_SIZE:
            _indexes.popitem(last=False)
    else:
        _indexes.move_to_end(key)
        use_index(ds, ai)
