"""Reading a dataset: `open(uri) -> Dataset`.

A Dataset is a snapshot: it reads the manifest once, so it sees exactly the batches
committed when it was opened, whatever a writer does meanwhile. Shards are opened
read-only and lazily (readers never block a writer).

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


class Dataset:
    def __init__(self, uri: str):
        self.spec = parse_dataset_uri(uri)
        self.uri = self.spec.uri
        self.manifest = mf.load_manifest(self.spec.root, uri)
        self.layout = self.manifest.layout_obj
        self.serializer = (None if self.layout.variable_length  # documents: see docs_access.py
                           else get_serializer(self.manifest.format, self.layout, self.manifest.compression))
        self._shards: dict[int, ShardStore] = {}
        self._firsts = [b.first for b in self.manifest.batches]
        self._docs = None

    # --- handles -----------------------------------------------------------------
    def shard(self, i: int) -> ShardStore:
        st = self._shards.get(i)
        if st is None:
            opts = dict(self.spec.options)
            if self.layout.variable_length and self.spec.scheme != "rocksdb":
                opts.setdefault("readahead", "0")  # documents are read by id: random reads
            st = self.spec.backend.open(self.spec.shard_path(i), write=False, options=opts)
            # after opening: if the manifest still names our dataset, the shard is ours
            # (`load --replace` swaps in a whole new directory; see replace.py)
            if mf.read_dataset_id(self.spec.root) != self.manifest.dataset_id:
                st.close()
                from .errors import DatasetReplacedError

                raise DatasetReplacedError(f"dataset {self.uri} was replaced (load --replace) after it was "
                                           "opened; open it again to read the new content")
            self._shards[i] = st
        return st

    def close(self) -> None:
        for st in self._shards.values():
            st.close()
        self._shards.clear()

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
                "runs": m.runs, "arrays": m.arrays,
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
            "runs": m.runs,
            "arrays": m.arrays,
        }

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
            from .errors import VerifyError

            raise VerifyError(f"batch {b.seq} is missing from shard {b.shard} of {self.uri}; "
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
        """Recompute every batch's checksum and count; list what does not match."""
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


def open(uri: str) -> Dataset:  # noqa: A001 - the public API is loader.open
    return Dataset(uri)
