"""A whole in-memory object as a source: the workers read its records, split like a file.

``loader.load(obj, DATASET)`` with a numpy structured array, a pandas DataFrame or a
pyarrow Table / RecordBatch (memory.py says what each must hold). The object lives in the
coordinator and is never pickled to the workers (forkserver processes): planning
(`MemorySource.plan`) checks it against the layout - a DataFrame or table is converted
then, column by column, so a bad column fails before anything is written - and each
worker reads its own batches' bytes (`SharedSource.fill`), as from a file of raw records:

- from the coordinator's memory itself (`CoordinatorMemory`: process_vm_readv, see
  infra/procmem.py): one copy per byte, no second copy of the array. Used when the
  kernel lets workers do it (found out once per process by a probe);
- else from a shared copy (`SharedRecords`): an anonymous shared file (``memfd_create``,
  as loading/stream.py's slots: no name in /dev/shm, nothing left by any crash) that a
  coordinator thread fills while the workers start and load; the first word of its
  header page counts the bytes written, and a worker waits until its batch's are there.
  The load then holds a second copy of the records until it ends.

Not recognised again: hashing every byte of the object would cost a pass over it, so its
fingerprint is None and every load of it is a new run (never "already loaded", never
resumed; an interrupted one is superseded by the next).

Crash behaviour: `close` (load's end, whatever the outcome) stops the copy and frees what
the coordinator holds; a failed copy (out of memory) marks the header and a worker waiting
for those bytes fails with the reason; a worker whose coordinator died exits
(infra/proc.py). Either way nothing of the run is committed.
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass
from multiprocessing import reduction

import numpy as np

from ..errors import InputError
from ..infra import procmem
from ..infra.threads import TaskThread
from ..model.layouts import Layout
from .base import ObjectAdapter, Source, SourcePlan, register_object_source
from .memory import check_array, convert_into, is_array, is_block, layout_of, record_count, type_name

HEADER = 4096  # the header page of a shared copy: [0] bytes of records written, [1] state
COPYING, DONE, FAILED = 0, 1, 2
CHUNK = 8 << 20  # bytes per write of the copy thread
WAIT_S = 0.0005  # a waiting worker looks at the header this often


@dataclass(frozen=True)
class CoordinatorMemory:
    """Records at ``address`` in the coordinator (``pid``): plain numbers, read in place."""

    pid: int
    address: int
    nbytes: int

    def read(self, view: np.ndarray, offset: int, what: str) -> None:
        """Fill ``view`` (bytes) with the record bytes at ``offset``."""
        try:
            procmem.read_from(self.pid, self.address + offset, view.ctypes.data, view.nbytes)
        except OSError as e:
            raise InputError(
                f"{what}: cannot read the records from the loading process ({e.strerror}); "
                "nothing from this run was committed"
            ) from None


class SharedRecords:
    """``nbytes`` of records in a memfd after a header page; pickled into a worker's task,
    it travels as a file descriptor (``multiprocessing.reduction.DupFd``), never as bytes."""

    def __init__(self, nbytes: int, fd: int | None = None):
        if fd is None:
            fd = os.memfd_create("bulkload-records", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, HEADER + nbytes)
            except OSError:
                os.close(fd)
                raise
        self.fd, self.nbytes = fd, nbytes
        self.header = mmap.mmap(fd, HEADER)
        self.words = memoryview(self.header).cast("Q")  # aligned 8-byte loads and stores
        self.copier: TaskThread | None = None
        self.stopped = False  # a flag, no Python-level lock: close() may run as a stop signal lands

    def copy_in_background(self, records: np.ndarray) -> None:
        """Copy ``records`` (C-contiguous) into the file in a coordinator thread, in order."""
        self.copier = TaskThread(self._copy, records.reshape(-1).view(np.uint8))
        self.copier.start()

    def _copy(self, raw: np.ndarray) -> None:
        try:
            done = 0
            while done < self.nbytes and not self.stopped:
                done += os.pwrite(self.fd, raw[done : done + CHUNK].data, HEADER + done)
                self.words[0] = done
            self.words[1] = DONE
        except BaseException:  # ENOMEM / ENOSPC of the shared memory; anything else: the readers must not wait on
            self.words[1] = FAILED

    def close(self) -> None:
        """Stop the copy and drop the coordinator's hold on the file."""
        self.stopped = True
        if self.copier is not None:
            self.copier.ended(None)
        self.words.release()
        self.header.close()
        os.close(self.fd)

    def __reduce__(self):
        return _attach, (reduction.DupFd(self.fd), self.nbytes)

    def read(self, view: np.ndarray, offset: int, what: str) -> None:
        """(A worker) fill ``view`` with the record bytes at ``offset``, once they are written."""
        end = offset + view.nbytes
        while self.words[0] < end:
            if self.words[1] == FAILED:
                raise InputError(
                    f"{what}: copying the records into shared memory failed (out of memory?); "
                    "nothing from this run was committed - free memory and load again"
                )
            time.sleep(WAIT_S)
        got = 0
        while got < view.nbytes:
            got += os.preadv(self.fd, [view[got:].data], HEADER + offset + got)


