"""The BLZ3 framing of LZ4 values (loader/serializers/shuffled.py): a block per run of planes
(a field's), each in the smallest of four modes, with a table a reader checks whole and
each block's xxh3, then decodes only the blocks of the planes a scan asks for (each checked
by its hash first); and BLZ1 values (one LZ4 block of every plane, written before) still
read, whole and by columns.

- Conformance: the table, hashes and blocks parsed here from the format's description
  (python-lz4 for the blocks, python-xxhash for the hashes) give the shuffled records, for
  any stride, cuts and record bytes.
- A scan decodes only the blocks holding its planes (the others stay as they were).
- Each block takes the mode that stores it smallest: planes, unshuffled records (whole
  values that repeat), a dictionary (few distinct values: test_dict_blocks.py), raw
  (random bytes).
- Random layouts round-trip through both framings, whole and by columns.
- A damaged table or block is a VerifyError saying which block, never a crash.
"""

from __future__ import annotations

import base64
import itertools
import struct
from pathlib import Path

import lz4.block
import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.errors import VerifyError
from loader.model.layouts import Field, Layout, get_layout
from loader.serializers import shuffled
from loader.serializers.capnp_framing import HEADER_BYTES, CapnpSerializer
from loader.sources.generators import generate

from .test_capnp_planes import FIELDS, layout_of
from .test_shuffle import blz1

_ENTRY = struct.Struct("<IIB3xI")
RAW, PLANES, RECORDS, DICT = 0, 1, 2, 3


def encoded(ser: CapnpSerializer, records: np.ndarray, start: int = 0) -> bytes:
    """The stored value of a batch of ``records`` (encoded as a load does)."""
    buf, view = ser.new_buffer(len(records))
    view[...] = records
    return bytes(ser.encode_buffer(buf, view, start))


def table(value: bytes) -> list[tuple[int, int, int, int]]:
    """(lo, hi, mode, compressed bytes) of each block of a BLZ2/3 region (after its 20-byte head)."""
    k, zero = struct.unpack_from("<II", value, shuffled.HEAD_BYTES)
    assert zero == 0
    return [_ENTRY.unpack_from(value, shuffled.HEAD_BYTES + 8 + 16 * j) for j in range(k)]


def planes_by_hand(value: bytes, n: int) -> bytes:
    """The shuffled records of a BLZ2/3 region, decoded block by block as the format says
    (BLZ3: each block's xxh3_64 after the table, checked)."""
    entries = table(value)
    k = len(entries)
    hashed = value[:4] == b"BLZ3"
    hashes = struct.unpack_from(f"<{k}Q", value, shuffled.HEAD_BYTES + 8 + 16 * k) if hashed else None
    pos, out = shuffled.HEAD_BYTES + 8 + (24 if hashed else 16) * k, b""
    for j, (lo, hi, mode, size) in enumerate(entries):
        block, w = value[pos : pos + size], hi - lo
        assert hashes is None or xxhash.xxh3_64_intdigest(block) == hashes[j]
        if mode == RAW:
            out += block
        elif mode == PLANES:
            out += lz4.block.decompress(block, uncompressed_size=w * n)
        elif mode == DICT:
            out += dict_planes_by_hand(block, n, w)
        else:
            recs = np.frombuffer(lz4.block.decompress(block, uncompressed_size=w * n), np.uint8).reshape(n, w)
            out += np.ascontiguousarray(recs.T).tobytes()
        pos += size
    assert pos == len(value)
    return out


def dict_planes_by_hand(block: bytes, n: int, w: int) -> bytes:
    """The planes of a dictionary block (mode 3) of ``n`` records of ``w`` bytes, as the
    format says: u32 d, u8 coding, 3 zero bytes, d values of w bytes, the index planes
    (1 byte an index if d <= 256, else 2: low bytes, then high bytes), raw or LZ4."""
    d, coding = struct.unpack_from("<IB3x", block)
    iw = 1 if d <= 256 else 2
    values = np.frombuffer(block, np.uint8, d * w, 8).reshape(d, w)
    index = block[8 + d * w :]
    if coding == 1:
        index = lz4.block.decompress(index, uncompressed_size=n * iw)
    assert len(index) == n * iw
    lo = np.frombuffer(index, np.uint8, n).astype(np.int64)
    at = lo if iw == 1 else lo | np.frombuffer(index, np.uint8, n, n).astype(np.int64) << 8
    return np.ascontiguousarray(values[at].T).tobytes()


