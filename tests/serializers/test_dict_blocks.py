"""Dictionary blocks (mode 3) of BLZ3 values (loader/serializers/shuffled.py,
_shufflemodule.c): a field of 2, 4 or 8 bytes whose values repeat few distinct values in a
batch is stored as those values and each record's index into them.

- Values of each width with d distinct values (across the 1-byte / 2-byte index and the
  65,536-value limit, NaNs of other bits, -0.0 and 0.0: values are bytes) read back
  byte-identical, whole, into a given array, by columns (a dictionary gathers straight into
  its column) and through the reused encoder of a load.
- The writer chooses a dictionary where it stores the block smaller (ticks' sym, price,
  size, bid, ask) and not for random values or runs (scidb96 keeps its size).
- A damaged dictionary block (its hash right: a writer's bug) is a one-line VerifyError
  naming the block, whatever the damage (d 0, over n or 65,536, an index >= d, sizes that
  do not add up, a bad coding, index planes that do not decompress), never a crash.
"""

from __future__ import annotations

import re
import struct

import lz4.block
import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loader.errors import VerifyError
from loader.model.layouts import Field, Layout, get_layout
from loader.serializers import shuffled
from loader.serializers.capnp_framing import HEADER_BYTES, CapnpSerializer
from loader.sources.generators import generate

from .test_blocks import DICT, dict_planes_by_hand, encoded, planes_by_hand, table

_T = HEADER_BYTES + shuffled.HEAD_BYTES  # where the block table starts in a value
TYPES = {2: "int16", 4: "float32", 8: "float64"}
#: bit patterns every float dictionary must keep apart: 0.0, -0.0, NaNs of other payloads and signs
SPECIAL = {
    4: [0x00000000, 0x80000000, 0x7FC00000, 0x7FC00001, 0xFFC00000, 0x7F800001],
    8: [0, 1 << 63, 0x7FF8000000000000, 0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001],
}


def values_of(rng: np.random.Generator, w: int, d: int) -> np.ndarray:
    """``d`` distinct values of ``w`` bytes (as unsigned ints): random, the float specials first."""
    special = SPECIAL.get(w, [])[:d]
    if w == 2:
        pool = rng.permutation(65536)[: d - len(special)]
    else:
        pool = rng.integers(0, 2 ** (8 * w) - 1, 2 * d + 16, dtype=np.uint64, endpoint=True)
    seen = dict.fromkeys([*special, *(int(v) for v in pool)])
    out = np.array(list(seen)[:d], dtype=f"<u{w}")
    assert len(np.unique(out)) == d
    return out


def batch_of(w: int, d: int, n: int, seed: int, other: bool = True) -> tuple[CapnpSerializer, np.ndarray]:
    """``n`` records of a layout with a field ``x`` of ``w`` bytes taking ``d`` distinct
    values (every one of them, n >= d): the first 512 repeat the last 8 (the sample that
    chooses a block's mode), the rest in random order; ``other``: an int64 counter beside it."""
    rng = np.random.default_rng(seed)
    vals = values_of(rng, w, d)
    idx = rng.integers(0, d, n)
    head = min(512, n - d)
    idx[:head] = rng.integers(max(d - 8, 0), d, head)  # (random values: the float specials come first)
    idx[head : head + d] = rng.permutation(d)
    fields = (Field("x", TYPES[w]), *((Field("c", "int64"),) if other else ()))
    lay = Layout("d", fields)
    recs = np.zeros(n, lay.dtype)
    recs["x"] = vals[idx].view(lay.dtype["x"])
    assert recs["x"].tobytes() == vals[idx].tobytes()  # (NaN payloads kept)
    if other:
        recs["c"] = np.arange(n)
    return CapnpSerializer(lay, "lz4"), recs


def first_plane(ser: CapnpSerializer, name: str) -> int:
    """The first plane of field ``name`` (one not scattered) of ``ser``'s records."""
    span = ser._spans[name]
    assert span is not None
    return span[0]


def modes(ser: CapnpSerializer, value: bytes) -> dict[int, int]:
    """The mode of each block of ``value``, by its first plane."""
    return {lo: mode for lo, _hi, mode, _size in table(value[HEADER_BYTES:])}


