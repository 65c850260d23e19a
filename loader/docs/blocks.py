"""The ``block`` value format of documents: many documents per stored value, under the id of
the last one, cut to fill whole LMDB pages. Why, and the byte layout: docs/design/documents.md.
Pure: encodes and decodes values; nothing here writes a store or a file."""

from __future__ import annotations

import struct
from bisect import bisect_right

import numpy as np
import zstandard

from ..errors import UsageError, VerifyError
from ._docsio import block_columns
from .batch import DocBatch

HEADER = struct.Struct("<IBBBBQq")
HEADER_BYTES = HEADER.size  # 24
FLAG_ZSTD = 1
#: LMDB: a value stored on overflow pages takes ceil((size + 16) / page) pages
LMDB_PAGE = 4096
LMDB_PAGE_HEADER = 16
#: default block size: 8 LMDB pages (a get decompresses ~40 KB of text, ~30 us)
BLOCK_PAGES = 8
ZSTD_LEVEL = 1
#: fill target: compressed blocks aim this fraction under the page boundary
MARGIN = 0.004
_DTYPES = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}


def block_target(pages: int = BLOCK_PAGES) -> int:
    """Largest value that fits `pages` LMDB overflow pages exactly."""
    if pages < 1:
        raise UsageError(f"block of {pages} pages: at least 1")
    return pages * LMDB_PAGE - LMDB_PAGE_HEADER


def column_bytes(n: int, wi: int, wl: int, wc: int) -> int:
    return HEADER_BYTES + max(0, n - 1) * wi + n * (wl + wc)