def region_of(rng: np.random.Generator, n: int, stride: int) -> bytes:
    """Records whose byte columns are, each, random, constant, a few values or small."""
    kinds = rng.integers(0, 4, stride)
    cols = [
        rng.integers(0, 256, n, dtype=np.uint8),
        np.full(n, rng.integers(0, 256), np.uint8),
        rng.choice(rng.integers(0, 256, 3, dtype=np.uint8), n),
        rng.integers(0, 2, n, dtype=np.uint8),
    ]
    return np.stack([cols[k] if k != 0 else rng.integers(0, 256, n, dtype=np.uint8) for k in kinds], 1).tobytes()


@settings(max_examples=80, deadline=None)
@given(
    stride=st.integers(1, 100),
    n=st.integers(0, 5000),
    bounds=st.lists(st.integers(0, 120), max_size=12),
    seed=st.integers(0, 2**32 - 1),
    prefix=st.binary(max_size=48),
)
def test_lz4_values_are_a_table_and_a_block_per_run_of_planes(stride, n, bounds, seed, prefix):
    region = region_of(np.random.default_rng(seed), n, stride)
    blocks = shuffled.cuts(bounds, stride)
    value = shuffled.lz4_value(prefix, region, stride, blocks)
    assert value[: len(prefix)] == prefix
    body = value[len(prefix) :]
    assert body[: shuffled.HEAD_BYTES] == shuffled._HEAD.pack(b"BLZ3", 1, stride, len(region))
    points = sorted({0, stride, *(b for b in bounds if 0 < b < stride)})
    assert [(lo, hi) for lo, hi, _m, _s in table(body)] == list(itertools.pairwise(points))
    planes = np.frombuffer(region, np.uint8).reshape(n, stride).T.tobytes()
    assert planes_by_hand(body, n) == planes
    assert shuffled.lz4_value(prefix, region, stride, blocks) == value  # the scratch's old bytes never leak in
    out = bytearray(len(region))
    shuffled.decompress_into(body, memoryview(out), stride, "test")
    assert bytes(out) == region
    assert shuffled.decompressed_planes(body, len(region), stride, "test") == (planes if n else None)


@pytest.mark.parametrize("n", [1, 100, 10000])
def test_a_scan_decodes_only_the_blocks_of_the_planes_it_asks_for(n):
    stride = 24
    region = region_of(np.random.default_rng(n), n, stride)
    planes = np.frombuffer(region, np.uint8).reshape(n, stride).T.tobytes()
    value = shuffled.compress(region, "lz4", stride, shuffled.cuts([8, 12, 16], stride))
    for ranges, decoded in [([(9, 10)], [(8, 12)]), ([(0, 1), (16, 17)], [(0, 8), (16, 24)]), ([(8, 16)], [(8, 16)])]:
        shuffled.scratch(n * stride, 3)[:] = b"\xa5" * (n * stride)  # what planes_of decodes into
        got = bytes(shuffled.planes_of(value, n * stride, stride, "scan", shuffled.packed_ranges(ranges)))
        todo = bytearray(b"\xa5" * (n * stride))
        for lo, hi in decoded:
            todo[lo * n : hi * n] = planes[lo * n : hi * n]
        assert got == bytes(todo)


def test_each_block_takes_the_mode_that_stores_it_smallest():
    """Prices among a few hundred values: a dictionary of them and a byte an index; 12-byte
    values among a few hundred (no dictionary of that width) repeat whole (LZ4 of the
    records finds them, in under 4/5 of the planes' bytes); counters' planes are runs (LZ4
    of the planes); random bytes are stored raw."""
    n = 10000
    rng = np.random.default_rng(7)
    lay = Layout(
        "m",
        (Field("price", "float64"), Field("count", "int64"), Field("noise", "uint64"), Field("tag", "bytes[12]")),
    )
    recs = np.zeros(n, lay.dtype)
    recs["price"] = rng.choice(np.round(rng.uniform(10, 500, 300), 2), n)
    recs["count"] = np.arange(n)
    recs["noise"] = rng.integers(0, 2**64 - 1, n, dtype=np.uint64)
    recs["tag"] = rng.integers(0, 256, (300, 12), dtype=np.uint8).view("S12")[rng.integers(0, 300, n), 0]
    ser = CapnpSerializer(lay, "lz4")
    value = encoded(ser, recs)
    assert [(lo, hi, mode) for lo, hi, mode, _s in table(value[HEADER_BYTES:])] == [
        (0, 8, DICT),
        (8, 16, PLANES),
        (16, 24, RAW),
        (24, 36, RECORDS),
        (36, 40, PLANES),  # (the padding: zeros)
    ]
    assert planes_by_hand(value[HEADER_BYTES:], n) == shuffled.decompressed_planes(
        value[HEADER_BYTES:], n * ser._stride, ser._stride, "t"
    )
    assert ser.decode(value)[1].tobytes() == recs.tobytes()
    _first, _n, cols = ser.decode_columns(value, ["price", "noise", "tag"])
    for name in ("price", "noise", "tag"):
        assert cols[name].tobytes() == recs[name].tobytes(), name


