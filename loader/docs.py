"""The ``docs`` layout: variable-length keyed records (documents).

A document is ``(id, created_at, text)``: ``id`` a uint64 that is its key, ``created_at``
an int64 epoch second, ``text`` UTF-8 of any length. Unlike the fixed-size layouts of
`loader.layouts`, a batch of documents is held column-wise, Arrow style, in a `DocBatch`:
numpy arrays ``ids`` (uint64), ``created_at`` (int64), and all the texts in one uint8
buffer ``text`` with int64 ``offsets`` (n + 1 of them; document i is
``text[offsets[i]:offsets[i+1]]``). Nothing in the hot paths makes a Python object per
document except where a store API needs one value per key.

This module holds the self-contained parts; wiring them into the pipeline (keyed mode in
the workers, manifest and verify; ``gen://docs``; the directory source; ``bulkload get``)
is separate.

Generator
---------
`generate_docs(seed, start, n)` returns documents ``start .. start+n-1``: id = the record
index, text of uniformly random length 0..2000 (inclusive) whose characters are uniform
over the 95 printable ASCII characters 32..126, created_at uniform in
[2015-01-01, 2026-01-01) UTC. The output does not depend on how [0, N) is split into
ranges: randomness is counter-based per block of `BLOCK_RECORDS` records (block b of
seed S draws from ``Generator(SFC64(SeedSequence([S, b])))``: the lengths, then the
created_at values, then the characters); a range is cut from whole blocks. Characters
are exact: uint32 words are rejection-sampled below 52 * 95**4 (98.6 % accepted) and
each accepted word gives 4 base-95 digits.

Values (one per document, under the 8-byte big-endian id)
----------------------------------------------------------
``capnp``: a standard single-segment Cap'n Proto message whose root is ``Doc`` of
schemas/docs.capnp, written by framing. With L = len(text)::

    offset  bytes  what
         0      4  segment count - 1 = 0                       (u32 little-endian)
         4      4  segment size in words = 4 + ceil((L+1)/8)  (u32)
         8      8  root struct pointer: offset 0, 2 data words, 1 pointer
        16      8  Doc.id (u64)
        24      8  Doc.createdAt (i64)
        32      8  text list pointer: offset 0, element size 2 (byte), L+1 elements
        40      L  the text, then a NUL, then zeros to a multiple of 8 bytes

`decode_doc_capnp` reads that fast and follows pointers otherwise, so it also reads
messages built by pycapnp (any segment count, far pointers).

``raw``: 8 bytes created_at (i64 little-endian), then the text. The id is the key.

JSON directory source
---------------------
`scan_json_dir` lists the files ``<id>.json`` of a directory, sorted by id;
`parse_json_files` reads them (orjson) into a DocBatch. A document file holds exactly
``{"text": "...", "created_at": 1727290164}``. Every bad file becomes a `FileError`
(path and reason): with ``on_bad_file="fail"`` the first one raises `BadFileError`,
with ``"skip"`` they are returned for the run report.
"""

from __future__ import annotations

import functools
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .errors import BadFileError, UsageError, VerifyError  # noqa: F401 (BadFileError re-exported)

# --- the layout -------------------------------------------------------------------

#: (name, type, meaning) of the fields of a document, in order. ``id`` is the key.
DOCS_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("id", "uint64", "the document's unique id; the key, stored as 8 bytes big-endian"),
    ("created_at", "int64", "creation time, seconds since the Unix epoch"),
    ("text", "utf8", "the document's text, UTF-8, any length"),
)

#: Value formats of a stored document.
VALUE_FORMATS = ("capnp", "raw")


