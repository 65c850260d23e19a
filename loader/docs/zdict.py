"""Per-value zstd compression with a trained dictionary (zstandard): lean magicless frames;
`Compressor`/`Decompressor` pickle as their description. Why and what it saves:
docs/design/documents.md. Pure: nothing here writes a store or a file."""

from __future__ import annotations

from collections.abc import Sequence

import zstandard

from ..errors import UsageError, VerifyError

DEFAULT_LEVEL = 3
DEFAULT_DICT_SIZE = 16 * 1024
#: bytes of samples to train on (zstd advises ~100x the dictionary size)
DEFAULT_SAMPLE_BYTES = 2 * 1024 * 1024
#: fewer samples than this: no dictionary (zstd's trainer needs a handful per ~KiB)
MIN_SAMPLES = 64

_FORMAT = zstandard.FORMAT_ZSTD1_MAGICLESS


def sample(values: Sequence, max_bytes: int = DEFAULT_SAMPLE_BYTES) -> list[bytes]:
    """An evenly spaced, deterministic sample of values, at most ~max_bytes in total."""
    n = len(values)
    if n == 0:
        return []
    total = 0
    # estimate the mean size from up to 256 evenly spaced values
    probe = [values[i] for i in range(0, n, max(1, n // 256))]
    mean = max(1, sum(len(v) for v in probe) // len(probe))
    want = max(1, min(n, max_bytes // mean))
    step = n / want
    out = []
    for j in range(want):
        v = bytes(values[int(j * step)])
        total += len(v)
        if total > max_bytes and out:
            break
        out.append(v)
    return out


def train(samples: Sequence[bytes], dict_size: int = DEFAULT_DICT_SIZE, level: int = DEFAULT_LEVEL) -> bytes:
    """A zstd dictionary (bytes) trained on samples; b"" when there is too little to train on."""
    if dict_size < 256:
        raise UsageError(f"zstd dictionary size {dict_size} is too small (at least 256 bytes)")
    samples = [bytes(s) for s in samples if len(s)]
    if len(samples) < MIN_SAMPLES or sum(map(len, samples)) < 4 * dict_size:
        return b""
    try:
        d = zstandard.train_dictionary(dict_size, samples, level=level)
    except zstandard.ZstdError:
        return b""  # e.g. "Src size is incorrect": nothing learnable; plain zstd then
    return d.as_bytes()


def dict_id(dict_bytes: bytes) -> int:
    """The id zstd gives a dictionary (0 for none / raw content)."""
    if not dict_bytes:
        return 0
    return zstandard.ZstdCompressionDict(dict_bytes).dict_id()


def _dict(dict_bytes: bytes):
    if not dict_bytes:
        return None
    return zstandard.ZstdCompressionDict(bytes(dict_bytes), dict_type=zstandard.DICT_TYPE_AUTO)


class Compressor:
    """Compress values one frame each, with a dictionary (picklable as (dict, level))."""

    def __init__(self, dict_bytes: bytes = b"", level: int = DEFAULT_LEVEL):
        if not -7 <= level <= 22:
            raise UsageError(f"zstd level {level} is out of range (-7..22)")
        self.dict_bytes = bytes(dict_bytes)
        self.level = int(level)
        params = zstandard.ZstdCompressionParameters.from_level(
            self.level, format=_FORMAT, write_checksum=0, write_content_size=1, write_dict_id=0
        )
        self._c = zstandard.ZstdCompressor(dict_data=_dict(self.dict_bytes), compression_params=params)

    def __reduce__(self):
        return (Compressor, (self.dict_bytes, self.level))

    def describe(self) -> dict:
        """What a manifest records (the dictionary itself is stored with the shard)."""
        return {
            "codec": "zstd-dict",
            "level": self.level,
            "dict_id": dict_id(self.dict_bytes),
            "dict_size": len(self.dict_bytes),
        }

    def compress(self, value) -> bytes:
        return self._c.compress(value)

    def compress_many(self, values: Sequence, threads: int = 0) -> list[bytes]:
        """Compress many values; threads > 0 (or -1: all CPUs) runs zstd's own threads."""
        if threads and len(values) > 1:
            out = self._c.multi_compress_to_buffer([bytes(v) for v in values], threads=threads)
            return [seg.tobytes() for seg in out]
        c = self._c.compress
        return [c(v) for v in values]


class Decompressor:
    """Decompress values written by a Compressor with the same dictionary."""

    def __init__(self, dict_bytes: bytes = b""):
        self.dict_bytes = bytes(dict_bytes)
        self._d = zstandard.ZstdDecompressor(dict_data=_dict(self.dict_bytes), format=_FORMAT)

    def __reduce__(self):
        return (Decompressor, (self.dict_bytes,))

    def decompress(self, value) -> bytes:
        try:
            return self._d.decompress(value)
        except zstandard.ZstdError as e:
            raise VerifyError(
                f"cannot decompress a stored value ({len(value)} bytes): {e}; "
                f"the value or the shard's dictionary is corrupt"
            ) from None

    def decompress_many(self, values: Sequence) -> list[bytes]:
        d = self.decompress
        return [d(v) for v in values]