def test_ticks_take_fewer_bytes_than_in_one_block_of_planes():
    lay = get_layout("ticks")
    recs = generate(lay, 0, 10000)
    ser = CapnpSerializer(lay, "lz4")
    value = encoded(ser, recs)
    planes = shuffled.decompressed_planes(value[HEADER_BYTES:], len(recs) * ser._stride, ser._stride, "t")
    assert planes is not None
    one_block = shuffled.HEAD_BYTES + len(lz4.block.compress(bytes(planes), store_size=False))
    assert len(value) - HEADER_BYTES < 0.9 * one_block
    modes = {lo: mode for lo, _hi, mode, _size in table(value[HEADER_BYTES:])}
    assert [modes[ser._spans[name][0]] for name in ("sym", "price")] == [DICT] * 2


def test_a_field_stored_as_records_decompresses_straight_into_its_column():
    """decode_columns of a mode-2 block (ticks' price): LZ4 into the column, in the same C call
    as the other fields' unshuffle; its planes are never written; whole decodes agree."""
    lay = get_layout("ticks")
    recs = generate(lay, 0, 10000)
    ser = CapnpSerializer(lay, "lz4")
    value = encoded(ser, recs)
    n, at = len(recs), ser._spans["price"][0]
    shuffled.scratch(n * ser._stride, 3)[:] = b"\xa5" * (n * ser._stride)
    _first, _n, cols = ser.decode_columns(value, ["price", "size", "halted"])
    assert bytes(shuffled.scratch(n * ser._stride, 3)[at * n : (at + 8) * n]) == b"\xa5" * (8 * n)
    for name in ("price", "size", "halted"):
        assert cols[name].tobytes() == recs[name].tobytes(), name
    assert ser.decode(value)[1].tobytes() == recs.tobytes()


def test_columns_decode_into_the_callers_contiguous_arrays_and_never_lose_a_strided_one():
    """decode_columns fills an ``out`` column in place when it is a contiguous array of the
    batch's length (the C decoder writes into its buffer); a strided one is left alone and the
    result is a new array - the caller copies it in. (Before, a strided column raised numpy's
    ValueError from the byte view the decoder was handed.)"""
    lay = get_layout("ticks")
    recs = generate(lay, 0, 5000)
    ser = CapnpSerializer(lay, "lz4")
    value = encoded(ser, recs)
    n = len(recs)
    flat, wide = np.zeros(n, np.float64), np.zeros(2 * n, np.float32)
    out = {"price": flat, "bid": wide[::2], "size": np.zeros(n + 1, np.int32)}
    _first, _n, cols = ser.decode_columns(value, ["price", "bid", "size"], out)
    assert cols["price"] is flat  # contiguous, n values: in place
    assert cols["bid"] is not out["bid"] and cols["size"] is not out["size"]
    for name in ("price", "bid", "size"):
        assert cols[name].tobytes() == recs[name].tobytes(), name
    assert not wide.any()  # the strided column was not written