@dataclass(frozen=True)
class DocsLayout:
    """The variable-length layout ``docs`` (a counterpart of `loader.layouts.Layout`)."""

    name: str = "docs"
    fields: tuple[tuple[str, str, str], ...] = DOCS_FIELDS
    key_field: str = "id"
    description: str = "documents: uint64 id (the key), int64 created_at, UTF-8 text"

    #: there is no fixed record size: documents are stored one value per key
    variable_length = True

    @property
    def names(self) -> list[str]:
        return [f[0] for f in self.fields]

    @functools.cached_property
    def arrow_schema(self):
        import pyarrow as pa

        return pa.schema(
            [
                pa.field("id", pa.uint64(), nullable=False),
                pa.field("created_at", pa.int64(), nullable=False),
                pa.field("text", pa.string(), nullable=False),
            ],
            metadata={"bulkload.layout": self.name},
        )

    def field(self, name: str):
        """Fixed-size record fields only: what needs them (finalize's dims) is refused here."""
        raise UsageError(f"layout docs holds documents (variable-length, keyed by id), not fixed-size "
                         f"records: field {name!r} cannot be used here (finalize, compact and "
                         "redimension work on fixed-size layouts); read documents with get / scan")

    def capnp_module(self):
        """The pycapnp module of schemas/docs.capnp (has ``.Doc``)."""
        return capnp_module()

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "fields": [[n, t] for n, t, _ in self.fields],
            "key": self.key_field,
            "variable_length": True,
        }


DOCS = DocsLayout()


@functools.lru_cache(maxsize=None)
def capnp_module():
    """Load the shipped schemas/docs.capnp (explicit path, no imports; once per process)."""
    import capnp

    from .layouts import builtin_schema_dir

    return capnp.load(str(builtin_schema_dir() / "docs.capnp"), imports=[])


# --- DocBatch --------------------------------------------------------------------

_EMPTY_U8 = np.zeros(0, np.uint8)


