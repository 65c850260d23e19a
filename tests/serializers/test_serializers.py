"""Batch serializers: capnp framing and Arrow IPC round trips, pycapnp interop, bad values."""

from __future__ import annotations

import math
import pickle
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.errors import UsageError, VerifyError
from loader.model.layouts import TYPES, Field, Layout, get_layout
from loader.serializers import FORMATS, get_serializer
from loader.serializers.capnp_framing import (
    HEADER_BYTES,
    MAX_BATCH_BYTES,
    CapnpSerializer,
    max_records,
    pycapnp_reader,
)
from loader.sources.generators import generate

SCIDB96 = get_layout("scidb96")
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CODECS = [
    ("capnp", "none"),
    ("capnp", "lz4"),
    ("capnp", "zstd"),
    ("arrow", "none"),
    ("arrow", "lz4"),
    ("arrow", "zstd"),
]

ODD_LAYOUTS = [
    Layout("odd1", (Field("a", "int32"), Field("b", "float64"), Field("c", "int32"))),
    Layout("odd2", (Field("a", "uint8"), Field("b", "int16"))),
    Layout("odd3", (Field("a", "int8"),)),
    Layout("odd4", (Field("x", "float32"), Field("y", "uint16"), Field("z", "int64"), Field("w", "uint8"))),
    Layout("odd5", (Field("a", "uint16"), Field("b", "uint8"), Field("c", "uint32"), Field("d", "uint8"))),
]

# --- strategies -----------------------------------------------------------------

field_names = st.from_regex(r"[a-z][A-Za-z0-9]{0,6}", fullmatch=True)


@st.composite
def layouts(draw):
    names = draw(st.lists(field_names, min_size=1, max_size=8, unique=True))
    types = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=len(names), max_size=len(names)))
    return Layout("rand", tuple(Field(n, t) for n, t in zip(names, types, strict=True)))


def _specials(np_code: str) -> list:
    dt = np.dtype(np_code)
    if dt.kind == "f":
        fi = np.finfo(dt)
        bits = {
            4: ("<u4", [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA00000]),  # qNaN, -qNaN, sNaN
            8: ("<u8", [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF4000000000000]),
        }[dt.itemsize]
        nans = list(np.array(bits[1], dtype=bits[0]).view(dt))
        return nans + [
            dt.type(v)
            for v in (
                np.inf,
                -np.inf,
                -0.0,
                0.0,
                fi.max,
                fi.min,
                fi.tiny,
                fi.smallest_subnormal,
                -fi.smallest_subnormal,
                1.0,
            )
        ]
    ii = np.iinfo(dt)
    return [dt.type(v) for v in {ii.min, ii.max, 0, 1, ii.max - 1, ii.min + 1, -1 if ii.min else 2}]


@st.composite
def record_arrays(draw, layout: Layout, max_n: int = 300):
    """n random records (all bit patterns) with special values at drawn positions."""
    n = draw(st.integers(0, max_n))
    seed = draw(st.integers(0, 2**32 - 1))
    raw = np.random.default_rng(seed).integers(0, 256, n * layout.record_size, dtype=np.uint8)
    records = raw.view(layout.dtype).copy()
    if n:
        for f in layout.fields:
            code = TYPES[f.type][0]
            picks = draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(_specials(code))), max_size=8))
            for row, value in picks:
                records[f.name][row] = value
    return records


@st.composite
def layout_and_records(draw, max_n: int = 300):
    layout = draw(st.one_of(st.just(SCIDB96), st.sampled_from(ODD_LAYOUTS), layouts()))
    return layout, draw(record_arrays(layout, max_n))


starts = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**63, 2**64 - 1]))


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def same_value(got, want) -> bool:
    """NaN-aware, sign-of-zero-aware comparison of a pycapnp scalar with a numpy one."""
    if isinstance(want, np.floating):
        w = float(want)
        if math.isnan(w):
            return math.isnan(got)
        return got == w and math.copysign(1.0, got) == math.copysign(1.0, w)
    return got == int(want)


