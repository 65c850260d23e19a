"""Documents (layout ``docs``) in a dataset: get by id, get_many, scan, verify, and the
coordinator's checks before and after a document load.

Where a document is: the manifest lists every committed keyed batch with its shard, its
table (``docs-RUNID``) and its id range ``lo..hi``. `DocIndex` finds the batches whose
range holds an id (one, unless loads interleave ids; then a few), and the shard answers
with one ``get`` (formats ``raw``, ``capnp``: one value per document) or one ``seek``
(format ``block``: the first block whose key, its last id, is >= the id; then the id is
looked up in the block, blocks.py). One-per-document values are
decompressed with the (shard, table)'s zstd dictionary from the shard's ``meta`` table
when the dataset stores zdict-compressed values (LMDB, mem), and decoded
(`values.decode_value`).

Reads only, but for `discard_run` (a failed run's documents dropped from every shard;
a shard it cannot open, or a crash meanwhile, is left to the next writer, which drops
the leftovers again).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import xxhash

from ..errors import CorruptBatchError, DuplicateIdError, NotFoundError, UsageError, VerifyError
from ..infra.checksums import CHANGED
from ..model import manifest as mf
from ..stores.health import batch_message
from ..stores.registry import open_writer
from . import zdict
from .batch import DocBatch, id_of_key, key_of, sort_by_id
from .blocks import BlockReader, block_first_id
from .json_dir import FileError, bad_file_error
from .layout import DOCS
from .tables import META_TABLE, drop_doc_table, keyed_span
from .values import decode_value

if TYPE_CHECKING:
    from .kind import DocsKind

MAX_ID = 2**64 - 1


def docs_kind(layout: object, fmt: str, compression: str) -> DocsKind:
    """The documents' record kind (kinds.kind_for's, typed as the documents' own)."""
    from .kind import DocsKind  # kind.py imports this module

    return DocsKind(layout, fmt, compression)


class Doc(NamedTuple):
    id: int
    created_at: int
    text: str


class DocIndex:
    """The committed keyed batches (with documents), sorted by their lowest id."""

    def __init__(self, batches: Iterable[mf.BatchEntry]):
        keyed = sorted(
            ((keyed_span(b), b) for b in batches if b.keyed and b.docs), key=lambda sb: (sb[0].lo, sb[1].seq)
        )
        self.batches = [b for _, b in keyed]
        self.los = [sp.lo for sp, _ in keyed]
        self.his = [sp.hi for sp, _ in keyed]
        self.maxhi: list[int] = []  # running max of hi: stops the backwards walk early
        m = -1
        for hi in self.his:
            m = max(m, hi)
            self.maxhi.append(m)

    def candidates(self, doc_id: int) -> list[mf.BatchEntry]:
        """Batches whose id range holds doc_id (newest first)."""
        out = []
        i = bisect.bisect_right(self.los, doc_id) - 1
        while i >= 0 and self.maxhi[i] >= doc_id:
            if self.his[i] >= doc_id:
                out.append(self.batches[i])
            i -= 1
        return out

    def overlapping(self, a: int, z: int) -> list[mf.BatchEntry]:
        """Batches whose id range meets a..z (inclusive), by lowest id."""
        j = bisect.bisect_right(self.los, z)
        return [b for b, hi in zip(self.batches[:j], self.his[:j]) if hi >= a]


