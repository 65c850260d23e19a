"""Cap'n Proto batches by framing: a 40-byte header, then the records (zero copies when the
layout is framable); compressed record regions (shuffled.py); partial reads of a few records.
The byte layout, limits and why: docs/reference/formats.md."""

from __future__ import annotations

import struct
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..errors import UsageError, VerifyError
from ..model.layouts import Layout
from . import shuffled
from .base import MAX_START, Serializer, column_out

if TYPE_CHECKING:
    from ..infra.bytes_like import BytesLike
    from .base import Columns

#: Largest message we write: pycapnp's default traversal limit, 8 Mi words.
MAX_BATCH_BYTES = 8 * 1024 * 1024 * 8
#: Bytes before the records in a framed message.
HEADER_BYTES = 40
#: a compressed value of fewer records is one LZ4 block of every plane (`_blocks_of`)
BLOCKS_FROM_RECORDS = 1000

_HEADER = struct.Struct("<IIQQQQ")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
# the root pointer: struct, offset 0, 1 data word (start), 1 pointer (records)
_ROOT_PTR = (1 << 32) | (1 << 48)
_MAX_SEGMENTS = 512  # Cap'n Proto's own reader limit


def max_records(layout: Layout) -> int:
    """Most records of this layout one framed message may hold (<= MAX_BATCH_BYTES)."""
    return (MAX_BATCH_BYTES - HEADER_BYTES) // (layout.capnp_words * 8)


def message_size(layout: Layout, n: int) -> int:
    """Bytes of a framed message of n records."""
    return HEADER_BYTES + n * layout.capnp_words * 8


def write_header(buf: bytearray | memoryview, n: int, words_per_record: int, start: int) -> int:
    """Write the 40-byte header of an n-record message into buf; return the message size."""
    fixed, tail = header_words(n, words_per_record)
    _HEADER.pack_into(buf, 0, *fixed, start, *tail)
    return HEADER_BYTES + n * words_per_record * 8


def header_words(n: int, words_per_record: int) -> tuple[tuple[int, int, int], tuple[int, int]]:
    """The words of a batch header of ``n`` records before and after its first record's
    index (`write_header`; `ReusedEncoder` makes them once)."""
    body = n * words_per_record
    return (
        (
            0,  # segment count - 1
            4 + body,  # segment words
            _ROOT_PTR,
        ),
        (
            1 | (7 << 32) | (body << 35),  # list pointer, offset 0, composite, body words
            (n << 2) | (words_per_record << 32),  # tag: n elements of W data words, 0 pointers
        ),
    )


class _ColumnsPlan(NamedTuple):
    """What `CapnpSerializer.decode_columns` works out from the names of the fields alone."""

    dtypes: list[tuple[str, np.dtype]]  # each field's dtype, in the order asked
    spans: list[tuple[str, int, int]]  # (name, byte offset, bytes) of each field in one piece
    rest: list[str]  # the others: a bool's bit, or a field Cap'n Proto scattered
    ranges: bytes  # the planes to decode (shuffled.packed_ranges)


class ReusedEncoder:
    """`CapnpSerializer.encode_buffer` of batches of ``n`` records of a framable layout
    with LZ4, into one buffer: fill `records`, then ``encode(first)`` gives the value. A
    load's 100-record batches spent ~5 us each in Python around ~4 us of C; this does the
    per-size work (checks, views, the head, the blocks, scratch) once."""

    def __init__(self, ser: CapnpSerializer, n: int) -> None:
        size = HEADER_BYTES + n * ser._stride
        self.buf = bytearray(size)
        mv = memoryview(self.buf)
        self.records = np.frombuffer(self.buf, dtype=ser.layout.dtype, count=n, offset=HEADER_BYTES)
        self._fixed, self._tail = header_words(n, ser._words)
        blocks = ser._blocks_of(n)
        self._value = shuffled.lz4_encoder(mv[:HEADER_BYTES], mv[HEADER_BYTES:], ser._stride, blocks)

    def encode(self, first: int) -> bytes:
        """The stored value of the records in `records`, the batch's first record ``first``."""
        if not 0 <= first <= MAX_START:
            raise UsageError(f"batch start {first} is out of range 0..2**64-1")
        _HEADER.pack_into(self.buf, 0, *self._fixed, first, *self._tail)
        return self._value()