# --- round trips ----------------------------------------------------------------


@pytest.mark.parametrize("fmt,compression", CODECS)
@SETTINGS
@given(data=layout_and_records(), start=starts)
def test_round_trip_is_byte_identical(fmt, compression, data, start):
    layout, records = data
    ser = get_serializer(fmt, layout, compression)
    value = ser.encode(records, start)
    assert ser.count(value) == len(records)
    got_start, got = ser.decode(value)
    assert got_start == start
    assert same_bytes(got, records)
    # also through bytes (what a store hands back)
    got_start, got = ser.decode(bytes(value))
    assert got_start == start and same_bytes(got, records)


@pytest.mark.parametrize("fmt,compression", CODECS)
@SETTINGS
@given(data=layout_and_records(), start=starts)
def test_hot_path_new_buffer_encode_buffer(fmt, compression, data, start):
    layout, records = data
    ser = get_serializer(fmt, layout, compression)
    buf, view = ser.new_buffer(len(records))
    assert view.dtype == layout.dtype and view.shape == (len(records),)
    assert view.flags.writeable
    view[...] = records
    value = ser.encode_buffer(buf, view, start)
    assert bytes(value) == bytes(ser.encode(records, start)) or fmt == "arrow"
    got_start, got = ser.decode(value)
    assert got_start == start and same_bytes(got, records)


def test_capnp_framable_is_zero_copy():
    ser = get_serializer("capnp", SCIDB96)
    n = 1000
    buf, view = ser.new_buffer(n)
    assert isinstance(buf, bytearray) and len(buf) == HEADER_BYTES + n * 96
    assert np.shares_memory(view, np.frombuffer(buf, np.uint8))
    view["d0"] = np.arange(n)
    view["i3"] = -np.arange(n)
    value = ser.encode_buffer(buf, view, 12345)
    assert np.shares_memory(np.frombuffer(value, np.uint8), np.frombuffer(buf, np.uint8))
    assert bytes(value[HEADER_BYTES:]) == view.tobytes()
    # the exact header of DESIGN §2
    assert struct.unpack_from("<IIQQQQ", value) == (
        0,
        4 + n * 12,
        (1 << 32) | (1 << 48),
        12345,
        1 | (7 << 32) | (n * 12 << 35),
        (n << 2) | (12 << 32),
    )
    start, got = ser.decode(value)
    assert start == 12345
    assert np.shares_memory(got, np.frombuffer(buf, np.uint8))  # zero-copy read
    assert same_bytes(got, view)


def test_encode_buffer_copies_a_foreign_array():
    ser = get_serializer("capnp", SCIDB96)
    buf, _ = ser.new_buffer(10)
    other = np.zeros(10, SCIDB96.dtype)
    other["i0"] = 7
    start, got = ser.decode(ser.encode_buffer(buf, other, 3))
    assert start == 3 and same_bytes(got, other)


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_encode_buffer_copies_records_that_are_not_the_view_of_the_buffer_it_encodes(compression):
    """encode_buffer skips its copy only for the pair new_buffer made last: another
    buffer's records view, or records of a buffer made earlier, are copied in."""
    ser = get_serializer("capnp", SCIDB96, compression)
    for pick, want in (("bb", 2), ("ab", 2), ("ba", 1), ("aa", 1)):
        bufs, recs = {}, {}
        for name, value in (("a", 1), ("b", 2)):  # b: the pair new_buffer made last
            bufs[name], recs[name] = ser.new_buffer(10)
            recs[name]["i0"] = value
        _start, got = ser.decode(bytes(ser.encode_buffer(bufs[pick[0]], recs[pick[1]], 0)))
        assert list(got["i0"]) == [want] * 10, pick


@pytest.mark.parametrize("fmt,compression", CODECS)
@pytest.mark.parametrize("layout", [SCIDB96, *ODD_LAYOUTS], ids=lambda l: l.name)
def test_empty_batch(fmt, compression, layout):
    ser = get_serializer(fmt, layout, compression)
    value = ser.encode(np.zeros(0, layout.dtype), 9)
    assert ser.count(value) == 0
    start, got = ser.decode(value)
    assert start == 9 and got.dtype == layout.dtype and len(got) == 0
    buf, view = ser.new_buffer(0)
    assert ser.decode(ser.encode_buffer(buf, view, 1))[0] == 1