def reads_back(ser: CapnpSerializer, value: bytes, recs: np.ndarray) -> None:
    """``value`` decodes to ``recs`` byte for byte: whole, into an array, by columns."""
    n = len(recs)
    assert ser.decode(value)[1].tobytes() == recs.tobytes()
    out = np.empty(n, ser.layout.dtype)
    assert ser.decode_into(value, out) == 0 and out.tobytes() == recs.tobytes()
    names = list(ser.layout.dtype.names or ())
    for asked in ([names[0]], names, names[::-1]):
        _first, count, cols = ser.decode_columns(value, asked)
        assert count == n
        for name in asked:
            assert cols[name].tobytes() == recs[name].tobytes(), name
    planes = shuffled.decompressed_planes(value[HEADER_BYTES:], n * ser._stride, ser._stride, "t")
    assert planes_by_hand(value[HEADER_BYTES:], n) == planes  # (the format as documented)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    w=st.sampled_from([2, 4, 8]),
    d=st.sampled_from([1, 2, 3, 255, 256, 257, 1000, 65535, 65536, 65537, "n"]),
    extra=st.integers(0, 3000),
    seed=st.integers(0, 2**32 - 1),
    other=st.booleans(),
)
@example(w=8, d=255, extra=1800, seed=1, other=True)
@example(w=4, d=256, extra=900, seed=2, other=False)
@example(w=8, d=65536, extra=200000, seed=3, other=False)
@example(w=2, d=65536, extra=0, seed=4, other=True)
def test_values_of_every_width_and_count_of_distinct_values_read_back_byte_identical(w, d, extra, seed, other):
    n = (1000 if d == "n" else int(d)) + extra
    d = min(n if d == "n" else int(d), 2 ** (8 * w))  # (int16 has 65,536 values)
    ser, recs = batch_of(w, d, n, seed, other)
    value = encoded(ser, recs)
    reads_back(ser, value, recs)
    if n >= 1000 and 16 <= d <= 256 and w > 2:  # (few values, random bytes: the dictionary is smallest)
        assert modes(ser, value)[0] == DICT


@pytest.mark.parametrize(("w", "d"), [(8, 256), (8, 257), (4, 257), (2, 200), (8, 65536)])
def test_a_dictionary_is_chosen_up_to_65536_values_with_1_or_2_byte_indexes(w, d):
    n = max(4 * d, 2000)
    ser, recs = batch_of(w, d, n, d, other=False)
    value = encoded(ser, recs)
    assert modes(ser, value)[0] == DICT
    _entry, pos, size = _blocks(value)[0]
    assert struct.unpack_from("<I", value, pos)[0] == d
    assert size <= 8 + d * w + n * (1 if d <= 256 else 2)
    reads_back(ser, value, recs)


def test_index_planes_of_runs_are_stored_lz4():
    """Runs of one value after a random start (the sample): the index planes LZ4 (coding 1),
    smaller than raw."""
    rng = np.random.default_rng(5)
    lay = Layout("s", (Field("x", "float64"), Field("c", "int32")))
    n = 10000
    recs = np.zeros(n, lay.dtype)
    pool = rng.uniform(0, 1, 300)
    recs["x"][:512] = rng.choice(pool[:8], 512)
    recs["x"][512:] = np.repeat(rng.choice(pool, n), 20)[: n - 512]
    recs["c"] = rng.integers(0, 2**31, n)
    ser = CapnpSerializer(lay, "lz4")
    value = encoded(ser, recs)
    assert modes(ser, value)[0] == DICT
    _entry, pos, size = _blocks(value)[0]
    d, coding = struct.unpack_from("<IB", value, pos)
    assert coding == 1 and size < 8 + 8 * d + n // 2
    reads_back(ser, value, recs)


def test_ticks_fields_that_repeat_few_values_are_dictionaries_and_random_values_are_not():
    lay = get_layout("ticks")
    recs = generate(lay, 5_000_000, 10000)
    ser = CapnpSerializer(lay, "lz4")
    value = encoded(ser, recs)
    m = modes(ser, value)
    assert {name: m[first_plane(ser, name)] for name in ("sym", "price", "size", "bid", "ask")} == dict.fromkeys(
        ("sym", "price", "size", "bid", "ask"), DICT
    )
    assert m[first_plane(ser, "ts")] != DICT  # (every value distinct)
    assert len(value) < 0.8 * 228_383  # (~169 KB; 228 KB with sym and price as records)
    reads_back(ser, value, recs)

    from loader.bench.reads import random_records

    rnd = random_records(10000)
    ser = CapnpSerializer(get_layout("scidb96"), "lz4")
    assert DICT not in modes(ser, encoded(ser, rnd)).values()
    sci = generate(get_layout("scidb96"), 0, 10000)
    assert DICT not in modes(ser, encoded(ser, sci)).values()


@pytest.mark.parametrize("n", [10000, 1500])
def test_the_reused_encoder_of_a_load_writes_dictionaries(n):
    ser, recs = batch_of(8, 40, n, 3)
    enc = ser.reused_encoder(n)
    assert enc is not None
    enc.records[...] = recs
    value = enc.encode(0)
    assert value == encoded(ser, recs)
    assert modes(ser, value)[0] == DICT
    reads_back(ser, value, recs)