def byte_view(value: BytesLike) -> memoryview:
    """A flat view of ``value``'s bytes (any buffer; no copy)."""
    mv = memoryview(value)
    return mv if mv.ndim == 1 and mv.itemsize == 1 else mv.cast("B")


def _corrupt(msg: str) -> VerifyError:
    return VerifyError(f"corrupt Cap'n Proto batch value: {msg}")


class CapnpMessage:
    """The segments of one unpacked Cap'n Proto message in a buffer (no copy)."""

    __slots__ = ("mv", "segs")

    def __init__(self, value: BytesLike) -> None:
        mv = byte_view(value)
        size = len(mv)
        if size < 8:
            raise _corrupt(f"{size} bytes is shorter than a segment table (8 bytes)")
        nseg: int = _U32.unpack_from(mv, 0)[0] + 1
        if nseg > _MAX_SEGMENTS:
            raise _corrupt(f"segment table claims {nseg} segments (at most {_MAX_SEGMENTS})")
        table = (4 + 4 * nseg + 7) & ~7
        if size < table:
            raise _corrupt(f"{size} bytes is shorter than its {nseg}-segment table ({table} bytes)")
        segs: list[tuple[int, int]] = []
        off = table
        for i in range(nseg):
            words: int = _U32.unpack_from(mv, 4 + 4 * i)[0]
            segs.append((off, words))
            off += words * 8
        if off != size:
            raise _corrupt(
                f"segment table says {off} bytes, value has {size} ({'truncated' if size < off else 'trailing bytes'})"
            )
        self.mv = mv
        self.segs = segs

    def word(self, seg: int, idx: int) -> int:
        off, words = self.segs[seg]
        if not 0 <= idx < words:
            raise _corrupt(f"pointer to word {idx} outside segment {seg} ({words} words)")
        word: int = _U64.unpack_from(self.mv, off + idx * 8)[0]
        return word

    def check_span(self, seg: int, idx: int, n: int, what: str) -> None:
        words = self.segs[seg][1]
        if idx < 0 or idx + n > words:
            raise _corrupt(f"{what} (words {idx}..{idx + n}) runs past the end of segment {seg} ({words} words)")

    def follow(self, seg: int, idx: int, what: str) -> tuple[int, int, int] | None:
        """Resolve the pointer at (seg, idx): None if null, else (pointer word, seg, target)."""
        v = self.word(seg, idx)
        if v == 0:
            return None
        kind = v & 3
        if kind == 2:  # far pointer
            pad = (v >> 3) & 0x1FFFFFFF
            tseg = v >> 32
            if tseg >= len(self.segs):
                raise _corrupt(f"{what}: far pointer to segment {tseg} of {len(self.segs)}")
            if not (v >> 2) & 1:  # single far: the landing pad is an ordinary pointer
                p = self.word(tseg, pad)
                if p & 3 not in (0, 1):
                    raise _corrupt(f"{what}: far pointer lands on a pointer of kind {p & 3}")
                return p, tseg, pad + 1 + _signed30(p)
            far = self.word(tseg, pad)
            tag = self.word(tseg, pad + 1)
            if far & 3 != 2 or (far >> 2) & 1:
                raise _corrupt(f"{what}: double-far landing pad does not start with a single far pointer")
            if tag & 3 not in (0, 1) or _signed30(tag) != 0:
                raise _corrupt(f"{what}: double-far landing pad has a bad tag")
            cseg = far >> 32
            if cseg >= len(self.segs):
                raise _corrupt(f"{what}: far pointer to segment {cseg} of {len(self.segs)}")
            return tag, cseg, (far >> 3) & 0x1FFFFFFF
        if kind == 3:
            raise _corrupt(f"{what} is a capability pointer")
        return v, seg, idx + 1 + _signed30(v)


