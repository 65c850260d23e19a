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


def blz1(region: bytes, stride: int) -> bytes:
    """The compressed region as the BLZ1 framing stored it (one LZ4 block of every plane)."""
    import lz4.block

    planes = np.ascontiguousarray(np.frombuffer(region, np.uint8).reshape(-1, stride).T).tobytes()
    head = shuffled._HEAD.pack(shuffled.MAGIC_V1, 1, stride, len(region))
    return head + lz4.block.compress(planes, store_size=False)


@settings(max_examples=60, deadline=None)
@given(
    stride=st.integers(1, 120),
    n=st.integers(1, 3000),
    framing=st.sampled_from(["lz4", "zstd", "blz1"]),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_a_scan_decodes_the_planes_it_unshuffles(stride, n, framing, seed, data):
    """planes_of: LZ4 decoded into the thread's reused buffer (BLZ2: the blocks holding the
    planes asked for; BLZ1: up to the last of them); unshuffle_fields: each field from its planes."""
    rng = np.random.default_rng(seed)
    rec = (rng.integers(0, 256, n * stride, dtype=np.uint8) * rng.integers(0, 2, n * stride, dtype=np.uint8)).tobytes()
    full = np.ascontiguousarray(np.frombuffer(rec, np.uint8).reshape(n, stride).T).tobytes()
    blocks = shuffled.cuts(data.draw(st.lists(st.integers(1, stride), max_size=6)), stride)
    chunk = blz1(rec, stride) if framing == "blz1" else shuffled.compress(rec, framing, stride, blocks)
    at = data.draw(st.integers(0, stride - 1))
    w = data.draw(st.integers(1, stride - at))
    planes = shuffled.planes_of(chunk, n * stride, stride, "region", shuffled.packed_ranges([(at, at + w), (0, 1)]))
    assert bytes(memoryview(planes)[at * n : (at + w) * n]) == full[at * n : (at + w) * n]
    out, also = bytearray(n * w), bytearray(n)
    shuffled.unshuffle_fields(planes, n, [(at, w, memoryview(out)), (0, 1, memoryview(also))])
    recs = np.frombuffer(rec, np.uint8).reshape(n, stride)
    assert bytes(out) == recs[:, at : at + w].tobytes() and bytes(also) == recs[:, 0].tobytes()
    if framing != "zstd":
        assert len(planes) == n * stride and not isinstance(planes, bytes)  # the reused buffer
        with pytest.raises(VerifyError, match="region: compressed records"):
            shuffled.planes_of(chunk[:-1], n * stride, stride, "region", shuffled.packed_ranges([(0, stride)]))


def test_lz4_planes_and_unshuffle_fields_refuse_what_they_cannot_do():
    import lz4.block

    block = lz4.block.compress(bytes(1000), store_size=False)
    assert _shuffle.lz4_planes(block, bytearray(1000), 100) >= 100
    with pytest.raises(ValueError, match="not within the 1000 of dst"):
        _shuffle.lz4_planes(block, bytearray(1000), 1001)
    with pytest.raises(ValueError, match="the LZ4 block is damaged"):
        _shuffle.lz4_planes(block, bytearray(999), 999)  # it holds more than dst
    with pytest.raises(ValueError, match="planes"):
        _shuffle.unshuffle_fields(bytes(80), 10, [(7, 2, bytearray(20))])  # past the planes
    with pytest.raises(ValueError, match="into 19 bytes"):
        _shuffle.unshuffle_fields(bytes(80), 10, [(0, 2, bytearray(19))])
    with pytest.raises(TypeError):
        _shuffle.unshuffle_fields(bytes(80), 10, [(0, 2, bytes(20))])  # read-only


_C2 = shuffled.cuts((), 2)
_C8 = shuffled.cuts((), 8)
_TMP8 = shuffled._tmp_bytes(8000, 8)
_P8 = (b"", b"", bytes(8000), bytearray(8000), 0, _C8, bytearray(_TMP8))  # 1,000 records' planes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((b"", b"h", b"abc", bytearray(3), 2, _C2, bytearray(0)), "whole number"),
        ((b"", b"h", b"abcd", bytearray(3), 2, _C2, bytearray(0)), "scratch holds 3 bytes"),
        ((b"", b"h", b"abcd", bytearray(4), -1, _C2, bytearray(0)), "cuts must rise"),
        ((b"", b"h", b"abcd", bytearray(4), 2, shuffled.cuts((), 4), bytearray(0)), "cuts must rise"),  # another stride
        ((b"", b"h", b"abcd", bytearray(4), 2, b"\0\0\0\0", bytearray(0)), "cuts must rise"),  # no block
        (
            (b"", b"h", b"abcd", bytearray(4), 2, bytes([0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]), bytearray()),
            "cuts",
        ),
        ((b"", b"h", bytes(4096), bytearray(4096), 2, _C2, bytearray(4096)), "tmp holds 4096 bytes, the blocks need"),
        # records beside the planes: n records of rsize <= the planes' stride bytes, stride 0
        ((*_P8, bytes(999 * 8), 8), "records of 8 bytes do not match"),
        ((*_P8, bytes(1000 * 9), 9), "records of 9 bytes"),
        ((*_P8, bytes(1000 * 8), 0), "records of 0 bytes"),
        ((*_P8, bytes(7), 7), "records of 7 bytes"),
        ((b"", b"", bytes(8000), bytearray(8000), 8, _C8, bytearray(_TMP8), bytes(8000), 8), "records of 8"),
    ],
)
def test_lz4_blocks_refuses_what_it_cannot_do(args, message):
    with pytest.raises(ValueError, match=message):
        _shuffle.lz4_blocks(*args)
