"""The C byte shuffle (loader.serializers._shuffle) against numpy's transpose, for any stride
and record count (the 8x8 blocks and the bytes and records they leave over), and its
refusals; and the compressed region round trip for both codecs on records of any stride."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.errors import VerifyError
from loader.serializers import _shuffle, shuffled


@settings(max_examples=150, deadline=None)
@given(stride=st.integers(1, 300), n=st.integers(0, 2100), seed=st.integers(0, 2**32 - 1))
def test_shuffle_is_numpys_transpose_and_unshuffle_its_inverse(stride, n, seed):
    src = np.random.default_rng(seed).integers(0, 256, n * stride, dtype=np.uint8).tobytes()
    dst, back = bytearray(len(src)), bytearray(len(src))
    _shuffle.shuffle(src, dst, stride)
    assert bytes(dst) == np.ascontiguousarray(np.frombuffer(src, np.uint8).reshape(n, stride).T).tobytes()
    _shuffle.unshuffle(dst, back, stride)
    assert bytes(back) == src


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((b"abcd", bytearray(4), 0), ValueError, "stride must be >= 1"),
        ((b"abcd", bytearray(5), 2), ValueError, "must be the same size"),
        ((b"abcde", bytearray(5), 2), ValueError, "not a whole number of 2-byte records"),
        ((b"abcd", b"efgh", 2), TypeError, None),  # a read-only destination
    ],
)
def test_shuffle_refuses_what_it_cannot_do(args, error, message):
    for fn in (_shuffle.shuffle, _shuffle.unshuffle):
        with pytest.raises(error, match=message):
            fn(*args)


@settings(max_examples=60, deadline=None)
@given(
    stride=st.integers(1, 200),
    n=st.integers(0, 3000),
    comp=st.sampled_from(["lz4", "zstd"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_compressed_region_decompresses_to_itself(stride, n, comp, seed):
    rng = np.random.default_rng(seed)
    src = (rng.integers(0, 4, n * stride, dtype=np.uint8) * rng.integers(0, 2, 1, dtype=np.uint8)).tobytes()
    chunk = shuffled.compress(src, comp, stride)
    out = bytearray(len(src))
    shuffled.decompress_into(chunk, out, stride, "region")
    assert bytes(out) == src
    if n:
        with pytest.raises(VerifyError, match="region: "):
            shuffled.decompress_into(chunk, bytearray(len(src) + stride), stride, "region")


@pytest.mark.parametrize("stride", [4, 8])
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 1000, 10001])
def test_unshuffle_of_one_numeric_field_is_numpys_transpose(stride, n):
    """Strides 4 and 8 (a scan's column from its byte planes) take their own SSE2 path."""
    rec = np.random.default_rng(n).integers(0, 256, n * stride, dtype=np.uint8).tobytes()
    planes = np.ascontiguousarray(np.frombuffer(rec, np.uint8).reshape(n, stride).T).tobytes()
    back = bytearray(len(rec))
    _shuffle.unshuffle(planes, back, stride)
    assert bytes(back) == rec