def test_a_scan_of_a_scattered_field_reads_it_beside_the_others():
    """A field Cap'n Proto scattered is picked from a whole decode, made while decode_columns
    holds the planes of the others (the same planes: the same thread's buffer)."""
    lay = Layout("s", (Field("f0", "bool"), Field("f1", "int16"), Field("f2", "bytes[3]"), Field("f3", "float64")))
    assert lay.capnp_span("f2") is None
    n = 5000
    rng = np.random.default_rng(3)
    recs = np.zeros(n, lay.dtype)
    recs["f0"] = rng.integers(0, 2, n)
    recs["f1"] = rng.integers(0, 9, n)
    recs["f2"] = [bytes(rng.integers(0, 256, 3, dtype=np.uint8)) for _ in range(n)]
    recs["f3"] = rng.choice([1.5, 2.25, 1e9], n)
    ser = CapnpSerializer(lay, "lz4")
    value = encoded(ser, recs)
    _first, _n, cols = ser.decode_columns(value, ["f2", "f0", "f1", "f3"])  # f0 (a bool): from the planes, after
    for name in lay.dtype.names:
        assert cols[name].tobytes() == recs[name].tobytes(), name


def blz2_of(value: bytes) -> bytes:
    """The BLZ2 value (the framing before BLZ3: no block hashes) of the BLZ3 ``value``."""
    k = struct.unpack_from("<I", value, HEADER_BYTES + 20)[0]
    hashes = _T + 8 + 16 * k
    return value[:HEADER_BYTES] + b"BLZ2" + value[HEADER_BYTES + 4 : hashes] + value[hashes + 8 * k :]