def test_odd_layouts_are_not_framable_and_use_capnp_offsets():
    assert SCIDB96.framable
    for layout in ODD_LAYOUTS[:2]:
        assert not layout.framable
    ser = get_serializer("capnp", ODD_LAYOUTS[0])  # a:int32 b:float64 c:int32 -> a@0 b@8 c@4
    rec = np.array([(1, 2.5, 3)], ODD_LAYOUTS[0].dtype)
    value = bytes(ser.encode(rec, 0))
    assert len(value) == HEADER_BYTES + 16
    assert struct.unpack_from("<iid", value, HEADER_BYTES) == (1, 3, 2.5)


# --- pycapnp interop ------------------------------------------------------------


def _check_pycapnp_reads(layout, records, start, value):
    with pycapnp_reader(layout, value) as batch:
        assert batch.start == start
        assert len(batch.records) == len(records)
        for i, r in enumerate(batch.records):
            for name in layout.names:
                got, want = r._get(name), records[name][i]
                assert same_value(got, want), (layout, i, name, got, want)


@SETTINGS
@given(data=layout_and_records(max_n=60), start=starts)
def test_pycapnp_reads_our_capnp_field_by_field(data, start):
    layout, records = data
    value = get_serializer("capnp", layout).encode(records, start)
    _check_pycapnp_reads(layout, records, start, value)


def test_pycapnp_reads_scidb96_batch():
    ser = get_serializer("capnp", SCIDB96)
    rng = np.random.default_rng(1)
    records = rng.integers(0, 256, 2000 * 96, dtype=np.uint8).view(SCIDB96.dtype).copy()
    records["d3"][:4] = [np.nan, -0.0, np.inf, -np.inf]
    records["i2"][:2] = [2**31 - 1, -(2**31)]
    value = ser.encode(records, 2**40)
    _check_pycapnp_reads(SCIDB96, records, 2**40, value)


@SETTINGS
@given(layout=st.one_of(st.just(SCIDB96), st.sampled_from(ODD_LAYOUTS), layouts()))
def test_capnp_offsets_match_the_schema_compiler(layout):
    node = layout.capnp_module().Record.schema.node
    assert node.struct.dataWordCount == layout.capnp_words
    assert node.struct.pointerCount == 0
    for f in node.struct.fields:
        size = layout.field(f.name).size
        bit = next(m.bit for m in layout.capnp_members if m.key == f.name)
        assert f.slot.offset * size * 8 == bit, (layout, f.name)


def _build_with_pycapnp(layout, records, start, set_start=True):
    msg = layout.capnp_module().Batch.new_message()
    if set_start:
        msg.start = start
    lst = msg.init("records", len(records))
    cols = {name: records[name].tolist() for name in layout.names}
    for i in range(len(records)):
        r = lst[i]
        for name in layout.names:
            r._set(name, cols[name][i])
    return msg.to_bytes()


@SETTINGS
@given(data=layout_and_records(max_n=200), start=starts)
def test_messages_built_by_pycapnp_decode(data, start):
    layout, records = data
    value = _build_with_pycapnp(layout, records, start)
    ser = get_serializer("capnp", layout)
    assert ser.count(value) == len(records)
    got_start, got = ser.decode(value)
    assert got_start == start
    # pycapnp's float32 setter goes through a Python float: a signalling NaN comes back
    # quiet, so compare NaN-aware rather than bytewise for float32 fields.
    for f in layout.fields:
        a, b = got[f.name], records[f.name]
        if f.type == "float32":
            assert np.array_equal(a, b, equal_nan=True)
            assert np.array_equal(np.signbit(a), np.signbit(b))
        else:
            assert a.tobytes() == b.tobytes()