def _signed30(v: int) -> int:
    off = (v >> 2) & 0x3FFFFFFF
    return off - (1 << 30) if off & (1 << 29) else off


def parse(value: BytesLike) -> tuple[int, CapnpMessage, int, int, int, int, int]:
    """Follow a Batch message's pointers.

    Returns (start, message, n, seg, word index of the first element, element data
    words, element pointer words).
    """
    msg = CapnpMessage(value)
    root = msg.follow(0, 0, "root pointer")
    if root is None:
        return 0, msg, 0, 0, 0, 0, 0
    p, seg, idx = root
    if p & 3 != 0:
        raise _corrupt("root pointer is not a struct pointer")
    dw, pc = (p >> 32) & 0xFFFF, p >> 48
    msg.check_span(seg, idx, dw + pc, "root struct")
    start = msg.word(seg, idx) if dw >= 1 else 0
    if pc < 1:
        return start, msg, 0, seg, 0, 0, 0
    lst = msg.follow(seg, idx + dw, "records pointer")
    if lst is None:
        return start, msg, 0, seg, 0, 0, 0
    p, seg, idx = lst
    if p & 3 != 1:
        raise _corrupt("records pointer is not a list pointer")
    esize, words = (p >> 32) & 7, p >> 35
    if esize != 7:
        if words == 0:  # an empty list of any element size is an empty list
            return start, msg, 0, seg, 0, 0, 0
        raise _corrupt(f"records is a list of element size {esize}, not a list of structs (7)")
    msg.check_span(seg, idx, 1 + words, "records list")
    tag = msg.word(seg, idx)
    if tag & 3 != 0:
        raise _corrupt("records list tag is not a struct tag")
    n = (tag >> 2) & 0x3FFFFFFF
    edw, epc = (tag >> 32) & 0xFFFF, tag >> 48
    if n * (edw + epc) > words:
        raise _corrupt(f"records list tag says {n} elements of {edw + epc} words, list has {words} words")
    if n and edw + epc == 0:
        raise _corrupt(f"records list holds {n} zero-size elements")
    return start, msg, n, seg, idx + 1, edw, epc


def header_fields(mv: memoryview, stride: int) -> tuple[int, int]:
    """(start, n) of a compressed value's 40-byte header (``mv``: its `byte_view`), checked to
    be our own framing."""
    if len(mv) < HEADER_BYTES:
        raise _corrupt(f"{len(mv)} bytes is shorter than a compressed batch's header ({HEADER_BYTES} bytes)")
    nseg: int
    words: int
    root: int
    start: int
    lst: int
    tag: int
    nseg, words, root, start, lst, tag = _HEADER.unpack_from(mv, 0)
    n, w = (tag >> 2) & 0x3FFFFFFF, tag >> 32
    if nseg != 0 or root != _ROOT_PTR or w * 8 != stride or words != 4 + n * w or lst >> 35 != n * w:
        raise _corrupt("the header of a compressed batch is not this layout's 40-byte framing")
    return start, n


