"""One value per document (formats ``raw`` and ``capnp``), under the 8-byte big-endian id.

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

Pure: nothing here writes a store or a file.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from ..errors import UsageError, VerifyError
from ..serializers.capnp_framing import CapnpMessage
from .batch import DocBatch

#: Value formats of a stored document.
VALUE_FORMATS = ("capnp", "raw")

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
        raise UsageError(
            f"document {doc_id}: text of {n} bytes is over the Cap'n Proto limit ({MAX_TEXT_BYTES}); use raw values"
        )
    body = _pad8(n + 1)
    return b"".join(
        (
            _CAPNP_HDR.pack(0, 4 + body // 8, _ROOT_PTR, doc_id, created_at, _TEXT_PTR_LOW | ((n + 1) << 35)),
            text,
            bytes(body - n),
        )
    )


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
        if nseg == 0 and root == _ROOT_PTR and 8 + words * 8 == size and tptr & 0x7FFFFFFFF == _TEXT_PTR_LOW:
            count = tptr >> 35
            if count and CAPNP_HEADER_BYTES + count <= size and mv[CAPNP_HEADER_BYTES + count - 1] == 0:
                return doc_id, created, mv[CAPNP_HEADER_BYTES : CAPNP_HEADER_BYTES + count - 1].tobytes()
    return _decode_doc_general(mv)


def _decode_doc_general(mv: memoryview) -> tuple[int, int, bytes]:
    try:
        msg = CapnpMessage(mv)  # the pointer-following reader
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
    return doc_id, created, mv[off : off + count - 1].tobytes()


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
            raise UsageError(f"a text of {int(lengths.max())} bytes is over the Cap'n Proto limit; use raw values")
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
        return [h[k * i : k * i + k] + t[o[i] : o[i + 1]] for i in range(len(o) - 1)]
    z = _ZEROS
    return [join((h[k * i : k * i + k], t[o[i] : o[i + 1]], z[pads[i]])) for i in range(len(o) - 1)]


def encode_batch_buffer(batch: DocBatch, fmt: str) -> tuple[bytes, np.ndarray]:
    """All the batch's values concatenated in one bytes object, and int64 offsets (n + 1):
    value i is ``buf[offsets[i]:offsets[i+1]]`` (e.g. for zstandard's BufferWithSegments)."""
    h, k, t, o, pads = _value_parts(batch, fmt)
    n = len(o) - 1
    parts: list[bytes] = []
    add = parts.append
    z = _ZEROS
    for i in range(n):
        add(h[k * i : k * i + k])
        add(t[o[i] : o[i + 1]])
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
    return DocBatch.from_lists(list(ids), cas, texts)