def test_multi_segment_pycapnp_message_decodes():
    # pycapnp's builder puts a big list in a second segment behind a far pointer
    records = np.zeros(500, SCIDB96.dtype)
    records["d0"] = np.arange(500)
    records["i0"] = -np.arange(500)
    value = _build_with_pycapnp(SCIDB96, records, 77)
    assert struct.unpack_from("<I", value)[0] >= 1  # really several segments
    start, got = get_serializer("capnp", SCIDB96).decode(value)
    assert start == 77 and same_bytes(got, records)


def test_unset_pycapnp_message_is_empty_batch():
    value = SCIDB96.capnp_module().Batch.new_message().to_bytes()
    ser = get_serializer("capnp", SCIDB96)
    assert ser.count(value) == 0
    start, got = ser.decode(value)
    assert start == 0 and len(got) == 0


# --- bad values -------------------------------------------------------------------


def _small_capnp_value():
    ser = get_serializer("capnp", SCIDB96)
    return ser, bytes(ser.encode(np.ones(3, SCIDB96.dtype), 5))


@pytest.mark.parametrize("cut", [0, 1, 7, 8, 39, 40, 41, 100, 327])
def test_truncated_capnp_value_raises(cut):
    ser, value = _small_capnp_value()
    assert len(value) == 328
    with pytest.raises(VerifyError, match="corrupt Cap'n Proto batch value"):
        ser.decode(value[:cut])
    with pytest.raises(VerifyError):
        ser.count(value[:cut])


def _patch(value: bytes, offset: int, fmt: str, v: int) -> bytes:
    b = bytearray(value)
    struct.pack_into(fmt, b, offset, v)
    return bytes(b)