@dataclass(eq=False)
class DocBatch:
    """Documents column-wise: ``ids`` uint64, ``created_at`` int64, ``offsets`` int64
    (len n + 1, offsets[0] may be > 0 for a slice) into the uint8 buffer ``text``."""

    ids: np.ndarray
    created_at: np.ndarray
    offsets: np.ndarray
    text: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.ids)
        if len(self.created_at) != n or len(self.offsets) != n + 1:
            raise ValueError(
                f"DocBatch: {n} ids, {len(self.created_at)} created_at, "
                f"{len(self.offsets)} offsets (need n + 1)"
            )

    # construction ---------------------------------------------------------------
    @classmethod
    def empty(cls) -> "DocBatch":
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(1, np.int64), _EMPTY_U8)

    @classmethod
    def from_records(cls, records: Iterable[tuple[int, int, bytes]]) -> "DocBatch":
        """From (id, created_at, text bytes) tuples (tests, small inputs)."""
        ids, cas, texts = [], [], []
        for i, c, t in records:
            ids.append(i)
            cas.append(c)
            texts.append(bytes(t))
        return cls._from_lists(ids, cas, texts)

    @classmethod
    def _from_lists(cls, ids: list, cas: list, texts: list[bytes]) -> "DocBatch":
        lengths = np.fromiter(map(len, texts), np.int64, len(texts))
        offsets = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(
            np.array(ids, dtype=np.uint64),
            np.array(cas, dtype=np.int64),
            offsets,
            np.frombuffer(b"".join(texts), np.uint8),
        )

    @classmethod
    def concat(cls, batches: Sequence["DocBatch"]) -> "DocBatch":
        batches = [b for b in batches if len(b)]
        if not batches:
            return cls.empty()
        if len(batches) == 1:
            return batches[0]
        offsets = [np.zeros(1, np.int64)]
        base = 0
        for b in batches:
            offsets.append(b.offsets[1:] - b.offsets[0] + base)
            base += b.text_nbytes
        return cls(
            np.concatenate([b.ids for b in batches]),
            np.concatenate([b.created_at for b in batches]),
            np.concatenate(offsets),
            np.concatenate([b.text[b.offsets[0]:b.offsets[-1]] for b in batches]),
        )

    # access -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def text_nbytes(self) -> int:
        return int(self.offsets[-1] - self.offsets[0])

    def text_of(self, i: int) -> bytes:
        return self.text[self.offsets[i]:self.offsets[i + 1]].tobytes()

    def texts(self) -> list[bytes]:
        buf = self.text.tobytes() if len(self.text) else b""
        o = self.offsets.tolist()
        return [buf[o[i]:o[i + 1]] for i in range(len(self))]

    def records(self) -> list[tuple[int, int, bytes]]:
        return list(zip(self.ids.tolist(), self.created_at.tolist(), self.texts()))

    def slice(self, a: int, b: int) -> "DocBatch":
        """Documents a..b-1 (views, no copy)."""
        return DocBatch(self.ids[a:b], self.created_at[a:b], self.offsets[a:b + 1], self.text)

    def take(self, idx: np.ndarray) -> "DocBatch":
        """Documents in the order of the index array idx (copies)."""
        idx = np.asarray(idx, dtype=np.intp)
        lengths = self.lengths[idx]
        offsets = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        starts = self.offsets[:-1][idx]
        buf = memoryview(self.text)
        text = np.frombuffer(b"".join([buf[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist())]), np.uint8)
        return DocBatch(self.ids[idx], self.created_at[idx], offsets, text)

    def compact(self) -> "DocBatch":
        """The same documents with offsets starting at 0 and a text buffer of just them."""
        if self.offsets[0] == 0 and len(self.text) == self.offsets[-1]:
            return self
        return DocBatch(self.ids, self.created_at, self.offsets - self.offsets[0],
                        self.text[self.offsets[0]:self.offsets[-1]].copy())

    def equals(self, other: "DocBatch") -> bool:
        a, b = self.compact(), other.compact()
        return (
            np.array_equal(a.ids, b.ids)
            and np.array_equal(a.created_at, b.created_at)
            and np.array_equal(a.offsets, b.offsets)
            and np.array_equal(a.text, b.text)
        )

    # Arrow ---------------------------------------------------------------------------
    def to_arrow(self):
        """A pyarrow RecordBatch with DOCS.arrow_schema (zero-copy for ids/created_at)."""
        import pyarrow as pa

        c = self.compact()
        if c.text_nbytes > 2**31 - 1:
            raise UsageError(f"{c.text_nbytes} bytes of text do not fit one Arrow string column; "
                             "split the batch")
        text = pa.Array.from_buffers(
            pa.string(), len(c), [None, pa.py_buffer(c.offsets.astype(np.int32)), pa.py_buffer(c.text)]
        )
        return pa.RecordBatch.from_arrays(
            [pa.array(c.ids, pa.uint64()), pa.array(c.created_at, pa.int64()), text],
            schema=DOCS.arrow_schema,
        )

    @classmethod
    def from_arrow(cls, rb) -> "DocBatch":
        import pyarrow as pa

        text = rb.column("text")
        if text.type != pa.large_string():
            text = text.cast(pa.large_string())
        _, off_buf, data_buf = text.buffers()
        offsets = np.frombuffer(off_buf, np.int64, len(text) + 1, text.offset * 8)
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else _EMPTY_U8
        return cls(
            rb.column("id").to_numpy().astype(np.uint64, copy=False),
            rb.column("created_at").to_numpy().astype(np.int64, copy=False),
            offsets.copy(),
            data,
        ).compact()


# --- the generator ------------------------------------------------------------------

#: Records per unit of counter-based randomness (changing it changes every output).
BLOCK_RECORDS = 256
TEXT_MAX = 2000
#: created_at is uniform in [CREATED_MIN, CREATED_MAX): 2015-01-01 .. 2026-01-01 UTC
CREATED_MIN = 1420070400
CREATED_MAX = 1767225600