def test_a_dictionary_gathers_straight_into_its_column():
    """decode_columns of a dictionary block: gathered into the column, its planes never
    written (as a block of records is decompressed into it)."""
    lay = get_layout("ticks")
    recs = generate(lay, 0, 10000)
    ser = CapnpSerializer(lay, "lz4")
    value = encoded(ser, recs)
    n, at = len(recs), first_plane(ser, "price")
    assert modes(ser, value)[at] == DICT
    shuffled.scratch(n * ser._stride, 3)[:] = b"\xa5" * (n * ser._stride)
    _first, _n, cols = ser.decode_columns(value, ["price"])
    assert bytes(shuffled.scratch(n * ser._stride, 3)[at * n : (at + 8) * n]) == b"\xa5" * (8 * n)
    assert cols["price"].tobytes() == recs["price"].tobytes()


# --- damage ----------------------------------------------------------------------------


def _blocks(value: bytes) -> list[tuple[int, int, int]]:
    """(entry offset, block offset, block bytes) of each block of a BLZ3 value."""
    entries = table(value[HEADER_BYTES:])
    k = len(entries)
    pos, out = _T + 8 + 24 * k, []
    for j, (_lo, _hi, _mode, size) in enumerate(entries):
        out.append((_T + 8 + 16 * j, pos, size))
        pos += size
    return out


def with_block(value: bytes, j: int, block: bytes) -> bytes:
    """``value`` with block ``j`` replaced by ``block``: its size in the table and its hash
    made to match (a writer's bug, not a changed byte the hash would catch)."""
    blocks = _blocks(value)
    k = len(blocks)
    entry, pos, size = blocks[j]
    v = bytearray(value[:pos] + block + value[pos + size :])
    struct.pack_into("<I", v, entry + 12, len(block))
    struct.pack_into("<Q", v, _T + 8 + 16 * k + 8 * j, xxhash.xxh3_64_intdigest(block))
    return bytes(v)


def _ticks() -> tuple[CapnpSerializer, np.ndarray, bytes]:
    lay = get_layout("ticks")
    recs = generate(lay, 0, 10000)
    ser = CapnpSerializer(lay, "lz4")
    return ser, recs, encoded(ser, recs)


def _set(block: bytes, at: int, new: bytes) -> bytes:
    return block[:at] + new + block[at + len(new) :]


def _lz4_coded(block: bytes, n: int, w: int) -> bytes:
    """``block`` (a dictionary) with its index planes LZ4 (coding 1)."""
    d = struct.unpack_from("<I", block)[0]
    at = 8 + d * w
    return _set(block[:at], 4, b"\x01") + lz4.block.compress(block[at:], store_size=False)