class Packer:
    """Cuts id-sorted batches into block values.

    Each block's end is chosen from an estimate of its value size (ratio of compressed
    to raw text, learned from the batch's first block; column bytes per document) so
    that the value fills whole LMDB pages: of the ends that fill k/2 .. k pages (k =
    `pages`), the one with the least slack. A block that comes out larger than planned
    is cut again with the ratio just measured (once; if it still spills it takes one
    more page). The cut depends on the batch alone, so a resumed load writes the same
    bytes as an uninterrupted one.
    """

    def __init__(self, compress: bool = True, pages: int = BLOCK_PAGES, level: int = ZSTD_LEVEL):
        self.compress = compress
        self.pages = pages
        self.target = block_target(pages)
        self.level = level
        self._z = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True)
        # the page counts a block may fill, and their value size limits
        self._counts = list(range(max(1, pages // 2), pages + 1))

    def pack(self, batch: DocBatch) -> list[tuple[int, bytes]]:
        """[(last id, value)] of an id-sorted, duplicate-free batch, in id order."""
        n = len(batch)
        if n == 0:
            return []
        self._b = batch
        self._ids = batch.ids.tolist()
        self._off = batch.offsets.tolist()
        self._cols = (
            np.ascontiguousarray(batch.ids, np.uint64),
            np.ascontiguousarray(batch.created_at, np.int64),
            np.ascontiguousarray(batch.offsets, np.int64),
        )
        self._plan(0.85 if self.compress else 1.0, 6.0)
        out = []
        i = 0
        while i < n:
            j, room = self._end(i)
            v = self._block(i, j)
            per_doc = (len(v) - self._body - HEADER_BYTES) / (j - i)
            if len(v) > room and j > i + 1:  # the estimate was short: cut again, once
                self._plan(self._ratio, per_doc)
                j2, _room = self._end(i)
                if j2 < j:
                    j, v = j2, self._block(i, j2)
            elif i == 0 or abs(self._ratio - self._planned) > 0.01 * self._planned:
                self._plan(self._ratio, per_doc)  # the first block's measured ratio, or a drift
            out.append((self._ids[j - 1], v))
            i = j
        del self._b
        return out

    def _plan(self, ratio: float, per_doc: float) -> None:
        """Cumulative size estimates: est[j] - est[i] + HEADER ~ value of documents i..j-1."""
        self._ratio = self._planned = ratio
        rel = np.asarray(self._off, np.float64) - self._off[0]
        self._est = (rel * ratio + per_doc * np.arange(len(rel))).tolist()

    def _end(self, i: int) -> tuple[int, int]:
        """(j, room): the block i..j-1 to write next, and the value size its pages hold."""
        est, n = self._est, len(self._ids)
        base = est[i] - HEADER_BYTES
        best = None
        for p in self._counts:
            room = p * LMDB_PAGE - LMDB_PAGE_HEADER
            j = bisect_right(est, base + room * (1 - MARGIN), i + 1) - 1
            if j <= i:
                j = i + 1
            if j >= n and p == self.pages:
                return n, room  # the rest fits one block
            fill = (est[j] - base) / (p * LMDB_PAGE)
            if best is None or fill >= best[0]:
                best = (fill, j, room)
        return best[1], best[2]

    def _block(self, i: int, j: int) -> bytes:
        b = self._b
        head = block_columns(*self._cols, i, j, FLAG_ZSTD if self.compress else 0)
        text = b.text[self._off[i] : self._off[j]]
        if self.compress:
            body = self._z.compress(text)
            if len(text):
                self._ratio = len(body) / len(text)
        else:
            body = text.tobytes()
        self._body = len(body)
        return head + body


def _parse(value) -> tuple[int, int, int, int, int, int, int, memoryview]:
    mv = memoryview(value)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    if len(mv) < HEADER_BYTES:
        raise VerifyError(f"corrupt document block: {len(mv)} bytes (the header alone is {HEADER_BYTES})")
    n, wi, wl, wc, flags, first, base = HEADER.unpack_from(mv, 0)
    if n < 1 or wi not in (0, 1, 2, 4, 8) or wl not in (1, 2, 4, 8) or wc not in (0, 1, 2, 4, 8) or flags > 1:
        raise VerifyError(f"corrupt document block header (n={n}, widths {wi}/{wl}/{wc}, flags {flags})")
    if column_bytes(n, wi, wl, wc) > len(mv):
        raise VerifyError(f"corrupt document block: {n} documents do not fit {len(mv)} bytes")
    return n, wi, wl, wc, flags, first, base, mv


def block_count(value) -> int:
    """Documents in a block value (from its header alone)."""
    return _parse(value)[0]


def block_first_id(value) -> int:
    """The lowest id in a block value (from its header alone)."""
    return _parse(value)[5]


class BlockReader:
    """Decodes block values (one zstd context, reused)."""

    def __init__(self):
        self._d = zstandard.ZstdDecompressor()

    def columns(self, value) -> tuple[np.ndarray, np.ndarray, np.ndarray, memoryview, int]:
        """(ids, created_at, offsets (n+1, into the texts), the value, texts offset in it)."""
        n, wi, wl, wc, flags, first, base, mv = _parse(value)
        p = HEADER_BYTES
        if wi:
            d = np.frombuffer(mv, _DTYPES[wi], n - 1, p).astype(np.uint64)
            ids = np.empty(n, np.uint64)
            ids[0] = first
            np.cumsum(d, out=ids[1:])
            ids[1:] += np.uint64(first)
            p += (n - 1) * wi
        else:
            ids = (
                np.arange(first, first + n, dtype=np.uint64)
                if first + n <= 2**63
                else np.array([first + k for k in range(n)], np.uint64)
            )
        lengths = np.frombuffer(mv, _DTYPES[wl], n, p).astype(np.int64)
        p += n * wl
        if wc:
            cas = np.frombuffer(mv, _DTYPES[wc], n, p).astype(np.uint64)
            cas = (cas + np.uint64(base & (2**64 - 1))).view(np.int64)
            p += n * wc
        else:
            cas = np.full(n, base, np.int64)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return ids, cas, offsets, mv, p

    def _texts(self, mv: memoryview, p: int, total: int, flags: int) -> np.ndarray:
        body = mv[p:]
        if flags & FLAG_ZSTD:
            try:
                out = self._d.decompress(body)
            except zstandard.ZstdError as e:
                raise VerifyError(f"corrupt document block: cannot decompress its texts: {e}") from None
        else:
            out = body
        if len(out) != total:
            raise VerifyError(f"corrupt document block: {len(out)} bytes of text, its lengths say {total}")
        return np.frombuffer(out, np.uint8)

    def decode(self, value) -> DocBatch:
        """All documents of a block."""
        ids, cas, offsets, mv, p = self.columns(value)
        text = self._texts(mv, p, int(offsets[-1]), mv[7])
        return DocBatch(ids, cas, offsets, text)

    def find(self, value, doc_id: int) -> tuple[int, bytes] | None:
        """(created_at, text) of doc_id in a block, or None."""
        ids, cas, offsets, mv, p = self.columns(value)
        k = int(np.searchsorted(ids, np.uint64(doc_id)))
        if k == len(ids) or int(ids[k]) != doc_id:
            return None
        text = self._texts(mv, p, int(offsets[-1]), mv[7])
        return int(cas[k]), text[offsets[k] : offsets[k + 1]].tobytes()
