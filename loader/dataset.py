"""Reading a dataset: `open(uri) -> Dataset`.

A Dataset is a snapshot: it reads the manifest once, so it sees exactly the batches
committed when it was opened, whatever a writer does meanwhile. Shards are opened
read-only and lazily (readers never block a writer). The reader pins the manifest's
generation until `close` (loader/snapshots.py): data that compact / finalize replace
stays on disk while a reader may need it (loader/garbage.py). When something the
snapshot names is gone anyway, the error says why: DatasetReplacedError (``load
--replace`` swapped in a new dataset), SnapshotExpiredError (an unpinned reader's data
was collected) - both mean "open it again" - or VerifyError (the store lost data: real
corruption). `verify` re-checks a dataset that moved on while it ran instead of
reporting its vanished data as corrupt.

Documents (layout ``docs``): `Dataset.get(id)` -> `Doc` (id, created_at, text str),
`get_many(ids)` -> (DocBatch of the found ones, in the order asked; missing ids),
`scan(start_id, stop_id)` -> DocBatch of ids in [start, stop) in id order
(``.to_arrow()`` for a pyarrow RecordBatch); see docs_access.py.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field
from typing import Iterator

import numpy as np
import xxhash

from . import manifest as mf
from .errors import UsageError
from .serializers import get_serializer
from .stores.base import ShardStore, parse_dataset_uri
from .workers import batch_key


@dataclass
class VerifyReport:
    dataset: str
    ok: bool
    batches: int
    records: int
    problems: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


#: times `verify` starts over on a dataset that moved on while it was verified
VERIFY_ATTEMPTS = 4


class Dataset:
    def __init__(self, uri: str, pin: bool = True):
        from .snapshots import read_snapshot

        self.spec = parse_dataset_uri(uri)
        self.uri = self.spec.uri
        self._opened_as = (uri, pin)
        self.manifest, self._ident, self._pin = read_snapshot(self.spec.root, uri, pin)
        self.layout = self.manifest.layout_obj
        self.serializer = (None if self.layout.variable_length  # documents: see docs_access.py
                           else get_serializer(self.manifest.format, self.layout, self.manifest.compression))
        self._shards: dict[int, ShardStore] = {}
        self._firsts = [b.first for b in self.manifest.batches]
        self._docs = None

    # --- handles -----------------------------------------------------------------
    def shard(self, i: int, random_reads: bool = False) -> ShardStore:
        """Shard i, opened read-only on first use; ``random_reads`` (chunk and document
        reads) turns OS readahead off when this call opens it."""
        st = self._shards.get(i)
        if st is None:
            opts = dict(self.spec.options)
            if (random_reads or self.layout.variable_length) and self.spec.scheme != "rocksdb":
                opts.setdefault("readahead", "0")
            st = self.spec.backend.open(self.spec.shard_path(i), write=False, options=opts)
            # after opening: if the manifest still names our dataset, the shard is ours
            # (`load --replace` swaps in a whole new directory; see replace.py)
            replaced = self._replaced()
            if replaced is not None:
                st.close()
                raise replaced
            self._shards[i] = st
        return st

    def _replaced(self):
        """DatasetReplacedError when ``load --replace`` swapped in another dataset, else None."""
        if mf.read_dataset_id(self.spec.root) == self.manifest.dataset_id:
            return None
        from .errors import DatasetReplacedError

        return DatasetReplacedError(f"dataset {self.uri} was replaced (load --replace) after it was "
                                    "opened; open it again to read the new content")

    @property
    def pinned(self) -> bool:
        """Whether this reader holds a pin on its snapshot (loader/snapshots.py)."""
        return self._pin is not None

    def moved_on(self):
        """Why data of this snapshot may be gone from the stores, as the error to raise
        (DatasetReplacedError, or SnapshotExpiredError for an unpinned reader after a
        manifest write), or None while the snapshot is whole."""
        from .snapshots import manifest_ident

        now = manifest_ident(self.spec.root)
        if now == self._ident:
            return None
        replaced = self._replaced()
        if replaced is not None:
            return replaced
        if self.pinned:  # the same dataset, our data pinned: remember this manifest as checked
            self._ident = now
            return None
        from .errors import SnapshotExpiredError

        return SnapshotExpiredError(f"dataset {self.uri} changed since this reader opened it (compact/finalize "
                                    "removed data of its snapshot); open it again")

    def missing(self, problem: str):
        """The error for data of this snapshot that a store does not have: the dataset
        moved on (see `moved_on`), or else a VerifyError saying ``problem``."""
        from .errors import VerifyError

        return self.moved_on() or VerifyError(problem)

    def close(self) -> None:
        for st in self._shards.values():
            st.close()
        self._shards.clear()
        if self._pin is not None:
            self._pin.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- metadata ----------------------------------------------------------------
    @property
    def records(self) -> int:
        return self.manifest.records

    def info(self) -> dict:
        m = self.manifest
        if self.layout.variable_length:
            text = sum(b.text_bytes or 0 for b in m.batches)
            return {
                "dataset": self.uri, "path": self.spec.root, "layout": m.layout, "record_size": "variable",
                "format": m.format, "compression": m.compression, "store": m.scheme, "shards": m.shards,
                "records": m.records, "batches": len(m.batches), "batch_records": m.batch_records,
                "record_bytes": text, "text_bytes": text, "stored_bytes": m.stored_bytes,
                "disk_bytes": sum(self.shard(i).nbytes() for i in range(m.shards)) if m.batches else 0,
                "runs": self._runs(), "arrays": m.arrays, "generation": m.generation, "garbage": m.garbage,
            }
        return {
            "dataset": self.uri,
            "path": self.spec.root,
            "layout": m.layout,
            "record_size": self.layout.record_size,
            "format": m.format,
            "compression": m.compression,
            "store": m.scheme,
            "shards": m.shards,
            "records": m.records,
            "batches": len(m.batches),
            "batch_records": m.batch_records,
            "record_bytes": m.records * self.layout.record_size,
            "stored_bytes": m.stored_bytes,
            "disk_bytes": sum(self.shard(i).nbytes() for i in range(m.shards)) if m.batches else 0,
            "runs": self._runs(),
            "arrays": m.arrays,
            "generation": m.generation,
            "garbage": m.garbage,
        }

    def _runs(self) -> list[dict]:
        from .lock import is_held
        from .runs import as_seen

        return as_seen(self.manifest, job_running=is_held(self.spec.root))

    # --- documents (layout docs) ----------------------------------------------------
    @property
    def docs(self):
        """The document reader (docs_access.DocReader); UsageError for fixed-size layouts."""
        if not self.layout.variable_length:
            raise UsageError(f"dataset {self.uri} holds fixed-size {self.layout.name} records, not documents; "
                             "use read_records / iter_batches")
        if self._docs is None:
            from .docs_access import DocReader

            self._docs = DocReader(self)
        return self._docs

    def get(self, doc_id: int):
        """The document with this id: Doc(id, created_at, text); NotFoundError "id N not found"."""
        return self.docs.get(doc_id)

    def get_many(self, ids):
        """(DocBatch of the documents found, in the order asked; list of the ids not found)."""
        return self.docs.get_many(ids)

    def scan(self, start_id: int = 0, stop_id: int | None = None):
        """Documents with start_id <= id < stop_id (None: to the end), in id order, as a
        DocBatch (``.to_arrow()`` gives a pyarrow RecordBatch: id, created_at, text)."""
        return self.docs.scan(start_id, stop_id)

    # --- reading -----------------------------------------------------------------
    def _fixed_only(self, what: str) -> None:
        if self.layout.variable_length:
            raise UsageError(f"{what} reads fixed-size records; dataset {self.uri} holds documents: "
                             "use get / get_many / scan")

    def _value(self, b: mf.BatchEntry):
        v = self.shard(b.shard).get(batch_key(b.seq))
        if v is None:
            raise self.missing(f"batch {b.seq} is missing from shard {b.shard} of {self.uri}; "
                               "run `bulkload verify` and reload the dataset")
        return v

    def _decode(self, b: mf.BatchEntry) -> np.ndarray:
        _, recs = self.serializer.decode(self._value(b))
        return recs

    def iter_batches(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first record index, records) of every committed batch, in record order."""
        self._fixed_only("iter_batches")
        for b in self.manifest.batches:
            yield b.first, self._decode(b)

    def read_records(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Records [start, stop) as a numpy structured array of the layout's dtype."""
        self._fixed_only("read_records")
        n = self.manifest.records
        stop = n if stop is None else stop
        if not (0 <= start <= stop <= n):
            raise UsageError(f"record range {start}:{stop} is outside 0:{n} of {self.uri}")
        out = np.empty(stop - start, dtype=self.layout.dtype)
        bs = self.manifest.batches
        i = max(0, bisect.bisect_right(self._firsts, start) - 1)
        pos = start
        while pos < stop:
            b = bs[i]
            recs = self._decode(b)
            lo, hi = pos - b.first, min(stop, b.first + b.count) - b.first
            out[pos - start: pos - start + hi - lo] = recs[lo:hi]
            pos += hi - lo
            i += 1
        return out

    def to_arrow(self):
        import pyarrow as pa

        if self.layout.variable_length:
            return pa.Table.from_batches([self.scan().to_arrow()])
        schema = self.layout.arrow_schema
        tables = [records_to_arrow(recs, schema) for _, recs in self.iter_batches()]
        return pa.concat_tables(tables) if tables else schema.empty_table()

    # --- 2-D arrays (see redimension.py, query.py) ---------------------------------------
    def arrays(self) -> list[dict]:
        """The 2-D arrays of this dataset: dims, chunking, bounds, cell counts."""
        from .query import list_arrays

        return list_arrays(self)

    def read_box(self, array: str = "grid", attrs: list[str] | None = None, **ranges):
        """Cells of ``array`` inside the half-open box, e.g. ``read_box(i0=(2, 5), i1=(0, 100))``,
        as a pyarrow.Table: dimension columns, then attributes, in row-major cell order."""
        from .query import read_box

        return read_box(self, array, attrs, ranges)

    # --- verification --------------------------------------------------------------
    def verify(self) -> VerifyReport:
        """Recompute every batch's checksum and count; list what does not match.

        Problems are reported only when this snapshot is still whole: when the dataset
        moved on while it was checked (replaced, or an unpinned reader's data collected),
        the dataset as it is now is verified again (a few times, then the "open it
        again" error is raised) - a healthy dataset is never reported corrupt."""
        from .errors import DatasetReplacedError

        ds = self
        try:
            for _ in range(VERIFY_ATTEMPTS):
                try:
                    report = ds._verify_snapshot()
                    moved = None if report.ok else ds.moved_on()
                except DatasetReplacedError as e:
                    moved = e
                if moved is None:
                    return report
                if ds is not self:
                    ds.close()
                ds = Dataset(*self._opened_as)
            raise moved
        finally:
            if ds is not self:
                ds.close()

    def _verify_snapshot(self) -> VerifyReport:
        problems = []
        for b in self.manifest.batches:
            where = {"shard": b.shard, "batch": b.seq, "first_record": b.first}
            if b.keyed:
                try:
                    problem = self.docs.verify_batch(b)
                except Exception as e:  # noqa: BLE001 - e.g. a shard that cannot be opened
                    problem = f"unreadable: {e}"
                if problem is not None:
                    problems.append({**where, "ids": [b.lo, b.hi], "problem": problem})
                continue
            v = self.shard(b.shard).get(batch_key(b.seq))
            if v is None:
                problems.append({**where, "problem": "missing from the store"})
                continue
            v = bytes(v)
            if len(v) != b.nbytes:
                problems.append({**where, "problem": f"size {len(v)} != {b.nbytes} in the manifest"})
                continue
            if xxhash.xxh3_64_intdigest(v) != b.checksum:
                problems.append({**where, "problem": "checksum mismatch (stored bytes changed)"})
                continue
            try:
                start, recs = self.serializer.decode(v)
            except Exception as e:
                problems.append({**where, "problem": f"undecodable: {e}"})
                continue
            if len(recs) != b.count or start != b.first:
                problems.append({**where, "problem": f"holds {len(recs)} records from {start}, "
                                                     f"manifest says {b.count} from {b.first}"})
        if self.manifest.arrays:
            from .redimension import verify_arrays

            problems.extend(verify_arrays(self))
        return VerifyReport(self.uri, not problems, len(self.manifest.batches), self.manifest.records,
                            problems)


def records_to_arrow(recs: np.ndarray, schema):
    import pyarrow as pa

    return pa.Table.from_arrays([pa.array(recs[name]) for name in schema.names], schema=schema)


def open(uri: str, pin: bool = True) -> Dataset:  # noqa: A001 - the public API is loader.open
    """A snapshot reader of the dataset at ``uri`` (close it, or use ``with``). ``pin=False``
    reads without pinning the snapshot: a compaction may then remove its data (reads
    raise SnapshotExpiredError), but the reader never holds garbage back."""
    return Dataset(uri, pin)