N = 10000
DAMAGE = [
    ("sym", lambda b: _set(b, 0, struct.pack("<I", 0)), "dictionary head says 0 values"),
    ("sym", lambda b: _set(b, 0, struct.pack("<I", 70000)), "dictionary head says 70000 values"),
    ("price", lambda b: _set(b, 0, struct.pack("<I", 65536)), "dictionary head says 65536 values, .* for 10000"),
    ("sym", lambda b: _set(b, 4, b"\x02"), "coding 2"),
    ("sym", lambda b: _set(b, 6, b"\x01"), "dictionary head says"),
    ("sym", lambda b: b[:-1], "not its 10000 records' sizes"),
    ("sym", lambda b: b + b"\x00", "not its 10000 records' sizes"),
    ("sym", lambda b: b[:5], "shorter than its head"),
    ("sym", lambda b: _set(b, 0, struct.pack("<I", 17)), "not its 10000 records' sizes"),
    ("sym", lambda b: _set(b, 0, struct.pack("<I", 1300)), "not its 10000 records' sizes"),  # (2-byte indexes)
    ("sym", lambda b: _set(b, len(b) - 1, b"\x10"), "16 values: an index is 16"),
    ("sym", lambda b: _set(b, 8 + 16 * 8 + N // 2, b"\xff"), "16 values: an index is 255"),
    ("price", lambda b: _set(b, len(b) - 1, b"\xff"), r"values: an index is 65\d\d\d"),
    ("price", lambda b: _set(b, len(b) - N, b"\x7f"), r"values: an index is 32\d\d\d"),
    ("sym", lambda b: _lz4_coded(b, N, 8)[:-3], "index planes do not decompress to 10000 bytes"),
    ("sym", lambda b: _set(b, 4, b"\x01"), "index planes do not decompress"),
]


@pytest.mark.parametrize(("field", "damage", "message"), DAMAGE)
def test_a_damaged_dictionary_block_is_a_one_line_verify_error_naming_it(field, damage, message):
    ser, recs, value = _ticks()
    lo = first_plane(ser, field)
    j = [b[0] for b in table(value[HEADER_BYTES:])].index(lo)
    assert table(value[HEADER_BYTES:])[j][2] == DICT
    _entry, pos, size = _blocks(value)[j]
    block = value[pos : pos + size]
    assert block[4] == 0  # (raw index planes: random indexes)
    assert with_block(value, j, _lz4_coded(block, N, 8)) != value  # (an LZ4-coded dictionary reads too)
    reads_back(ser, with_block(value, j, _lz4_coded(block, N, 8)), recs)
    bad = with_block(value, j, damage(block))
    expected = f"block {j} of the records is damaged \\(.*{message}"
    for read in (
        lambda: ser.decode(bad),
        lambda: ser.decode_columns(bad, [field]),  # (gathered into the column)
        lambda: ser.decode_columns(bad, ["ts", field, "halted"]),
    ):
        with pytest.raises(VerifyError, match=expected) as e:
            read()
        assert "\n" not in str(e.value)
    assert ser.decode_columns(bad, ["ts"])[2]["ts"].tobytes() == recs["ts"].tobytes()  # (other blocks read)


def test_a_dictionary_block_of_another_width_is_a_damaged_table():
    """Mode 3 is for blocks of 2, 4 or 8 planes only: another width is a damaged table entry."""
    ser, _recs, value = _ticks()
    assert DICT in modes(ser, value).values()  # (and reads: the other tests)
    j = [b[0] for b in table(value[HEADER_BYTES:])].index(first_plane(ser, "flags"))  # (one plane)
    bad = value[: _T + 8 + 16 * j + 8] + bytes([DICT]) + value[_T + 8 + 16 * j + 9 :]
    with pytest.raises(VerifyError, match=rf"block {j} of the table \(planes \d+\.\.\d+, mode 3"):
        ser.decode(bad)


def test_dict_planes_by_hand_reads_what_the_writer_wrote():
    """(The conformance decoder of test_blocks, on one dictionary block.)"""
    ser, recs, value = _ticks()
    lo = first_plane(ser, "price")
    j = [b[0] for b in table(value[HEADER_BYTES:])].index(lo)
    _entry, pos, size = _blocks(value)[j]
    planes = dict_planes_by_hand(value[pos : pos + size], N, 8)
    assert np.frombuffer(planes, np.uint8).reshape(8, N).T.tobytes() == recs["price"].tobytes()


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_changed_bytes_in_a_dictionary_block_read_or_fail_cleanly(data):
    """Bytes of a dictionary block changed anywhere (its hash made right: a writer's bug), or
    the block cut or grown: every read either gives records or raises the one-line
    VerifyError naming the block - never reads or writes outside its buffers."""
    ser, _recs, value = _ticks_cached()
    field = data.draw(st.sampled_from(["sym", "price", "size", "bid"]), label="field")
    j = [b[0] for b in table(value[HEADER_BYTES:])].index(first_plane(ser, field))
    assert table(value[HEADER_BYTES:])[j][2] == DICT
    _entry, pos, size = _blocks(value)[j]
    block = bytearray(value[pos : pos + size])
    if data.draw(st.booleans(), label="lz4 index"):
        block = bytearray(_lz4_coded(bytes(block), N, {"sym": 8, "price": 8, "size": 4, "bid": 4}[field]))
    for _ in range(data.draw(st.integers(1, 4), label="changes")):
        at = data.draw(st.integers(0, min(15, len(block) - 1)) | st.integers(0, len(block) - 1), label="at")
        block[at] = data.draw(st.integers(0, 255), label="byte")
    cut = data.draw(st.integers(-3, 3), label="cut")
    bad = with_block(value, j, bytes(block[: len(block) + cut] if cut < 0 else block + b"\x00" * cut))
    for read in (
        lambda: ser.decode(bad)[1],
        lambda: ser.decode_columns(bad, [field])[2][field],
        lambda: ser.decode_columns(bad, ["ts", field])[2][field],
    ):
        try:
            got = read()
        except VerifyError as e:
            assert re.search(f"block {j} of the records is damaged \\(", str(e)) and "\n" not in str(e)
        else:
            assert len(got) == N


_TICKS: list[tuple[CapnpSerializer, np.ndarray, bytes]] = []


def _ticks_cached() -> tuple[CapnpSerializer, np.ndarray, bytes]:
    if not _TICKS:
        _TICKS.append(_ticks())
    return _TICKS[0]
