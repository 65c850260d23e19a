"""What every finalize worker is given, and how it reads the flat batches.

- `ArrayJob`: the part of a task all finalize workers share (the dataset's store
  description, layout, format and compression (of the flat batches, and of the chunk
  pieces: ``cell_compression``), the array's dims and chunk lengths, the
  coordinator's pid and the job's fault setting). Frozen and picklable: a worker gets
  paths and config, never an open handle.
- `WorkerTask`: the base of the scan, partition and build tasks (a job and a worker
  number; ``main_pid``/``fault`` for infra.proc.start_worker).
- `BatchReader`: opens the shards a worker reads on first use (read-only) and yields the
  records of one batch, decoded zero-copy (or into a given array) and checked against its
  manifest row; the pages are dropped from the worker's resident set after each batch.

Reads only: a worker that dies leaves nothing here to clean up.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property

from ..model.layouts import Layout
from ..model.manifest import BatchEntry
from ..serializers import get_serializer
from ..stores.spec import StoreSpec
from ..stores.values import ValueReader, read_batch


@dataclass(frozen=True)
class ArrayJob:
    store: StoreSpec
    layout: dict  # the dataset's layout (to_dict)
    format: str
    compression: str  # of the flat batches
    dims: tuple[str, str]
    chunks: tuple[int, int]
    main_pid: int = 0
    fault: str = ""
    cell_compression: str = "none"  # of the array's chunk pieces

    @cached_property
    def layout_obj(self) -> Layout:
        return Layout.from_dict(self.layout)

    def serializer(self):
        """The serializer of the flat batches."""
        return get_serializer(self.format, self.layout_obj, self.compression)

    def cell_serializer(self, cell: Layout):
        """The serializer of the array's chunk pieces (cells of layout ``cell``)."""
        return get_serializer(self.format, cell, self.cell_compression)


@dataclass(frozen=True)
class WorkerTask:
    job: ArrayJob
    worker: int

    @property
    def main_pid(self) -> int:
        return self.job.main_pid

    @property
    def fault(self) -> str:
        return self.job.fault


class BatchReader:
    """The flat batches of one job, read shard by shard (read-only handles, opened on
    first use, closed together)."""

    def __init__(self, job: ArrayJob):
        self.job = job
        self.ser = job.serializer()
        self.stores: dict = {}

    def shard(self, s: int):
        st = self.stores.get(s)
        if st is None:
            st = self.stores[s] = self.job.store.open_shard(s, write=False)
        return st

    @contextmanager
    def _value(self, b: BatchEntry, store=None):
        """The checked value of batch ``b`` (zero-copy: valid inside the block), read from
        its shard (or ``store``, an open handle of it); its pages are dropped after."""
        with ValueReader(self.shard(b.shard) if store is None else store, "batches") as rd:
            v = read_batch(rd, self.job.store, b)
            yield v
            rd.release(v)

    @contextmanager
    def records(self, b: BatchEntry, store=None):
        """The records of batch ``b`` (zero-copy: valid inside the block), read from its
        shard (or ``store``, an open handle of it)."""
        with self._value(b, store) as v:
            yield self.ser.decode(v)[1]

    def decode_into(self, b: BatchEntry, out) -> bool:
        """Decode batch ``b`` into ``out`` (an array of its records' count); False (``out``
        untouched) when the value holds another count."""
        with self._value(b) as v:
            return self.ser.decode_into(v, out) is not None

    def close(self) -> None:
        for st in self.stores.values():
            st.close()
        self.stores.clear()