_P2 = 95 * 95
_P4 = _P2 * _P2
_WORD_LIMIT = 52 * _P4  # largest multiple of 95**4 below 2**32
_INV2 = 1.0 / _P2
_INV4 = 1.0 / _P4
# two characters per entry: low byte = first character (little-endian uint16)
_PAIRS = ((np.arange(_P2) // 95 + 32) | ((np.arange(_P2) % 95 + 32) << 8)).astype("<u2")


def _block_rng(seed: int, block: int) -> np.random.Generator:
    return np.random.Generator(np.random.SFC64(np.random.SeedSequence([seed, block])))


def _printable(rng: np.random.Generator, n: int) -> np.ndarray:
    """n characters, exactly uniform over 32..126 (uint8)."""
    m = (n + 3) // 4
    extra = m // 50 + 64
    w = np.frombuffer(rng.bytes((m + extra) * 4), "<u4")
    w = w[w < _WORD_LIMIT]
    while len(w) < m:
        more = np.frombuffer(rng.bytes(extra * 4), "<u4")
        w = np.concatenate([w, more[more < _WORD_LIMIT]])
    f = w[:m].astype(np.float64)
    # exact floor division of integers < 2**32 in float64: (x + 0.5) / d is never
    # within rounding error of an integer
    f -= np.floor((f + 0.5) * _INV4) * _P4
    hi = np.floor((f + 0.5) * _INV2)
    f -= hi * _P2
    out = np.empty((m, 2), "<u2")
    np.take(_PAIRS, hi.astype(np.intp), out=out[:, 0])
    np.take(_PAIRS, f.astype(np.intp), out=out[:, 1])
    return out.view(np.uint8).reshape(-1)[:n]


def _block(seed: int, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = _block_rng(seed, block)
    lengths = rng.integers(0, TEXT_MAX + 1, BLOCK_RECORDS, dtype=np.int64)
    created = rng.integers(CREATED_MIN, CREATED_MAX, BLOCK_RECORDS, dtype=np.int64)
    return lengths, created, _printable(rng, int(lengths.sum()))


def generate_docs(seed: int, start: int, n: int) -> DocBatch:
    """Documents start..start+n-1 of the deterministic stream `seed` (see module doc)."""
    seed, start, n = int(seed), int(start), int(n)
    if seed < 0 or start < 0 or n < 0:
        raise UsageError(f"generate_docs: seed, start and n must be >= 0 (got {seed}, {start}, {n})")
    if n == 0:
        return DocBatch.empty()
    if start + n > 2**64:
        raise UsageError(f"generate_docs: ids {start}..{start + n - 1} exceed uint64")
    b0, b1 = start // BLOCK_RECORDS, (start + n - 1) // BLOCK_RECORDS
    lens, cas, texts = [], [], []
    for b in range(b0, b1 + 1):
        lengths, created, chars = _block(seed, b)
        lo = start - b * BLOCK_RECORDS if b == b0 else 0
        hi = start + n - b * BLOCK_RECORDS if b == b1 else BLOCK_RECORDS
        if lo or hi != BLOCK_RECORDS:
            c0 = int(lengths[:lo].sum())
            c1 = c0 + int(lengths[lo:hi].sum())
            chars = chars[c0:c1]
        lens.append(lengths[lo:hi])
        cas.append(created[lo:hi])
        texts.append(chars)
    lengths = np.concatenate(lens)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return DocBatch(
        np.arange(start, start + n, dtype=np.uint64),
        np.concatenate(cas),
        offsets,
        np.concatenate(texts) if len(texts) > 1 else texts[0].copy(),
    )


# --- keys ----------------------------------------------------------------------------

KEY_BYTES = 8


def key_of(doc_id: int) -> bytes:
    """The store key of a document id: 8 bytes big-endian (byte order = numeric order)."""
    return int(doc_id).to_bytes(8, "big")


def id_of_key(key) -> int:
    if len(key) != 8:
        raise VerifyError(f"document key of {len(key)} bytes (expected 8)")
    return int.from_bytes(key, "big")


def keys_of(ids: np.ndarray) -> list[bytes]:
    """Keys of many ids (one bytes object each, as store APIs want)."""
    buf = np.asarray(ids, dtype=">u8").tobytes()
    return [buf[i:i + 8] for i in range(0, len(buf), 8)]


def sort_by_id(batch: DocBatch) -> DocBatch:
    """The batch in ascending id order (stable; the batch itself when already sorted)."""
    ids = batch.ids
    if len(ids) < 2 or bool(np.all(ids[1:] >= ids[:-1])):
        return batch
    return batch.take(np.argsort(ids, kind="stable"))


def duplicate_ids(sorted_ids: np.ndarray) -> np.ndarray:
    """The ids that occur more than once in an ascending id array."""
    if len(sorted_ids) < 2:
        return sorted_ids[:0]
    return np.unique(sorted_ids[1:][sorted_ids[1:] == sorted_ids[:-1]])


# --- values: Cap'n Proto Doc and raw ------------------------------------------------------

CAPNP_HEADER_BYTES = 40
MAX_TEXT_BYTES = 2**29 - 2  # a Cap'n Proto list holds < 2**29 elements (text + NUL)
_ROOT_PTR = (2 << 32) | (1 << 48)  # struct pointer, offset 0, 2 data words, 1 pointer
_TEXT_PTR_LOW = 1 | (2 << 32)  # list pointer, offset 0, element size 2 (byte)
_CAPNP_HDR = struct.Struct("<IIQQqQ")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")


def _pad8(n):
    return (n + 7) & ~7


def capnp_value_size(text_len: int) -> int:
    return CAPNP_HEADER_BYTES + _pad8(text_len + 1)


def encode_doc_capnp(doc_id: int, created_at: int, text) -> bytes:
    """One Doc message (see the module doc for the bytes); text is UTF-8 bytes."""
    n = len(text)
    if n > MAX_TEXT_BYTES:
        raise UsageError(f"document {doc_id}: text of {n} bytes is over the Cap'n Proto limit "
                         f"({MAX_TEXT_BYTES}); use raw values")
    body = _pad8(n + 1)
    return b"".join((
        _CAPNP_HDR.pack(0, 4 + body // 8, _ROOT_PTR, doc_id, created_at, _TEXT_PTR_LOW | ((n + 1) << 35)),
        text,
        bytes(body - n),
    ))


def _corrupt(msg: str) -> VerifyError:
    return VerifyError(f"corrupt Cap'n Proto Doc value: {msg}")


def decode_doc_capnp(value) -> tuple[int, int, bytes]:
    """(id, created_at, text bytes) of a Doc message (ours or any pycapnp-built one)."""
    mv = memoryview(value)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    size = len(mv)
    if size >= CAPNP_HEADER_BYTES:
        nseg, words, root, doc_id, created, tptr = _CAPNP_HDR.unpack_from(mv, 0)
        if (nseg == 0 and root == _ROOT_PTR and 8 + words * 8 == size
                and tptr & 0x7FFFFFFFF == _TEXT_PTR_LOW):
            count = tptr >> 35
            if count and CAPNP_HEADER_BYTES + count <= size and mv[CAPNP_HEADER_BYTES + count - 1] == 0:
                return doc_id, created, mv[CAPNP_HEADER_BYTES:CAPNP_HEADER_BYTES + count - 1].tobytes()
    return _decode_doc_general(mv)


def _decode_doc_general(mv: memoryview) -> tuple[int, int, bytes]:
    from .serializers.capnp_framing import _Message  # pointer-following reader

    try:
        msg = _Message(mv)
    except VerifyError as e:
        raise _corrupt(str(e).split(": ", 1)[-1]) from None
    root = msg.follow(0, 0, "root pointer")
    if root is None:
        return 0, 0, b""
    p, seg, idx = root
    if p & 3 != 0:
        raise _corrupt("root pointer is not a struct pointer")
    dw, pc = (p >> 32) & 0xFFFF, p >> 48
    msg.check_span(seg, idx, dw + pc, "root struct")
    doc_id = msg.word(seg, idx) if dw >= 1 else 0
    created = msg.word(seg, idx + 1) if dw >= 2 else 0
    if created >= 1 << 63:
        created -= 1 << 64
    if pc < 1:
        return doc_id, created, b""
    t = msg.follow(seg, idx + dw, "text pointer")
    if t is None:
        return doc_id, created, b""
    p, seg, idx = t
    if p & 3 != 1:
        raise _corrupt("text pointer is not a list pointer")
    esize, count = (p >> 32) & 7, p >> 35
    if esize != 2:
        raise _corrupt(f"text is a list of element size {esize}, not bytes (2)")
    if count == 0:
        return doc_id, created, b""
    msg.check_span(seg, idx, (count + 7) // 8, "text")
    off = msg.segs[seg][0] + idx * 8
    if mv[off + count - 1] != 0:
        raise _corrupt("text is not NUL-terminated")
    return doc_id, created, mv[off:off + count - 1].tobytes()


def encode_doc_raw(created_at: int, text) -> bytes:
    """A raw value: created_at (8 bytes, i64 little-endian) then the text."""
    return _I64.pack(created_at) + bytes(text)


def decode_doc_raw(value) -> tuple[int, bytes]:
    """(created_at, text bytes) of a raw value."""
    if len(value) < 8:
        raise VerifyError(f"corrupt raw document value: {len(value)} bytes (at least 8: created_at)")
    mv = memoryview(value)
    return _I64.unpack_from(mv, 0)[0], mv[8:].tobytes()


def decode_value(value, fmt: str, doc_id: int | None = None) -> tuple[int, int, bytes]:
    """(id, created_at, text) of a stored value; raw values take the id from the key."""
    if fmt == "capnp":
        got = decode_doc_capnp(value)
        if doc_id is not None and got[0] != doc_id:
            raise VerifyError(f"document value under key {doc_id} holds id {got[0]}")
        return got
    if fmt == "raw":
        created, text = decode_doc_raw(value)
        return (0 if doc_id is None else int(doc_id)), created, text
    raise UsageError(f"unknown document value format {fmt!r}; use {' or '.join(VALUE_FORMATS)}")


def _value_parts(batch: DocBatch, fmt: str) -> tuple[bytes, int, bytes, list, list]:
    """(headers, header size, texts, text offsets, pad sizes) of the batch's values."""
    if fmt not in VALUE_FORMATS:
        raise UsageError(f"unknown document value format {fmt!r}; use {' or '.join(VALUE_FORMATS)}")
    n = len(batch)
    lengths = batch.lengths
    if fmt == "capnp":
        if n and int(lengths.max()) > MAX_TEXT_BYTES:
            raise UsageError(f"a text of {int(lengths.max())} bytes is over the Cap'n Proto limit; "
                             "use raw values")
        hdr = np.empty((n, 5), "<u8")
        hdr[:, 0] = ((lengths + 8) // 8 + 4).astype(np.uint64) << np.uint64(32)  # 1 segment, words
        hdr[:, 1] = _ROOT_PTR
        hdr[:, 2] = batch.ids
        hdr[:, 3] = batch.created_at.view(np.uint64)
        hdr[:, 4] = np.uint64(_TEXT_PTR_LOW) | ((lengths + 1).astype(np.uint64) << np.uint64(35))
        pads = (8 - (lengths & 7)).tolist()  # the NUL and the zeros after the text
        head = CAPNP_HEADER_BYTES
    else:
        hdr = batch.created_at.astype("<i8")
        pads = None
        head = 8
    text = batch.text.tobytes() if len(batch.text) else b""
    return hdr.tobytes(), head, text, batch.offsets.tolist(), pads


_ZEROS = [bytes(k) for k in range(9)]


def encode_batch(batch: DocBatch, fmt: str) -> list[bytes]:
    """One value (bytes) per document, in batch order.

    A Python loop of slices and one join per value: faster than any numpy scatter here
    (the per-value copies are memcpy of ~1 KB; ~0.5 us overhead per document).
    """
    h, k, t, o, pads = _value_parts(batch, fmt)
    join = b"".join
    if pads is None:
        return [h[k * i:k * i + k] + t[o[i]:o[i + 1]] for i in range(len(o) - 1)]
    z = _ZEROS
    return [join((h[k * i:k * i + k], t[o[i]:o[i + 1]], z[pads[i]])) for i in range(len(o) - 1)]


def encode_batch_buffer(batch: DocBatch, fmt: str) -> tuple[bytes, np.ndarray]:
    """All the batch's values concatenated in one bytes object, and int64 offsets (n + 1):
    value i is ``buf[offsets[i]:offsets[i+1]]`` (e.g. for zstandard's BufferWithSegments)."""
    h, k, t, o, pads = _value_parts(batch, fmt)
    n = len(o) - 1
    parts = []
    add = parts.append
    z = _ZEROS
    for i in range(n):
        add(h[k * i:k * i + k])
        add(t[o[i]:o[i + 1]])
        if pads is not None:
            add(z[pads[i]])
    sizes = k + batch.lengths
    if pads is not None:
        sizes = sizes + np.asarray(pads, np.int64)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return b"".join(parts), offsets


def decode_values(ids: Sequence[int], values: Sequence, fmt: str) -> DocBatch:
    """A DocBatch from stored values (with their ids, from the keys)."""
    cas, texts = [], []
    for i, v in zip(ids, values):
        _, c, t = decode_value(v, fmt, int(i))
        cas.append(c)
        texts.append(t)
    return DocBatch._from_lists(list(ids), cas, texts)


# --- the JSON directory source ------------------------------------------------------------

_ID_NAME = re.compile(r"^([0-9]+)\.json$")
_DOC_KEYS = ("created_at", "text")
ON_BAD_FILE = ("fail", "skip")


@dataclass(frozen=True)
class FileError:
    """One bad input file: its path and why (for the run report)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"

    def to_dict(self) -> dict:
        return {"path": self.path, "reason": self.reason}


def _check_on_bad_file(on_bad_file: str) -> None:
    if on_bad_file not in ON_BAD_FILE:
        raise UsageError(f"--on-bad-file {on_bad_file!r} is unknown; use fail or skip")


def _fail(errors: list[FileError]) -> BadFileError:
    more = f" (and {len(errors) - 1} more bad file(s))" if len(errors) > 1 else ""
    return BadFileError(
        f"{errors[0]}{more}; nothing was loaded - fix or remove the file, "
        f"or pass --on-bad-file skip to load the others and list it in the run report",
        errors,
    )


def id_from_name(name: str) -> int | str:
    """The id of a file name ``<id>.json``, or the reason it is not one."""
    m = _ID_NAME.match(name)
    if not m:
        return "file name is not an integer id (expected <id>.json, e.g. 42.json)"
    v = int(m.group(1))
    if v >= 2**64:
        return f"file name id {m.group(1)} is out of range (ids are 0..{2**64 - 1})"
    return v


def scan_json_dir(directory, on_bad_file: str = "fail") -> tuple[list[tuple[int, str]], list[FileError]]:
    """The document files of a directory: ([(id, path)] sorted by id, [FileError]).

    Every regular file whose name does not start with '.' must be ``<id>.json``;
    subdirectories are not read. Two names for one id (``7.json``, ``07.json``) are a
    duplicate: the first name in (id, name) order is kept, the others are errors.
    """
    _check_on_bad_file(on_bad_file)
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        from .errors import MissingPathError

        raise MissingPathError(f"{directory} is not a directory of <id>.json files")
    entries, errors = [], []
    with os.scandir(directory) as it:
        for e in it:
            if e.name.startswith(".") or not e.is_file():
                continue
            got = id_from_name(e.name)
            if isinstance(got, str):
                errors.append(FileError(e.path, got))
            else:
                entries.append((got, e.name, e.path))
    entries.sort()
    out: list[tuple[int, str]] = []
    prev_id, prev_path = None, None
    for doc_id, _name, path in entries:
        if doc_id == prev_id:
            errors.append(FileError(path, f"duplicate id {doc_id} (also in {prev_path})"))
            continue
        out.append((doc_id, path))
        prev_id, prev_path = doc_id, path
    errors.sort(key=lambda f: f.path)
    if errors and on_bad_file == "fail":
        raise _fail(errors)
    return out, errors


def _read_file(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        first = os.read(fd, 1 << 20)
        if len(first) < 1 << 20:  # a regular file reads short only at its end: one read(2)
            return first
        chunks = [first]
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _utf8_reason(data: bytes) -> str | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not valid UTF-8 (byte {e.start}: {data[e.start:e.start + 1]!r})"
    return None


def parse_doc_json(data: bytes) -> tuple[int, bytes] | str:
    """(created_at, text UTF-8 bytes) of one document file's content, or the reason it is bad."""
    import orjson

    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        bad = _utf8_reason(data)
        if bad is not None:
            return f"text is {bad}"
        if "surrogate" in str(e):  # a \\uD800-style escape that is no character
            return f"text is not valid UTF-8 ({e})"
        return f"invalid JSON: {e}"
    if type(obj) is not dict:
        return f"invalid document: expected a JSON object {{\"text\": ..., \"created_at\": ...}}, got {type(obj).__name__}"
    if len(obj) != 2 or "text" not in obj or "created_at" not in obj:
        missing = [k for k in _DOC_KEYS if k not in obj]
        extra = sorted(k for k in obj if k not in _DOC_KEYS)
        parts = []
        if missing:
            parts.append("missing field(s) " + ", ".join(repr(k) for k in missing))
        if extra:
            parts.append("unexpected field(s) " + ", ".join(repr(k) for k in extra))
        return "invalid document: " + "; ".join(parts) + " (a document has exactly 'text' and 'created_at')"
    text, created = obj["text"], obj["created_at"]
    if type(created) is not int:
        return f"invalid document: 'created_at' must be an integer (epoch seconds), got {_json_type(created)}"
    if not -(2**63) <= created < 2**63:
        return f"invalid document: 'created_at' {created} is out of the int64 range"
    if type(text) is not str:
        return f"invalid document: 'text' must be a string, got {_json_type(text)}"
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"text is not valid UTF-8 (unpaired surrogate \\u{ord(text[e.start]):04x} at character {e.start})"
    return created, raw


def _json_type(v) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number with a fraction", str: "a string",
            list: "an array", dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


def parse_json_files(paths: Iterable, on_bad_file: str = "fail") -> tuple[DocBatch, list[FileError]]:
    """Read and parse document files into a DocBatch (in the given order).

    ``paths``: (id, path) pairs, as from `scan_json_dir`, or plain paths (the id comes
    from the file name). A later file with an id already seen in this call is a
    duplicate. ``on_bad_file="fail"`` raises BadFileError at the first bad file;
    ``"skip"`` leaves bad files out and returns them.
    """
    _check_on_bad_file(on_bad_file)
    ids, cas, texts = [], [], []
    errors: list[FileError] = []
    seen: dict[int, str] = {}
    for item in paths:
        if isinstance(item, tuple):
            doc_id, path = int(item[0]), os.fspath(item[1])
        else:
            path = os.fspath(item)
            got = id_from_name(os.path.basename(path))
            if isinstance(got, str):
                errors.append(FileError(path, got))
                if on_bad_file == "fail":
                    raise _fail(errors)
                continue
            doc_id = got
        if doc_id in seen:
            reason: str | tuple = f"duplicate id {doc_id} (also in {seen[doc_id]})"
        else:
            try:
                data = _read_file(path)
            except OSError as e:
                reason = f"cannot read: {e.strerror or e}"
            else:
                reason = parse_doc_json(data)
        if isinstance(reason, str):
            errors.append(FileError(path, reason))
            if on_bad_file == "fail":
                raise _fail(errors)
            continue
        seen[doc_id] = path
        ids.append(doc_id)
        cas.append(reason[0])
        texts.append(reason[1])
    return DocBatch._from_lists(ids, cas, texts), errors


def doc_json(created_at: int, text: bytes) -> bytes:
    """The JSON file content of one document."""
    import orjson

    return orjson.dumps({"text": text.decode("utf-8"), "created_at": int(created_at)})


def write_json_dir(batch: DocBatch, directory) -> int:
    """Write each document as ``<id>.json`` into directory (tests, benchmarks); bytes written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    total = 0
    for doc_id, created, text in batch.records():
        data = doc_json(created, text)
        with open(directory / f"{doc_id}.json", "wb") as f:
            f.write(data)
        total += len(data)
    return total