@pytest.mark.parametrize("framing", ["blz3", "blz2", "blz1"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fields=FIELDS,
    n=st.integers(0, 3000),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_random_layouts_read_back_whole_and_by_columns_from_both_framings(framing, fields, n, seed, data):
    layout = layout_of(fields)
    raw = np.random.default_rng(seed).integers(0, 256, n * layout.record_size, dtype=np.uint8)
    raw[: len(raw) // 2] &= 3  # compressible records, and random ones
    records = raw.view(layout.dtype)
    ser = CapnpSerializer(layout, "lz4")
    value = encoded(ser, records, 7)
    assert value[HEADER_BYTES : HEADER_BYTES + 4] == b"BLZ3"
    _start, whole = ser.decode(value)
    if framing == "blz2":
        value = blz2_of(value)
    if framing == "blz1":
        region = shuffled.decompressed_planes(value[HEADER_BYTES:], n * ser._stride, ser._stride, "t")
        records_region = np.frombuffer(region or b"", np.uint8).reshape(ser._stride, n).T.tobytes()
        value = value[:HEADER_BYTES] + blz1(records_region, ser._stride)
    start, back = ser.decode(value)
    assert start == 7 and back.tobytes() == whole.tobytes()
    names = data.draw(st.lists(st.sampled_from(list(layout.dtype.names)), min_size=1, unique=True))
    first, count, cols = ser.decode_columns(value, names)
    assert (first, count) == (7, n)
    for name in names:
        assert cols[name].tobytes() == whole[name].tobytes(), name
    if layout.framable:
        out = np.empty(n, layout.dtype)
        assert ser.decode_into(value, out) == 7 and out.tobytes() == whole.tobytes()


def batch_of(rng: np.random.Generator, kind: str, n: int, size: int) -> np.ndarray:
    """n records of ``size`` bytes: among a few (every field a dictionary), random (raw),
    counting (planes that compress), or a few with random bytes in half of them."""
    if kind == "random":
        return rng.integers(0, 256, (n, size), dtype=np.uint8)
    if kind == "counting":
        return ((np.arange(n)[:, None] >> np.arange(size) % 16) & 0xFF).astype(np.uint8)
    pool = rng.integers(0, 256, (int(rng.integers(1, 300)), size), dtype=np.uint8)
    raw = pool[rng.integers(0, len(pool), n)]
    if kind == "half":
        raw[:, : size // 2] = rng.integers(0, 256, (n, size // 2), dtype=np.uint8)
    return raw


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fields=FIELDS,
    seed=st.integers(0, 2**32 - 1),
    batches=st.lists(
        st.tuples(st.sampled_from(["few", "random", "counting", "half"]), st.integers(400, 3000)),
        min_size=1,
        max_size=4,
    ),
)
def test_dictionaries_read_from_the_records_store_what_they_would_from_the_planes(fields, seed, batches):
    """Batches encoded as a load does - a field stored as a dictionary reads its values in
    the records, not in unshuffled planes - are byte for byte the values of their planes
    alone, for any layout (bools: bits in the planes; nullable fields; padding) and any
    sequence of batches through one serializer (a field that stops being a dictionary)."""
    layout = layout_of(fields)
    rng = np.random.default_rng(seed)
    ser = CapnpSerializer(layout, "lz4")
    for kind, n in [("few", 2000), *batches]:
        records = batch_of(rng, kind, n, layout.record_size).reshape(-1).view(layout.dtype)
        value = encoded(ser, records, 3)
        planes = bytearray(ser._capnp_planes(records))
        alone = shuffled.compress_planes(planes, "lz4", ser._stride, ser._blocks_of(n), prefix=value[:HEADER_BYTES])
        assert value == alone, kind
        if layout.dtype.names and not layout.capnp_bools:
            assert ser.decode(value)[1].tobytes() == records.tobytes()


#: values main's code (BLZ1) wrote: 64 ticks records from 1000, and 64 scidb96 records from 1000
GOLDEN_BLZ1 = {
    "ticks": (
        "AAAAAIQBAAAAAAAAAQABAOgDAAAAAAAAAQAAAAcMAAAAAQAABgAAAEJMWjEBAAAAMAAAAAAMAAAAAAAA//81ARuUcX7k+9CdK+Ud0iC+nGFv"
        "Mk1dkA6RGK/+kdNBQWOdpz9uaxglkQDv2vWd4sMj3sqhu3//v23iwxnhxAwyy4siFMEd/czqjoIvxZlUMbjWDw5UqRNkEjeb45CRxJQs3VxK"
        "HCxDiSBYoeIAlGn9upDjYo1XFGPb1cZAmi9oxY2HWvk8nDfFq+Md4do3Ob4iu+JN2/gpi5eSRycUkE4ZzHUPXNRotx0tGYicv3wD7Y0DuNCo"
        "39HJNiyOCXBnk192Rl2y7RdcpeYBQZG7ClNzuAc3W4/lAkl0uu9dZs3nIWeNzzNohdImNZbC91R/v+4zTbXW+Fxu3Ro1a8PoPni3x0lJSUlK"
        "SkpKS0tLS0xMTExNTU1NTU5OTk5OT09PT1BQUFBRUVFRUlJSUlJTU1NTVFRUVFRVVVVWVlZWVldXV1fx8fEDACofhgEALB8YAQAs8cJHVlBU"
        "SlVXR01UTUJKTkFNVEpNVUpNSk1NTkdNVkpVWFZCTU5OSkpXSkpKUFdBR0pWUEpWSk1KWFZVV1hNQVhKTwBHU05OTU9BU0VSUFZNU1NORU5O"
        "QU5FRVZPRQBOTk8AUlNWVk5OTVBQUEdNQU9OAEdOAFBBTk8ATk1PU01PTk8AAExKSFRPAExUS01EWkZMSlRISgBKVFRET1QASkhNAEtGRERK"
        "SlRNTU0AVFBPSgAASgBNAEpNAEhUTUZaTUpHAABBAAAARwBBQS4AQU5UQQ8AcABBQUFHQQABADIuVEEJAFEAAABMRwcABAIAJFROCgABAgAR"
        "QgYADAIADxYAAw8CALf//7XDH6QAPT24Pc0AuKRIXFxmUhRxSPbNKQquM+GaSD1ISB+4XGbs9hRI7K7hXFKPmin2H2bNXFwKXEhxZs0f1xQA"
        "9YVwAAoKHgrMAB5w4Y+PZriuPeEozFzXRzN6meEK4eGFHo9mUSiu4VFHeo+4wplcKIVmzI+P14/hPWbMhaOuACjrPQDX14XXzACFPXrCwmYe"
        "Rwp6XMyPo+EzFJl613p664XCZrhcR3q44RTCHvWZj1zrZszCwqPCegpmzOtwRwBcUQoAo6Pro8wA6woU9fVmheHXFI/MwnB6M66ZFKMUFFHr"
        "9WYej+EUHnqu9YUomcKPUWbM9fVw9RTXZsxRPeEAj7jXAHBwUXDMAFHXrigoZut6o67CzPU9FDNHma5wrq64UShmhcJ6roUURyjrXJn1wrhm"
        "zCgoPSiuo2bMuAp6iFKm6xApTZCV7BjEs1fEeOYRGCwPlQQYGl6TGVUHKxdXxnRsVgsVZK+zrqlscZcRVKUWUrScDBpULXAWdM4nBGVxZG5j"
        "gFBlfG5/eWhdZnluY3+AY3xjf39dZX9xY4BccXl5XV1jY1BoaGhkUGdlY3FkY3FofGNccYBQXHlmXGNAQEBABAAp/28U9D14pLxAhAqEpCA0"
        "BzSQpMhAjLxAeOhMIIxspGC4jMjoLGSYsMi8gGAgePTQNljEHTSQvLyAAngT6GQ1WAPIAAEABQYCBgMAAwYDCAAIAQYABgoCBgUDBAMKBwYJ"
        "CwoAAwEACAQAAgwJAwUBBwACCQAIAQICDAAFAAMAAAJHA2/xuXGkMylxPQoA9ri4uAoUuACFH48zM4VIZs1Ie/auw5pSKewA7LiaZrgze4UA"
        "KR9Srh+FFOy4KSmPKeHhFEiF10g9kDNcfUpXgKhevh6Xrh7AK4XCY3OrIcbM4ZTIpzVZuLwxoFGeWaYec5RrQFyFuIelK66Rntxcwpxqeq6h"
        "ayMhLIoldxgBgizkd/jOReo2y3cY+AEY5Bj4+Oos+IoYAeCKzsvr6hgYg0VFRSWDOywYiiUYikXkGOCKAYPgyzbhGENDQ0NDREJDCAARQgYA"
        "EUQGAAEMAAEZACNCQg4AARMAAgIAMkJDRBcA/3GPUlJIj80AHxQUSGZmzdeP4ZofCq6khfYKALiF7B9xj7iaH6SuuMP2rtfDe2aacew9pHF7"
        "FGZmSGYAXFKFAM1mQpg4YYJMgIWubsEmpswjwjqZxWeHsCvI1wCey7FFXcK+OaVwx161KIejdVRmmb2RqjC9lK7mZuGmcI+4q4BMJgABBh/r"
        "AAFT/zHiEihJBEAIQmsgDiSlCAMOgEkVQASiIRgUQBkGCJCAJSoIABFwyBBAQxIAMAMJCAFQgDDAIQCiECEI4aOC0oeBwgIt/zENCw0BDgEH"
        "CgcNEA4PCAYMCg4IBBAADwAIBAUCAgANCQIMCA8ADQ8NAA4FCgQBBQMOCg8FAgIICQIABQwBCgYLgAAtHwEBAAExAAEAFwACBgABDQADCwAG"
        "AgADEQAPgAAtDwIA/2lQAAAAAAA="
    ),
    "scidb96": (
        "AAAAAAQDAAAAAAAAAQABAOgDAAAAAAAAAQAAAAcYAAAAAQAADAAAAEJMWjEBAAAAYAAAAAAYAAAAAAAAHwABAP8t/zJASFBYYGhweICIkJig"
        "qLC4wMjQ2ODo8PgABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fICEiIyQlJicjwEABB+QAQAUH0ABACwP/wH/LQ8AAi4fnwEABB+g"
        "AQAUD/8BLA8AAv8vHzgBAiwP/wMEDwEEFg8AAv8u9VCAIshyINKIQgDCiFIg8siigGJIMiASCAIAAQQJEBkkMUBRZHmQqcThACFEaZC55BFA"
        "caTZEEmEwQBBhMkQWaTxhJSjs8PS4vICESExQVBgcICQoLDA0ODwAAgQGCAoMB8C8wqBiZGZoamxusLK0trj6/P7BAwUHCUtNT0uAQAbLwEA"
        "HzABAAwTMQEAH0EBACwPAAT/Lg8CAAQfgAIAAg8tAADxIiQmKCosLjAxMjM0NTY3ODk6Ozw9Pj9AQEFBQkJDQ0RERUVGRkdHSEhJSUpKSwDw"
        "AAhVCBUiNwAPAAQaLQA/LwAPkwAADwIA/xw5QIDABAAPPgEOChkC/wJYWFhYWVlZWVpaWlpbW1tbXOQBAA8bAgkO0QEO5AEPAgAJD68ADg8C"
        "AP9NPSwuMPIBDxEAGQDDCQzyAQ3nAw8RAAgP3wH/TQ8CAA4f8AMALBA//wEPAwAoD6EADg8CAP8NBvEJSBAgMEABCg8QABMUegEAG3sBABt8"
        "AQAbfQEAEn4BAA/cBQkPAgARD98B7f940LKUdlg6HP7gwqSGaEosDvDStJZ4WjweAOLEpohqTC4Q8tS2mHpcPiAC5MaoimxOMBL01riafF5A"
        "IgTmyKqMbuLp8Pf+BQwSGSAnLjU8Q0pQV15lbHN6gYiOlZyjqrG4v8XM09rh6O/2/QMKERgfJi00OkFIT1ZdZGtyeH+GjZQqKioqKisrAgAQ"
        "HywBAAIP/wssv0EAAQIDBAUGBwgJCgAjD0ACrfYJ6Onq6+zt7u/w8fLz9PX29/j5+vv8/f7/DgH/EAoLDA0ODxAREhMUFRYXGBkaGxwdHh8g"
        "ISIjJCUmJwMBAAQfBAEAFA9AAW7/MBEiM0RVAhMkNUZXBBUmN0hZBhcoOUpbCBkqO0xdChssPU5fDB0uP1BhDh8wQVJjECEyQ1QBEiM0RVYD"
        "FCU2R8AAbg8CAC3/MA0aJzRBTlsEER4rOEVSXwgVIi88SVZjDBkmM0BNWgMQHSo3RFFeBxQhLjtIVWILGCUyP0xZAg8cKTZDUF0GE38ALQ8C"
        "AGhQAAAAAAA="
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_BLZ1))
def test_values_of_the_older_blz1_framing_read_whole_and_by_columns(name):
    lay = get_layout(name)
    value = base64.b64decode(GOLDEN_BLZ1[name])
    assert value[HEADER_BYTES : HEADER_BYTES + 4] == b"BLZ1"
    reads_back(CapnpSerializer(lay, "lz4"), value, 1000, generate(lay, 1000, 64))


def reads_back(ser: CapnpSerializer, value: bytes, start: int, expected: np.ndarray) -> None:
    """``value`` decodes to the records ``expected`` from ``start``: whole, into a given
    array (a framable layout) and by columns (all, one, the last two)."""
    first, back = ser.decode(value)
    assert first == start and back.tobytes() == expected.tobytes()
    names = list(ser.layout.dtype.names)
    for asked in (names, names[2:3], names[-2:]):
        first, n, cols = ser.decode_columns(value, asked)
        assert (first, n) == (start, len(expected))
        for f in asked:
            assert cols[f].tobytes() == expected[f].tobytes(), f
    if ser.layout.framable:
        out = np.empty(len(expected), ser.layout.dtype)
        assert ser.decode_into(value, out) == start and out.tobytes() == expected.tobytes()


GOLDEN_BLZ2 = Path(__file__).parent.parent / "data" / "blz2"


def test_values_of_the_older_blz2_framing_read_whole_and_by_columns():
    """A value main's code wrote before BLZ3 (tests/data/blz2): read whole and by columns,
    its blocks unhashed; it is this version's value without its block hashes."""
    lay = get_layout("scidb96")
    value = (GOLDEN_BLZ2 / "scidb96-1000-from-500.value").read_bytes()
    assert value[HEADER_BYTES : HEADER_BYTES + 4] == b"BLZ2"
    expected = generate(lay, 500, 1000)
    ser = CapnpSerializer(lay, "lz4")
    assert blz2_of(encoded(ser, expected, 500)) == value
    reads_back(ser, value, 500, expected)


def _damaged(value: bytes, at: int, new: bytes) -> bytes:
    return value[:at] + new + value[at + len(new) :]


def _scidb96_value(n: int = 2000) -> tuple[CapnpSerializer, bytes]:
    lay = get_layout("scidb96")
    ser = CapnpSerializer(lay, "lz4")
    return ser, encoded(ser, generate(lay, 0, n))


_T = HEADER_BYTES + shuffled.HEAD_BYTES  # where the block table starts in a value


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda v: _damaged(v, _T, struct.pack("<I", 10**6)), "the block table .* is damaged: it names 1000000 blocks"),
        (lambda v: _damaged(v, _T, struct.pack("<I", 0)), "it names 0 blocks"),
        (lambda v: _damaged(v, _T + 4, b"\x01"), "block table .* is damaged"),
        (lambda v: _damaged(v, _T + 8 + 16 * 3, struct.pack("<I", 25)), r"block 3 of the table \(planes 25\.\.32"),
        (lambda v: _damaged(v, _T + 8 + 16 * 3 + 4, struct.pack("<I", 24)), r"block 3 of the table \(planes 24\.\.24"),
        (lambda v: _damaged(v, _T + 8 + 16 * 5 + 8, b"\x07"), r"block 5 of the table .*mode 7"),
        (lambda v: _damaged(v, _T + 8 + 16 * 5 + 8, b"\x00"), r"block 5 of the table .*mode 0"),  # raw, not its size
        (lambda v: _damaged(v, _T + 8 + 16 * 13 + 4, struct.pack("<I", 95)), "covers 95 planes"),
        (lambda v: _damaged(v, _T + 8 + 16 * 2 + 12, struct.pack("<I", 1)), "covers 96 planes in"),
        (lambda v: v[:-1], "covers 96 planes in"),
        (lambda v: v[: _T + 5], "block table .* is damaged"),
    ],
)
def test_a_damaged_block_table_or_block_is_a_verify_error_saying_which(damage, message):
    ser, value = _scidb96_value()
    bad = damage(value)
    for read in (
        lambda: ser.decode(bad),
        lambda: ser.decode_into(bad, np.empty(2000, ser.layout.dtype)),
        lambda: ser.decode_columns(bad, ["d0"]),
    ):
        with pytest.raises(VerifyError, match="corrupt Cap'n Proto batch value: "):
            read()
        with pytest.raises(VerifyError, match=message):
            read()