def _attach(dup, nbytes: int) -> SharedRecords:
    return SharedRecords(nbytes, fd=dup.detach())


@dataclass(frozen=True)
class SharedSource(Source):
    """What the workers of a `MemorySource`'s run read (`CoordinatorMemory` or `SharedRecords`)."""

    records: CoordinatorMemory | SharedRecords
    label: str  # the URI of the object it came from
    n: int
    local_only = True  # read from the coordinator's memory (or a memfd of this host)

    @property
    def uri(self) -> str:
        return self.label

    def count(self, layout: Layout) -> int:
        return self.n

    def fingerprint(self, layout: Layout) -> None:
        return None

    def fill(self, records: np.ndarray, offset: int) -> None:
        self.records.read(records.reshape(-1).view(np.uint8), offset * records.dtype.itemsize, self.label)


class MemorySource(Source):
    """A whole numpy array, DataFrame or Arrow Table / RecordBatch given to load (the
    coordinator's side: see the module docstring)."""

    local_only = True

    def __init__(self, obj):
        self.obj, self.n = obj, record_count(obj)
        self.records: np.ndarray | None = None  # the records the workers read, held until close
        self.reader: CoordinatorMemory | SharedRecords | None = None
        self.release = None  # ends the workers' permission to read this process

    @property
    def uri(self) -> str:
        return f"python://{type_name(self.obj)}?n={self.n}"

    def inferred_layout(self) -> Layout:
        return layout_of(self.obj, self.uri)

    def plan(self, layout: Layout) -> SourcePlan:
        """Check (convert) the object as records of ``layout`` and share them."""
        self.records = self._records(layout)
        self.release = procmem.allow_descendants()
        if procmem.workers_can_read():
            self.reader = CoordinatorMemory(os.getpid(), self.records.ctypes.data, self.records.nbytes)
        else:
            self._release()
            self.reader = SharedRecords(self.records.nbytes)
            self.reader.copy_in_background(self.records)
        return SourcePlan(self, self.n, None)

    def _records(self, layout: Layout) -> np.ndarray:
        """The object's records, C-contiguous: the array itself when it is, else a copy."""
        obj, what = self.obj, self.uri
        if is_array(obj):
            check_array(obj, layout, what)
            return np.ascontiguousarray(obj.reshape(-1))
        out = np.empty(self.n, dtype=layout.dtype)
        convert_into(out, obj, layout, what)
        return out

    def count(self, layout: Layout) -> int:
        return self.n

    def fingerprint(self, layout: Layout) -> None:
        return None

    def for_run(self, root: str, run_id: str, entries: object) -> SharedSource:
        assert self.reader is not None, "a run's source is made once its run planned it"
        return SharedSource(self.reader, self.uri, self.n)

    def close(self) -> None:
        if isinstance(self.reader, SharedRecords):
            self.reader.close()
        self._release()
        self.reader = self.records = None

    def _release(self) -> None:
        if self.release is not None:
            self.release()
            self.release = None


register_object_source(ObjectAdapter(is_block, MemorySource))