class CapnpSerializer(Serializer):
    name = "capnp"
    compressions = ("none", "lz4", "zstd")

    def __init__(self, layout: Layout, compression: str = "none") -> None:
        super().__init__(layout, compression)
        self.hashes_blocks = self.compression == "lz4"  # (BLZ3: shuffled.py)
        self._words = layout.capnp_words
        self._stride = self._words * 8
        self._framable = layout.framable
        self._cdtype = layout.capnp_dtype
        #: where each field (and ``_validity``) lies in the data section (decode_columns):
        #: (byte offset, bytes) when in one piece, else None; a bool's bit offset
        self._spans = {name: layout.capnp_span(name) for name in layout.dtype.names or ()}
        self._bits = {m.field: m.bit for m in layout.capnp_members if m.bits == 1}
        #: the data section's byte ranges no run fills (padding, bools' bytes): zeroed planes
        self._zero_planes = _gaps(self._stride, [(at, at + size) for _p, at, size in layout.capnp_runs])
        #: the LZ4 blocks of a compressed value (shuffled.cuts): a field's planes each (its
        #: elements' if Cap'n Proto scattered it), a bool's byte, the gaps between
        self._blocks = shuffled.cuts(_bounds(layout), self._stride)
        self._one_block = shuffled.cuts((), self._stride)  # (made once: ~0.7 us a call)
        self._all_planes = shuffled.packed_ranges([(0, self._stride)])  # a whole decode's ranges
        #: each run at its own offset, each bool alone in its own byte, nothing else below
        #: the record size (gen://ticks): the record's planes are the data section's first
        #: planes, shuffled in place (`_capnp_planes`)
        self._planes_in_place = _planes_in_place(layout, self._zero_planes)
        #: (id of buf, weak reference to its records view) of the last buffer new_buffer
        #: made: encode_buffer of that very pair needs no check that the records lie in buf
        #: (two ctypes lookups, 2 us a batch). The view keeps buf alive: while it is, the id
        #: is buf's; nothing here keeps either alive.
        self._made: tuple[int, weakref.ref[np.ndarray]] | None = None
        self._max_records = max_records(layout)
        self._plans: dict[tuple[str, ...], _ColumnsPlan] = {}  # decode_columns' plan per tuple of names

    @property
    def max_records(self) -> int:
        return self._max_records  # (asked twice a batch: computed once)

    def _too_big_message(self, n: int, m: int) -> str:
        return (
            f"a capnp batch of {n} {self.layout.name} records would be "
            f"{message_size(self.layout, n)} bytes, over {MAX_BATCH_BYTES} "
            f"(pycapnp's default 64 MiB traversal limit); use --batch-records {m} or fewer"
        )

    def message_size(self, n: int) -> int:
        return message_size(self.layout, n)

    # --- encoding -----------------------------------------------------------
    def new_buffer(self, n: int, into: BytesLike | None = None) -> tuple[bytearray | memoryview, np.ndarray]:
        """(buf, records). buf is the whole message (a bytearray, or `into`: any writable
        buffer of at least `message_size(n)` bytes, e.g. shared memory or an array's
        ``.data``, which must be
        zero-filled for non-framable layouts). For a framable layout records is a view of
        buf's records region; otherwise a separate array that encode_buffer copies in (or,
        compressed, shuffles from: then a new buf is the header alone)."""
        self.check_batch_records(n)
        size = HEADER_BYTES + n * self._stride
        buf: bytearray | memoryview
        if into is None:
            buf = bytearray(size if self._framable or self.compression == "none" else HEADER_BYTES)
        else:
            buf = memoryview(into).cast("B") if not isinstance(into, bytearray) else into
            if len(buf) < size:
                raise UsageError(f"buffer of {len(buf)} bytes is too small for {n} records ({size} bytes)")
        if self._framable and n:
            records = np.frombuffer(buf, dtype=self.layout.dtype, count=n, offset=HEADER_BYTES)
            self._made = (id(buf), weakref.ref(records))
        else:
            records = np.zeros(n, dtype=self.layout.dtype)
        return buf, records

    def reused_encoder(self, n: int) -> ReusedEncoder | None:
        """An encoder of ``n``-record batches with one buffer of its own, filled and encoded
        again for every batch (each value is new bytes): a framable layout's LZ4 values;
        None for the others (`encode_buffer`)."""
        if not (self._framable and self.compression == "lz4" and n > 0):
            return None
        self.check_batch_records(n)
        return ReusedEncoder(self, n)

    def encode_buffer(self, buf: BytesLike, records: np.ndarray, start: int) -> BytesLike:
        n = len(records)
        self.check_batch_records(n)
        start = self._check_start(start)
        size = HEADER_BYTES + n * self._stride
        mv = byte_view(buf)
        planes_only = n and not self._framable and self.compression != "none"  # (the header's bytes only)
        if len(mv) < (HEADER_BYTES if planes_only else size):
            raise UsageError(
                f"buffer of {len(mv)} bytes is too small for {n} records ({size} bytes); use new_buffer(n)"
            )
        if n:
            made = self._made
            if self._framable and made is not None and made[0] == id(buf) and made[1]() is records:
                pass  # new_buffer's view of buf's records region: filled in place
            elif self._framable:
                body = np.frombuffer(mv, dtype=self.layout.dtype, count=n, offset=HEADER_BYTES)
                if records.ctypes.data != body.ctypes.data or records.strides != body.strides:
                    body[...] = self._check_records(records)
            elif planes_only:  # the data section's planes, straight from the records
                write_header(mv, n, self._words, start)
                checked = self._check_records(records)
                planes = self._capnp_planes(checked)
                return shuffled.compress_planes(
                    planes,
                    self.compression,
                    self._stride,
                    self._blocks_of(n),
                    prefix=mv[:HEADER_BYTES],
                    records=_bytes_of(checked).data if self._planes_in_place else b"",
                )
            else:
                body = np.frombuffer(mv, np.uint8, n * self._stride, HEADER_BYTES).reshape(n, self._stride)
                self._to_capnp(self._check_records(records), body)
        write_header(mv, n, self._words, start)
        if self.compression == "lz4":
            return shuffled.lz4_value(mv[:HEADER_BYTES], mv[HEADER_BYTES:size], self._stride, self._blocks_of(n))
        if self.compression != "none":
            return bytes(mv[:HEADER_BYTES]) + shuffled.compress(mv[HEADER_BYTES:size], self.compression, self._stride)
        return mv[:size] if len(mv) != size else mv

    def _blocks_of(self, n: int) -> bytes:
        """The LZ4 blocks of a value of ``n`` records: a field's planes each (`_blocks`), or
        under `BLOCKS_FROM_RECORDS` records one block of every plane: a scan of
        such a batch saves little, and a block per field costs a compression call, a table
        entry and a worse ratio each (20M records in 100-record batches: 1.65 s, ~0.1 s more
        than one block, ad hoc)."""
        return self._blocks if n >= BLOCKS_FROM_RECORDS else self._one_block

    # --- decoding -----------------------------------------------------------
    def count(self, value: BytesLike) -> int:
        if self.compression != "none":
            return header_fields(byte_view(value), self._stride)[1]
        return parse(value)[2]

    def _decompressed(self, value: BytesLike) -> bytearray:
        """The standard message of a compressed value: its header + the records, decompressed."""
        mv = byte_view(value)
        _start, n = header_fields(mv, self._stride)
        msg = bytearray(HEADER_BYTES + n * self._stride)
        msg[:HEADER_BYTES] = mv[:HEADER_BYTES]
        shuffled.decompress_into(
            mv[HEADER_BYTES:], memoryview(msg)[HEADER_BYTES:], self._stride, "corrupt Cap'n Proto batch value"
        )
        return msg

    def decode_into(self, value: BytesLike, out: np.ndarray) -> int | None:
        """A compressed value of a framable layout is decompressed straight into ``out``."""
        if self.compression == "none" or not self._framable:
            return super().decode_into(value, out)
        mv = byte_view(value)
        start, n = header_fields(mv, self._stride)
        if n != len(out):
            return None
        shuffled.decompress_into(
            mv[HEADER_BYTES:], out.view("u1").data, self._stride, "corrupt Cap'n Proto batch value"
        )
        return start

    def decode(self, value: BytesLike) -> tuple[int, np.ndarray]:
        if self.compression != "none" and not self._framable:  # records straight from the planes
            mv = byte_view(value)
            start, n = header_fields(mv, self._stride)
            size, what = n * self._stride, "corrupt Cap'n Proto batch value"  # (all planes: a scan's buffer)
            planes = shuffled.planes_of(mv[HEADER_BYTES:], size, self._stride, what, self._all_planes)
            return start, self._records_of_planes(planes, n)
        if self.compression != "none":
            value = self._decompressed(value)
        start, msg, n, seg, idx, edw, epc = parse(value)
        dt = self.layout.dtype
        if n == 0:
            return start, np.empty(0, dtype=dt)
        off = msg.segs[seg][0] + idx * 8
        stride = (edw + epc) * 8
        if edw >= self._words:
            cdt = dt if self._framable else self._cdtype
            if stride == cdt.itemsize:
                view = np.frombuffer(msg.mv, dtype=cdt, count=n, offset=off)
            else:  # wider elements (pointers, or a newer schema's fields): strided view
                view = np.ndarray((n,), dtype=cdt, buffer=msg.mv, offset=off, strides=(stride,))
            if self._framable:
                return start, view
        else:
            # An older/smaller data section: the missing fields take their default, 0.
            raw = np.ndarray((n, edw * 8), dtype=np.uint8, buffer=msg.mv, offset=off, strides=(stride, 1))
            view = np.zeros(n, dtype=self._cdtype)
            view.view(np.uint8).reshape(n, self._stride)[:, : edw * 8] = raw
        return start, self._as_records(view)

    def decode_columns(
        self, value: BytesLike, names: list[str], out: Columns | None = None
    ) -> tuple[int, int, Columns]:
        """A compressed value's records are stored byte-shuffled (shuffled.py): a field's
        bytes are a run of byte planes, so after decompression (LZ4: only the blocks of the
        planes asked for, `shuffled.planes_of`) each field asked for is an unshuffle of
        its planes (C, one call for all of them, the GIL released; 4- and 8-byte fields by
        SSE2) straight into its column - the other fields are never assembled, and all of them
        take half the time of a whole unshuffle and a gather of each field (measured on
        2M scidb96 records, lz4 and zstd). Where a field lies comes from
        ``layout.capnp_span`` (a bool: its bit of one plane); a field Cap'n Proto scattered
        is picked from a whole decode. Uncompressed: each field gathered (a strided copy,
        in C)."""
        if self.compression == "none":
            return super().decode_columns(value, names, out)
        plan = self._plans.get(key := tuple(names)) or self._columns_plan(key)
        mv = byte_view(value)
        start, n = header_fields(mv, self._stride)
        cols: Columns = {name: column_out(out, name, n, dt) for name, dt in plan.dtypes}
        fields = [(at, size, cols[name]) for name, at, size in plan.spans] if n else ()  # (contiguous: C-writable)
        planes = shuffled.planes_of(
            mv[HEADER_BYTES:], n * self._stride, self._stride, "corrupt Cap'n Proto batch value", plan.ranges, fields
        )
        if planes is None or not plan.rest:  # no records, or every field unshuffled by planes_of
            return start, n, cols
        whole = None
        for name in plan.rest:
            col, bit = cols[name], self._bits.get(name)
            if bit is not None:
                plane = np.frombuffer(planes, np.uint8, n, (bit // 8) * n)
                np.bitwise_and(plane >> (bit % 8), 1, out=col.view(np.uint8))
            else:  # scattered over the data section
                whole = self.decode(value)[1] if whole is None else whole
                col[...] = whole[name]
        return start, n, cols

    def _columns_plan(self, names: tuple[str, ...]) -> _ColumnsPlan:
        """`decode_columns`' plan of the fields ``names``, made once per tuple of names (a
        scan calls it per batch: ~2 us a batch, 4 % of a 3-column scan of random values)."""
        spans = [(name, *span) for name in names if (span := self._spans[name]) is not None]
        plan = _ColumnsPlan(
            dtypes=[(name, self.layout.dtype[name]) for name in names],
            spans=spans,
            rest=[name for name in names if self._spans[name] is None],
            ranges=shuffled.packed_ranges(self._ranges(list(names))),
        )
        if len(self._plans) < 64:  # (a caller asking for ever new tuples of names gets no cache)
            self._plans[names] = plan
        return plan

    def _ranges(self, names: list[str]) -> list[tuple[int, int]]:
        """The data section's byte ranges of the fields ``names``: the planes `decode_columns`
        needs decompressed (all of them for a scattered field)."""
        out = []
        for name in names:
            span, bit = self._spans[name], self._bits.get(name)
            at, size = span if span is not None else (0, self._stride) if bit is None else (bit // 8, 1)
            out.append((at, at + size))
        return out

    def _to_capnp(self, records: np.ndarray, body: np.ndarray) -> None:
        """Copy ``records`` into ``body`` (n x data-section bytes): runs, then bools as bits."""
        raw = _bytes_of(records)
        for packed, at, size in self.layout.capnp_runs:
            body[:, at : at + size] = raw[:, packed : packed + size]
        for packed, bit in self.layout.capnp_bools:
            byte, mask = bit // 8, np.uint8(1 << (bit % 8))
            body[:, byte] = (body[:, byte] & ~mask) | np.where(raw[:, packed] != 0, mask, np.uint8(0))

    def _capnp_planes(self, records: np.ndarray) -> memoryview:
        """The shuffled data sections of ``records`` (what `shuffled.compress` of their
        `_to_capnp` copy would shuffle), without that copy: the records shuffled by their own
        size, each run's planes copied to its place, a bool a bit of its byte's plane, every
        other plane zero. A thread's scratch buffer (valid until its next batch)."""
        n, lay = len(records), self.layout
        if self._planes_in_place:
            flat = shuffled.scratch(n * self._stride, 2)
            shuffled.shuffle(_bytes_of(records).data, flat[: n * lay.record_size], lay.record_size)
            out = np.frombuffer(flat, np.uint8).reshape(self._stride, n)
            out[lay.record_size :] = 0
            for _packed, bit in lay.capnp_bools:
                plane = out[bit // 8]
                np.not_equal(plane, 0, out=plane.view(bool))
                plane <<= np.uint8(bit % 8)
            return flat
        planes = shuffled.scratch(n * lay.record_size, 1)
        shuffled.shuffle(_bytes_of(records).data, planes, lay.record_size)
        src = np.frombuffer(planes, np.uint8).reshape(lay.record_size, n)
        flat = shuffled.scratch(n * self._stride, 2)
        out = np.frombuffer(flat, np.uint8).reshape(self._stride, n)
        for lo, hi in self._zero_planes:
            out[lo:hi] = 0
        for packed, at, size in lay.capnp_runs:
            out[at : at + size] = src[packed : packed + size]
        for packed, bit in lay.capnp_bools:
            plane = out[bit // 8]
            plane |= (src[packed] != 0).view(np.uint8) << np.uint8(bit % 8)
        return flat

    def _records_of_planes(self, planes: bytes | bytearray | memoryview | None, n: int) -> np.ndarray:
        """The inverse of `_capnp_planes`: a new array of the ``n`` records whose shuffled
        data sections ``planes`` holds (None: no records) - each run's planes to its place in
        the records' own planes, a bool from its bit, then one unshuffle by the record size."""
        lay = self.layout
        out = np.empty(n, dtype=lay.dtype)
        if planes is None or not n:
            return out
        src = np.frombuffer(planes, np.uint8).reshape(self._stride, n)
        flat = shuffled.scratch(n * lay.record_size, 1)
        dst = np.frombuffer(flat, np.uint8).reshape(lay.record_size, n)
        for packed, at, size in lay.capnp_runs:
            dst[packed : packed + size] = src[at : at + size]
        for packed, bit in lay.capnp_bools:
            np.bitwise_and(src[bit // 8] >> np.uint8(bit % 8), 1, out=dst[packed])
        shuffled.unshuffle(flat, out.view(np.uint8).data, lay.record_size)
        return out

    def _as_records(self, view: np.ndarray) -> np.ndarray:
        """A new array of the layout's dtype holding the records of a ``capnp_dtype`` view."""
        out = np.zeros(len(view), dtype=self.layout.dtype)
        body = np.ascontiguousarray(view).view(np.uint8).reshape(len(view), self._stride)
        raw = out.view(np.uint8).reshape(len(out), self.layout.record_size)
        for packed, at, size in self.layout.capnp_runs:
            raw[:, packed : packed + size] = body[:, at : at + size]
        for packed, bit in self.layout.capnp_bools:
            raw[:, packed] = (body[:, bit // 8] >> (bit % 8)) & 1
        return out

    # --- reading a few records of a value -------------------------------------
    @property
    def reads_parts(self) -> bool:
        return self.compression == "none"

    def part_spans(self, lo: int, hi: int, size: int, count: int) -> list[tuple[int, int]] | None:
        if not self.reads_parts or size != message_size(self.layout, count) or not 0 <= lo <= hi <= count:
            return None
        return [(0, HEADER_BYTES), (HEADER_BYTES + lo * self._stride, (hi - lo) * self._stride)]

    def decode_part(self, parts: Sequence[memoryview], size: int, start: int, count: int) -> np.ndarray | None:
        """The records of ``parts`` (the bytes of `part_spans`: the header, then the records
        asked for) of an uncompressed value of ``size`` bytes said to hold ``count`` records
        from ``start``; None unless the value is exactly this layout's framing of them: its
        size and every byte of its header."""
        head, body = parts
        if self.compression != "none" or size != message_size(self.layout, count):
            return None
        expected = bytearray(HEADER_BYTES)
        write_header(expected, count, self._words, start)
        if head != expected:
            return None
        n = len(body) // self._stride
        if self._framable:
            return np.frombuffer(body, dtype=self.layout.dtype, count=n)
        return self._as_records(np.frombuffer(body, dtype=self._cdtype, count=n))


def _bounds(layout: Layout) -> list[int]:
    """Where the LZ4 blocks of a compressed value of ``layout`` split its data section: at
    the first and past-last byte of each field (of each element of a field Cap'n Proto
    scattered, of the byte holding a bool)."""
    out: list[int] = []
    for name in layout.dtype.names or ():
        span = layout.capnp_span(name)
        if span is not None:
            out += [span[0], span[0] + span[1]]
    for m in layout.capnp_members:
        if m.bits < 8 or layout.capnp_span(m.field) is None:
            at = m.bit // 8
            out += [at, at + max(m.bits // 8, 1)]
    return out


def _planes_in_place(layout: Layout, zero_planes: tuple[tuple[int, int], ...]) -> bool:
    """Whether the shuffled records of ``layout`` are the first planes of its data sections
    but for its bools' bytes (each a bool's own, at its packed offset) and zero planes past
    the record size (`CapnpSerializer._capnp_planes`)."""
    bools = layout.capnp_bools
    bool_bytes = {bit // 8 for _packed, bit in bools}
    return (
        all(packed == at for packed, at, _size in layout.capnp_runs)
        and all(bit // 8 == packed for packed, bit in bools)
        and len(bool_bytes) == len(bools)
        and all(lo >= layout.record_size or (hi - lo == 1 and lo in bool_bytes) for lo, hi in zero_planes)
    )


def _gaps(size: int, spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The ranges of ``[0, size)`` that none of the half-open ``spans`` covers."""
    covered = np.zeros(size, bool)
    for lo, hi in spans:
        covered[lo:hi] = True
    edges = np.flatnonzero(np.diff(np.concatenate(([True], covered, [True])).astype(np.int8)))
    return tuple((int(lo), int(hi)) for lo, hi in zip(edges[::2], edges[1::2]))


def _bytes_of(records: np.ndarray) -> np.ndarray:
    """The records' bytes as an (n, record size) uint8 array (a copy only if they are strided)."""
    records = np.ascontiguousarray(records)
    return records.view(np.uint8).reshape(len(records), records.dtype.itemsize)


def pycapnp_reader(layout: Layout, value: BytesLike) -> Any:  # pycapnp is untyped: its reader is Any
    """A pycapnp Batch reader over a stored value, with a traversal limit that fits it.

    Use as a context manager::

        with pycapnp_reader(layout, value) as batch:
            batch.start, len(batch.records)
    """
    words = len(memoryview(value).cast("B")) // 8 + 16
    return layout.capnp_module().Batch.from_bytes(value, traversal_limit_in_words=max(words, 8 * 1024 * 1024))