class DocReader:
    """The read side of a documents dataset (used by `loader.read.dataset.Dataset`)."""

    def __init__(self, ds):
        self.ds = ds
        m = ds.manifest
        self.format = m.format
        kind = docs_kind(ds.layout, m.format, m.compression)
        self.zdict = kind.value_compression(m.scheme)
        self.blocks = BlockReader() if kind.blocks else None
        self.index = DocIndex(m.batches)
        self._dec: dict[tuple[int, str], object] = {}
        self._present: set[tuple[int, str]] = set()  # (shard, table) found in its store

    def _store(self, b: mf.BatchEntry):
        """The shard holding batch b, once its table is known to be there (a table of
        this snapshot that is gone: the dataset moved on, or a VerifyError)."""
        st = self.ds.shard(b.shard)
        table = keyed_span(b).table
        if (b.shard, table) not in self._present:
            if not st.has_table(table):
                raise self.ds.missing(
                    f"table {table} of batch {b.seq} is missing from shard {b.shard} of "
                    f"{self.ds.uri}; run `bulkload verify` and reload the dataset"
                )
            self._present.add((b.shard, table))
        return st

    def _decompressor(self, shard: int, table: str):
        key = (shard, table)
        d = self._dec.get(key)
        if d is None:
            v = self.ds.shard(shard).get(table.encode(), table=META_TABLE)
            if v is None:
                raise VerifyError(
                    f"shard {shard} of {self.ds.uri} has no zstd dictionary for {table}; "
                    "run `bulkload verify` and reload the dataset"
                )
            d = self._dec[key] = zdict.Decompressor(bytes(v))
        return d

    def decode(self, b: mf.BatchEntry, doc_id: int, value) -> tuple[int, int, bytes]:
        if self.zdict:
            value = self._decompressor(b.shard, keyed_span(b).table).decompress(value)
        return decode_value(value, self.format, doc_id)

    def _lookup(self, doc_id: int):
        candidates = self.index.candidates(doc_id)
        for b in candidates:
            try:
                got = self._lookup_in(b, doc_id)
            except VerifyError as e:  # a damaged value (e.g. its zstd frame checksum): which batch
                raise CorruptBatchError(batch_message(self.ds.uri, b, f"document {doc_id}: {e}")) from None
            if got is not None:
                return got
        if candidates:  # not found where it could be: is the table still ours?
            moved = self.ds.moved_on()
            if moved is not None:
                raise moved
        return None

    def _lookup_in(self, b: mf.BatchEntry, doc_id: int):
        """(id, created_at, text) of doc_id in batch b, or None. (A get does not check the
        batch's range checksum - that reads the whole batch; the block format's zstd frame
        has a checksum of the texts.)"""
        sp = keyed_span(b)
        if self.blocks is not None:
            item = self._store(b).seek(key_of(doc_id), table=sp.table)
            if item is not None and id_of_key(item[0]) <= sp.hi:
                got = self.blocks.find(item[1], doc_id)
                if got is not None:
                    return (doc_id, *got)
            return None
        v = self._store(b).get(key_of(doc_id), table=sp.table)
        return None if v is None else self.decode(b, doc_id, v)

    def batch_docs(self, b: mf.BatchEntry, lo: int, hi: int) -> DocBatch:
        """The documents of batch b with ids lo..hi (b.lo <= lo <= hi <= b.hi). When that
        is the whole batch, its items are checked against the manifest's range checksum
        first (CorruptBatchError naming shard and batch)."""
        shard = self._store(b)
        sp = keyed_span(b)
        whole = (lo, hi) == (sp.lo, sp.hi)
        if self.blocks is not None:
            items = list(blocks_from(shard, sp.table, lo, hi))
            if whole:
                self._check_range(b, items)
            parts = []
            for _k, v in items:
                d = self.blocks.decode(v)
                a, z = np.searchsorted(d.ids, np.uint64(lo)), np.searchsorted(d.ids, np.uint64(hi), side="right")
                parts.append(d.slice(int(a), int(z)))
            return DocBatch.concat(parts).compact()
        items = list(shard.range(key_of(lo), None if hi >= MAX_ID else key_of(hi + 1), table=sp.table))
        if whole:
            self._check_range(b, items)
        recs = []
        for k, v in items:
            i = id_of_key(k)
            _, c, t = self.decode(b, i, v)
            recs.append((i, c, t))
        return DocBatch.from_records(recs)

    def _check_range(self, b: mf.BatchEntry, items: list) -> None:
        """Raise CorruptBatchError unless the (key, value) items of a whole batch have the
        size and range checksum of its manifest row (tables.range_checksum)."""
        h = xxhash.xxh3_64()
        for k, v in items:
            h.update(k)
            h.update(v)
        nbytes = sum(len(v) for _k, v in items)
        if nbytes != b.nbytes or h.intdigest() != b.checksum:
            raise CorruptBatchError(batch_message(self.ds.uri, b, "stored bytes changed (checksum mismatch)"))

    # --- the API ----------------------------------------------------------------------
    def get(self, doc_id) -> Doc:
        doc_id = check_id(doc_id)
        got = self._lookup(doc_id)
        if got is None:
            raise NotFoundError(f"id {doc_id} not found")
        return Doc(doc_id, got[1], got[2].decode("utf-8"))

    def get_many(self, ids) -> tuple[DocBatch, list[int]]:
        found, missing = [], []
        for i in ids:
            i = check_id(i)
            got = self._lookup(i)
            if got is None:
                missing.append(i)
            else:
                found.append((i, got[1], got[2]))
        return DocBatch.from_records(found), missing

    def scan(self, start_id: int = 0, stop_id: int | None = None) -> DocBatch:
        a = check_id(start_id)
        stop = MAX_ID + 1 if stop_id is None else int(stop_id)
        if stop < a:
            raise UsageError(f"scan: stop id {stop} is below start id {a}")
        if stop == a:
            return DocBatch.empty()
        z = stop - 1
        spans = [(b, keyed_span(b)) for b in self.index.overlapping(a, z)]
        parts = [self.batch_docs(b, max(a, sp.lo), min(z, sp.hi)) for b, sp in spans]
        out = DocBatch.concat(parts)
        if len(parts) > 1:  # interleaved loads: restore id order
            out = sort_by_id(out)
        return out

    def verify_batch(self, b: mf.BatchEntry) -> str | None:
        """Why keyed batch b is not intact (count, size, checksum, decodable), or None."""
        if not b.docs:
            return None
        h = xxhash.xxh3_64()
        n = nbytes = 0
        err = None  # the first decoding failure (the checksum is still computed to the end)
        sp = keyed_span(b)
        for k, v in self.ds.shard(b.shard).range(
            key_of(sp.lo), None if sp.hi >= MAX_ID else key_of(sp.hi + 1), table=sp.table
        ):
            h.update(k)
            h.update(v)
            nbytes += len(v)
            n += self.blocks is None
            if err is None:
                try:
                    n += self._check_value(b, id_of_key(k), v)
                except Exception as e:
                    err = f"undecodable at document {n} of ids {b.lo}..{b.hi}: {e}"
        if n != b.docs and (err is None or self.blocks is None):
            return f"{n} documents stored under ids {b.lo}..{b.hi}, the manifest says {b.docs}"
        if nbytes != b.nbytes:
            return f"size {nbytes} != {b.nbytes} in the manifest (ids {b.lo}..{b.hi})"
        if h.intdigest() != b.checksum:
            return f"{CHANGED} in ids {b.lo}..{b.hi}" + (f"; {err}" if err else "")
        return err

    def _check_value(self, b: mf.BatchEntry, key_id: int, v) -> int:
        """Decode one stored value of batch b; the documents it adds to the count of a
        block format (0 for one value per document, counted by the caller)."""
        if self.blocks is None:
            self.decode(b, key_id, v)
            return 0
        d = self.blocks.decode(v)
        if not (keyed_span(b).lo <= int(d.ids[0]) and int(d.ids[-1]) == key_id):
            raise VerifyError(f"the block under key {key_id} holds ids {int(d.ids[0])}..{int(d.ids[-1])}")
        return len(d)