@pytest.mark.parametrize(
    "offset,fmt,v,match",
    [
        (0, "<I", 3, "segment table says"),  # claims 4 segments
        (0, "<I", 100000, "segments"),  # absurd segment count
        (4, "<I", 1000, "truncated"),  # segment size too big
        (4, "<I", 2, "trailing bytes"),  # segment size too small
        (8, "<Q", 1 | (1 << 32), "not a struct pointer"),  # root is a list pointer
        (8, "<Q", 3, "capability"),
        (8, "<Q", (1 << 32) | (1 << 48) | (1000 << 2), "outside segment|past the end"),
        (24, "<Q", 1 | (5 << 32) | (3 << 35), "element size 5"),
        (24, "<Q", 1 | (7 << 32) | (10000 << 35), "past the end"),
        (24, "<Q", 0, None),  # null list: empty batch, fine
        (32, "<Q", (100 << 2) | (12 << 32), "tag says 100 elements"),
        (32, "<Q", 1 | (3 << 2) | (12 << 32), "not a struct tag"),
        (24, "<Q", 2 | (5 << 32), "far pointer to segment 5"),
    ],
)
def test_corrupt_capnp_header_raises(offset, fmt, v, match):
    ser, value = _small_capnp_value()
    bad = _patch(value, offset, fmt, v)
    if match is None:
        assert ser.decode(bad)[1].shape == (0,)
        return
    with pytest.raises(VerifyError, match=match):
        ser.decode(bad)


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_corrupt_arrow_value_raises(compression):
    ser = get_serializer("arrow", SCIDB96, compression)
    value = bytes(ser.encode(np.ones(100, SCIDB96.dtype), 5))
    for bad in (b"", b"garbage" * 10, value[: len(value) // 2], value[:-9]):
        with pytest.raises(VerifyError, match="corrupt Arrow batch value"):
            ser.decode(bad)
    other = get_serializer("arrow", ODD_LAYOUTS[0], compression).encode(np.zeros(3, ODD_LAYOUTS[0].dtype), 0)
    with pytest.raises(VerifyError, match="do not match layout 'scidb96'"):
        ser.decode(other)
    with pytest.raises(VerifyError):
        ser.count(b"garbage" * 10)


# --- registry and limits -----------------------------------------------------------


def test_registry_errors():
    assert set(FORMATS) == {"capnp", "arrow"}
    with pytest.raises(UsageError, match="unknown format 'parquet'; use one of capnp, arrow"):
        get_serializer("parquet", SCIDB96)
    with pytest.raises(UsageError, match="unknown compression 'gzip'"):
        get_serializer("arrow", SCIDB96, "gzip")
    with pytest.raises(UsageError, match="unknown compression 'snappy'"):
        get_serializer("capnp", SCIDB96, "snappy")
    assert get_serializer("capnp", "scidb96", None).compression == "none"
    assert get_serializer("ARROW", SCIDB96, "LZ4").compression == "lz4"


def test_capnp_batch_size_limit():
    m = max_records(SCIDB96)
    assert HEADER_BYTES + m * 96 <= MAX_BATCH_BYTES < HEADER_BYTES + (m + 1) * 96
    get_serializer("capnp", SCIDB96, batch_records=m)
    with pytest.raises(UsageError, match=r"traversal limit.*--batch-records"):
        get_serializer("capnp", SCIDB96, batch_records=m + 1)
    tiny = Layout("tiny", (Field("a", "uint8"),))
    ser = get_serializer("capnp", tiny)
    with pytest.raises(UsageError, match="64 MiB"):
        ser.encode(np.zeros(max_records(tiny) + 1, tiny.dtype), 0)
    get_serializer("arrow", SCIDB96, batch_records=10 * m)  # Arrow has no such limit


def test_bad_records_and_start():
    ser = get_serializer("capnp", SCIDB96)
    with pytest.raises(UsageError, match="expected layout 'scidb96'"):
        ser.encode(np.zeros(3, ODD_LAYOUTS[0].dtype), 0)
    with pytest.raises(UsageError, match="out of range"):
        ser.encode(np.zeros(3, SCIDB96.dtype), -1)


@pytest.mark.parametrize("fmt,compression", CODECS)
def test_serializer_pickles(fmt, compression):
    ser = get_serializer(fmt, SCIDB96, compression)
    again = pickle.loads(pickle.dumps(ser))
    assert isinstance(again, type(ser)) and again.compression == compression
    rec = np.ones(4, SCIDB96.dtype)
    assert same_bytes(again.decode(ser.encode(rec, 1))[1], rec)


def test_capnp_into_external_buffer():
    ser = get_serializer("capnp", SCIDB96)
    mem = bytearray(HEADER_BYTES + 50 * 96 + 100)
    buf, view = ser.new_buffer(50, into=memoryview(mem))
    view["i1"] = 4
    value = ser.encode_buffer(buf, view, 8)
    assert len(value) == HEADER_BYTES + 50 * 96
    start, got = ser.decode(value)
    assert start == 8 and (got["i1"] == 4).all()
    assert isinstance(ser, CapnpSerializer)


@pytest.mark.parametrize("comp", ["lz4", "zstd"])
def test_damaged_compressed_capnp_values_are_verify_errors(comp):
    ser = get_serializer("capnp", SCIDB96, comp)
    value = bytes(ser.encode(generate("scidb96", 0, 1000), 0))
    assert ser.count(value) == 1000 and len(value) < 1000 * 96 / 5  # shuffled by record: it compresses
    damaged = {
        "truncated chunk": (value[:-3], "do not decompress"),
        "short header": (value[:20], "shorter than a compressed batch's header"),
        "zeroed chunk": (value[:40] + b"\0" * (len(value) - 40), "do not start with this version's framing"),
        "another header": (
            bytes(ser.encode(generate("scidb96", 0, 999), 0))[:40] + value[40:],
            "96000 bytes; the batch header says 96-byte records, 95904 bytes",
        ),
        "another stride": (value[:48] + (97).to_bytes(4, "little") + value[52:], "97-byte records"),
        "unknown codec": (value[:44] + b"\x09" + value[45:], "say codec 9"),
        "cut inside the head": (value[:50], "do not start with this version's framing"),
        "not our framing": (b"\1" + value[1:], "not this layout's 40-byte framing"),
    }
    for _what, (bad, message) in damaged.items():
        with pytest.raises(VerifyError, match=message):
            ser.decode(bad)
