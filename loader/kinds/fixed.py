"""The fixed-size record kind (``scidb96`` and every layout of a .toml file).

produce: the batch's records filled straight into the serializer's buffer (numpy);
items: one value per batch, table ``batches``, key = big-endian seq (model/placement.py);
checksum: `infra.checksums.batch_checksum` of the value (xxh3_64; a BLZ3 value: of its head).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import numpy as np

from ..infra.checksums import CHANGED, batch_checksum, value_ok
from ..model.placement import batch_key
from ..serializers import get_serializer
from .base import Kind, register_kind

#: zstd stores a run-length block of 128 KiB in 4 bytes: no codec compresses more
MAX_COMPRESSION_RATIO = 32768


@register_kind
class FixedKind(Kind):
    name = "fixed"
    formats = ("capnp", "arrow")
    compressions = ("none", "lz4", "zstd")
    default_format = "capnp"
    default_compression = "none"
    #: Cap'n Proto: records shuffled by byte, then LZ4 (serializers/shuffled.py): ~2 % of the
    #: bytes of scidb96 at ~2 GB/s per core, so a durable load writes ~1/50 of what it would;
    #: Arrow IPC's own LZ4 keeps ~38 % and is slower than none, so Arrow stays uncompressed
    default_compressions: ClassVar[dict[str, str]] = {"capnp": "lz4"}

    @classmethod
    def check(cls, layout, fmt: str, compression: str) -> None:
        get_serializer(fmt, layout, compression)  # rejects unsupported combinations

    def record_bytes(self) -> int:
        return self.layout.record_size

    def max_batch_records(self) -> int:
        """MAX_BATCH_BYTES of records, and at most what one value of the format may hold."""
        limit = super().max_batch_records()
        return min(limit, get_serializer(self.format, self.layout, self.compression).max_records or limit)

    def stored_problem(self, store, entry) -> str | None:
        seq, nbytes, checksum = entry.seq, entry.nbytes, entry.checksum
        v = store.get(batch_key(seq))
        if v is None:
            return "missing from the store"
        v = bytes(v)
        if len(v) != nbytes:
            return f"size {len(v)} != {nbytes} in the manifest"
        if not value_ok(v, checksum):
            return CHANGED
        return None

    def min_stored_bytes(self, source, records: int) -> int:
        """records x record size uncompressed (capnp pads records to words, Arrow stores
        every byte); compressed: that / 32768 (zstd's run-length blocks: no codec beats it)."""
        raw = max(0, records) * self.layout.record_size
        return raw if self.compression == "none" else raw // MAX_COMPRESSION_RATIO

    def writer(self, task) -> FixedWriter:
        return FixedWriter(self, task)


class FixedWriter:
    """Worker side of FixedKind (one per worker process)."""

    def __init__(self, kind: FixedKind, task):
        self.kind, self.task = kind, task
        self.ser = get_serializer(kind.format, kind.layout, kind.compression)
        self.table = "batches"
        #: id(source) -> (source, its filler): lookups done once per source (Source.filler)
        self.fillers: dict[int, tuple[object, Callable[[np.ndarray, int], None]]] = {}
        #: produce(reuse=True): a compressed Cap'n Proto value is new bytes, so a batch's
        #: buffer may be filled again once the batch is encoded; one buffer per batch size
        #: (a fresh one a batch costs its page faults: 20M gen://ticks, ~40 us a batch)
        self.reusable = kind.format == "capnp" and kind.compression != "none"
        self.reused: dict[int, tuple[object, np.ndarray]] = {}

    def prepare(self, s: int, store) -> None:
        # anything at or above the resume point is an uncommitted leftover of a failed run
        # (batches below it were synced and checkpointed: they are kept)
        store.delete_range(batch_key(self.task.resume_seq(s)), None)

    def produce(self, seq, first, count, source, off, reuse: bool = False):
        """(buffer, records) of batch ``seq``, filled from ``source``. ``reuse``: into one
        buffer per batch size, the same from batch to batch - for a caller that encodes each
        batch before it produces the next (loading/worker.py `_inline`), and only when the
        stored value is new bytes, never a view of the buffer (compressed Cap'n Proto)."""
        if reuse and self.reusable:
            made = self.reused.get(count)
            if made is None:
                made = self.reused[count] = self.ser.new_buffer(count)
            buf, recs = made
        else:
            buf, recs = self.ser.new_buffer(count)
        self._filler(source)(recs, off)
        return buf, recs

    def inline(self) -> tuple[Callable[..., Any], Callable[..., tuple[bytes, Any, int]]]:
        """(produce, encode_value) for a caller that encodes each batch before it produces
        the next (loading/worker.py `_inline`): a framable layout's LZ4 batches go through one
        `ReusedEncoder` per batch size, filled by the source's filler; the others take
        `produce` (reuse) and `encode_value`."""
        from ..serializers.capnp_framing import ReusedEncoder

        encoders: dict[int, ReusedEncoder | None] = {}
        reused = getattr(self.ser, "reused_encoder", None)

        def produce(seq: int, first: int, count: int, source: object, off: int) -> Any:
            if count not in encoders:
                encoders[count] = reused(count) if reused is not None else None
            enc = encoders[count]
            if enc is None:
                return self.produce(seq, first, count, source, off, True)
            self._filler(source)(enc.records, off)
            return enc

        def encode_value(seq: int, first: int, payload: Any) -> tuple[bytes, Any, int]:
            if type(payload) is not ReusedEncoder:
                return self.encode_value(seq, first, payload)
            value = payload.encode(first)
            return batch_key(seq), value, batch_checksum(value, hashed)

        hashed = self.ser.hashes_blocks
        return produce, encode_value

    def _filler(self, source) -> Callable[[np.ndarray, int], None]:
        """``source``'s filler (`Source.filler`), looked up once per source."""
        known = self.fillers.get(id(source))
        if known is None or known[0] is not source:
            known = self.fillers[id(source)] = (source, source.filler())
        return known[1]

    def encode(self, seq, first, count, payload, s):
        """(store items, manifest row, bytes for progress, skipped files)."""
        key, value, checksum = self.encode_value(seq, first, payload)
        return (
            [(key, value)],
            [seq, s, first, count, checksum, len(value)],
            count * self.kind.layout.record_size,
            [],
        )

    def encode_value(self, seq: int, first: int, payload) -> tuple[bytes, Any, int]:
        """(store key, stored value, its xxh3) of batch ``seq``: `encode` without the row."""
        buf, recs = payload
        value = self.ser.encode_buffer(buf, recs, first)
        return batch_key(seq), value, batch_checksum(value, self.ser.hashes_blocks)
