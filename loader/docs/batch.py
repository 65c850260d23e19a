"""`DocBatch`: documents column-wise, and their keys.

numpy arrays ``ids`` (uint64), ``created_at`` (int64), and all the texts in one uint8
buffer ``text`` with int64 ``offsets`` (n + 1 of them; document i is
``text[offsets[i]:offsets[i+1]]``). Nothing in the hot paths makes a Python object per
document except where a store API needs one value per key. A document's key is its id as
8 bytes big-endian (byte order = id order).

Pure: in memory only, nothing here writes a store or a file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError, VerifyError
from .layout import DOCS

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
                f"DocBatch: {n} ids, {len(self.created_at)} created_at, {len(self.offsets)} offsets (need n + 1)"
            )

    # construction ---------------------------------------------------------------
    @classmethod
    def empty(cls) -> DocBatch:
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(1, np.int64), _EMPTY_U8)

    @classmethod
    def from_records(cls, records: Iterable[tuple[int, int, bytes]]) -> DocBatch:
        """From (id, created_at, text bytes) tuples (tests, small inputs)."""
        ids, cas, texts = [], [], []
        for i, c, t in records:
            ids.append(i)
            cas.append(c)
            texts.append(bytes(t))
        return cls.from_lists(ids, cas, texts)

    @classmethod
    def from_lists(cls, ids: list, cas: list, texts: list[bytes]) -> DocBatch:
        """From parallel lists of ids, created_at and text bytes."""
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
    def concat(cls, batches: Sequence[DocBatch]) -> DocBatch:
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
            np.concatenate([b.text[b.offsets[0] : b.offsets[-1]] for b in batches]),
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
        return self.text[self.offsets[i] : self.offsets[i + 1]].tobytes()

    def texts(self) -> list[bytes]:
        buf = self.text.tobytes() if len(self.text) else b""
        o = self.offsets.tolist()
        return [buf[o[i] : o[i + 1]] for i in range(len(self))]

    def records(self) -> list[tuple[int, int, bytes]]:
        return list(zip(self.ids.tolist(), self.created_at.tolist(), self.texts()))

    def slice(self, a: int, b: int) -> DocBatch:
        """Documents a..b-1 (views, no copy)."""
        return DocBatch(self.ids[a:b], self.created_at[a:b], self.offsets[a : b + 1], self.text)

    def take(self, idx: np.ndarray) -> DocBatch:
        """Documents in the order of the index array idx (copies)."""
        idx = np.asarray(idx, dtype=np.intp)
        lengths = self.lengths[idx]
        offsets = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        starts = self.offsets[:-1][idx]
        buf = self.text.data
        text = np.frombuffer(b"".join([buf[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist())]), np.uint8)
        return DocBatch(self.ids[idx], self.created_at[idx], offsets, text)

    def compact(self) -> DocBatch:
        """The same documents with offsets starting at 0 and a text buffer of just them."""
        if self.offsets[0] == 0 and len(self.text) == self.offsets[-1]:
            return self
        return DocBatch(
            self.ids,
            self.created_at,
            self.offsets - self.offsets[0],
            self.text[self.offsets[0] : self.offsets[-1]].copy(),
        )

    def equals(self, other: DocBatch) -> bool:
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
        import pyarrow as pa  # heavy: only Arrow output needs it

        c = self.compact()
        if c.text_nbytes > 2**31 - 1:
            raise UsageError(f"{c.text_nbytes} bytes of text do not fit one Arrow string column; split the batch")
        text = pa.Array.from_buffers(
            pa.string(), len(c), [None, pa.py_buffer(c.offsets.astype(np.int32)), pa.py_buffer(c.text)]
        )
        return pa.RecordBatch.from_arrays(
            [pa.array(c.ids, pa.uint64()), pa.array(c.created_at, pa.int64()), text],
            schema=DOCS.arrow_schema,
        )

    @classmethod
    def from_arrow(cls, rb) -> DocBatch:
        import pyarrow as pa  # heavy: only Arrow output needs it

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
    return [buf[i : i + 8] for i in range(0, len(buf), 8)]


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