def _blocks_of(value: bytes) -> list[tuple[int, int, int, int]]:
    """(lo, hi, where its hash is, where its bytes start) of each block of a BLZ3 value."""
    entries = table(value[HEADER_BYTES:])
    k = len(entries)
    pos, out = _T + 8 + 24 * k, []
    for j, (lo, hi, _mode, size) in enumerate(entries):
        out.append((lo, hi, _T + 8 + 16 * k + 8 * j, pos))
        pos += size
    assert pos == len(value)
    return out


@pytest.mark.parametrize("where", ["hash", "first byte", "last byte"])
def test_a_block_of_another_hash_fails_the_reads_that_decode_it_and_only_those(where):
    """BLZ3: a reader checks the hash of each block it decodes before decoding it: a whole
    decode fails on any changed block (or hash), a decode of some columns on the blocks of
    those columns - the others read back right."""
    ser, value = _scidb96_value()
    expected = ser.decode(value)[1]
    blocks = _blocks_of(value)
    ends = [at for _lo, _hi, _h, at in blocks[1:]] + [len(value)]
    for j, (lo, hi, hash_at, at) in enumerate(blocks):
        spot = {"hash": hash_at, "first byte": at, "last byte": ends[j] - 1}[where]
        bad = _damaged(value, spot, bytes([value[spot] ^ 0x10]))
        message = f"corrupt Cap'n Proto batch value: block {j} of the records: checksum mismatch"
        with pytest.raises(VerifyError, match=message):
            ser.decode(bad)
        with pytest.raises(VerifyError, match=message):
            ser.decode_into(bad, np.empty(2000, ser.layout.dtype))
        for name in ser.layout.dtype.names:
            at_, size = ser._spans[name]
            if at_ < hi and at_ + size > lo:
                with pytest.raises(VerifyError, match=message):
                    ser.decode_columns(bad, [name])
            else:
                assert ser.decode_columns(bad, [name])[2][name].tobytes() == expected[name].tobytes()


@pytest.mark.parametrize("n", [1, 999, 1000, 5000])
def test_a_small_batch_is_one_block_of_every_plane_a_bigger_one_a_block_per_field(n):
    """A block per field pays a compression call, a table entry and a worse ratio each, which a
    scan of a small batch does not earn back (20M records in 100-record batches: ~0.1 s more
    load): under BLOCKS_FROM_RECORDS records a value is one block; both read back whole and by
    columns."""
    from loader.serializers.capnp_framing import BLOCKS_FROM_RECORDS

    ser = CapnpSerializer(get_layout("scidb96"), "lz4")
    records = generate(ser.layout, 11, n)
    value = encoded(ser, records, 11)
    blocks = table(value[HEADER_BYTES:])
    if n < BLOCKS_FROM_RECORDS:
        assert [(lo, hi) for lo, hi, _mode, _size in blocks] == [(0, ser._stride)]
    else:
        assert len(blocks) >= len(ser.layout.names)
    assert ser.decode(value)[1].tobytes() == records.tobytes()
    _start, _n, cols = ser.decode_columns(value, ["d3", "i2"])
    assert cols["d3"].tolist() == records["d3"].tolist() and cols["i2"].tolist() == records["i2"].tolist()