def blocks_from(store, table: str, lo: int, hi: int):
    """The blocks (key, value) of a table that hold ids >= lo, up to the one holding hi
    (or the last one with key <= hi), one seek each (no read-ahead of a whole range)."""
    at = lo
    while at <= hi:
        item = store.seek(key_of(at), table=table)
        if item is None:
            return
        last = id_of_key(item[0])
        if last > hi and block_first_id(item[1]) > hi:
            return
        yield item
        if last >= hi:
            return
        at = last + 1


def check_id(doc_id) -> int:
    """A document id as an int, or a UsageError saying why it is not one (0..2**64-1)."""
    try:
        i = int(doc_id)
    except (TypeError, ValueError):
        raise UsageError(f"document id {doc_id!r} is not an integer") from None
    if not 0 <= i <= MAX_ID:
        raise UsageError(f"document id {i} is out of range (ids are 0..{MAX_ID})")
    return i


# --- the coordinator's checks --------------------------------------------------------------


def stored_duplicates(spec, m: mf.Manifest, src, entries, skipped: list, on_bad_file: str, compare=None):
    """Refuse ids already stored in the dataset: per-file errors for a directory (fail:
    BadFileError; skip: the files are left out and listed), DuplicateIdError for a
    generator. ``entries``: the DirListing of a directory source, or None (a generator).
    Returns (entries, skipped).

    ``compare`` (ingest, ingest.py): instead of refusing them, the files of
    stored ids are handed to ``compare([(id, path)]) -> [FileError]``; the files it
    returns are bad files (fail / skip as above), the others are left out: already
    stored. Only the parts of the stored batches that hold ids of ``entries`` are read.
    """
    index = DocIndex(m.batches)
    if not index.batches:
        return entries, skipped
    if entries is not None:
        if not entries:
            return entries, skipped
        ids = entries.ids
        a, z = int(ids[0]), int(ids[-1])
    else:
        span = src.id_span()
        if span is None:
            return entries, skipped
        a, z = span
    dups: set[int] = set()
    for b in index.overlapping(a, z):
        sp = keyed_span(b)
        lo, hi = max(a, sp.lo), min(z, sp.hi)
        if entries is not None:  # narrow to the entries' ids in the batch's range (new ids: none)
            j = int(np.searchsorted(ids, np.uint64(lo)))
            jz = int(np.searchsorted(ids, np.uint64(hi), side="right"))
            if j == jz:
                continue
            lo, hi = int(ids[j]), int(ids[jz - 1])
        st = spec.open_shard(b.shard, write=False)
        try:
            if docs_kind(DOCS, m.format, m.compression).blocks:
                reader = BlockReader()
                stored = [
                    i
                    for _k, v in blocks_from(st, sp.table, lo, hi)
                    for i in reader.columns(v)[0].tolist()
                    if lo <= i <= hi
                ]
            else:
                stored = [
                    id_of_key(k)
                    for k, _ in st.range(key_of(lo), None if hi >= MAX_ID else key_of(hi + 1), table=sp.table)
                ]
        finally:
            st.close()
        if not stored:
            continue
        if entries is None:
            raise DuplicateIdError(
                f"{src.uri}: ids {a}..{z} overlap documents already stored in {spec.uri} (e.g. id "
                f"{stored[0]}); nothing was loaded - generate other ids (gen://docs?start=...) or "
                "start the dataset over with --replace"
            )
        s = np.asarray(stored, np.uint64)
        dups.update(s[np.isin(s, ids)].tolist())
    if not dups:
        return entries, skipped
    is_dup = np.isin(ids, np.fromiter(dups, np.uint64, len(dups)))
    found = [entries[j] for j in np.flatnonzero(is_dup).tolist()]
    if compare is None:
        errors = [
            FileError(p, f"duplicate id {i}: a document with this id is already stored in the dataset")
            for i, p in found
        ]
    else:
        errors = compare(found)
    if errors and on_bad_file == "fail":
        raise bad_file_error(errors)
    entries = entries.take(np.flatnonzero(~is_dup))
    return entries, sorted(skipped + [e.to_dict() for e in errors], key=lambda f: f["path"])


def discard_run(spec, k: int, table: str, clear_from: int = -1) -> None:
    """Drop a failed run's documents (its table and dictionary; in a table it shares with
    committed runs, its keys from clear_from on) from every shard."""
    for s in range(k):
        if not os.path.isdir(spec.shard_path(s)):
            continue
        try:
            st = open_writer(spec, s, dict(spec.options))
        except Exception:
            continue
        try:
            if table in st.tables():
                drop_doc_table(st, table, clear_from)
            st.sync()
        finally:
            st.close()
