"""The record generators: C (loader.sources._gen) and numpy agree byte for byte, for any range."""

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.errors import UsageError
from loader.model.layouts import get_layout
from loader.sources import _gen
from loader.sources.generators import GENERATORS, fill, generate, write_records

LAYOUT = get_layout("scidb96")
MAX_N = 5000


@st.composite
def ranges(draw, max_n=MAX_N):
    """(start, n) with start + n <= 2**64, biased to the interesting edges."""
    n = draw(st.integers(0, max_n))
    top = 2**64 - n  # the largest start (an empty range may start at 2**64)
    start = draw(
        st.one_of(
            st.integers(0, top),
            st.integers(0, 3 * max_n),
            st.integers(max(0, 2**32 - n - 50), 2**32 + 50),  # i1 wraps, j % 2**32
            st.integers(2**53 - n - 50, 2**53 + 50),  # float64 stops being exact
            st.integers(2**63 - n - 50, 2**63 + 50),  # C's signed/unsigned conversion switch
            st.integers(top - 100, top),  # the last record index 2**64-1
        )
    )
    return start, n


@settings(max_examples=300, deadline=None)
@given(ranges())
def test_c_equals_python(r):
    start, n = r
    c = generate("scidb96", start, n, impl="c")
    py = generate("scidb96", start, n, impl="python")
    assert c.dtype == LAYOUT.dtype and len(c) == n
    assert c.tobytes() == py.tobytes()


@settings(max_examples=150, deadline=None)
@given(ranges(max_n=3000), st.data())
def test_any_split_concatenates_to_one_run(r, data):
    start, n = r
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    bounds = [0, *cuts, n]
    whole = generate("scidb96", start, n, impl="c").tobytes()
    for impl in ("c", "python"):
        pieces = [generate("scidb96", start + a, b - a, impl=impl).tobytes() for a, b in zip(bounds, bounds[1:])]
        assert b"".join(pieces) == whole


def expected_record(j: int) -> tuple:
    """Record j from the definition, with Python ints (exact) and floats (correctly rounded)."""
    dj = float(j)
    return (
        dj,
        2.0 * dj,
        dj - 1.0,
        dj * dj,
        float(j % 55),
        float(j % 113),
        float(j % 17),
        float(j % 3),
        float(j % 577),
        881.0 * dj,
        j % 10,
        (j % 2**32) - (2**32 if j % 2**32 >= 2**31 else 0),
        (17 * j) % 100,
        (113 * j) % 100,
    )


# fmt: off
KNOWN = {
    0: (0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0),
    1: (1.0, 2.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 881.0, 1, 1, 17, 13),
    # j = 2**32 + 5: j*j = 2**64 + 10*2**32 + 25 rounds to 2**64 + 10*2**32 (ulp 4096 there);
    # 2**32 = 26 (mod 55), 16 (mod 113), 1 (mod 17), 1 (mod 3), 287 (mod 577), 96 (mod 100)
    2**32 + 5: (4294967301.0, 8589934602.0, 4294967300.0, 18446744116659224576.0,
                31.0, 21.0, 6.0, 0.0, 292.0, 3783866192181.0, 1, 5, 17, 13),
    # j = 2**64-1 becomes 2.0**64 as a float64
    2**64 - 1: (2.0**64, 2.0**65, 2.0**64, 2.0**128, 15.0, 29.0, 0.0, 0.0, 434.0, 881.0 * 2.0**64,
                5, -1, 55, 95),
}
# fmt: on


@pytest.mark.parametrize("j", sorted(KNOWN))
@pytest.mark.parametrize("impl", ["c", "python"])
def test_known_records(j, impl):
    rec = generate("scidb96", j, 1, impl=impl)[0]
    assert tuple(rec.tolist()) == KNOWN[j]
    assert tuple(rec.tolist()) == expected_record(j)


def test_definition_on_a_spread_of_records():
    js = [0, 1, 2, 99, 100, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2]
    for j in js:
        for impl in ("c", "python"):
            assert tuple(generate("scidb96", j, 1, impl=impl)[0].tolist()) == expected_record(j), (j, impl)


def test_bytes_are_little_endian_packed():
    raw = generate("scidb96", 1, 1).tobytes()
    assert len(raw) == 96
    assert raw[0:8] == bytes.fromhex("000000000000f03f")  # d0 = 1.0, little-endian float64
    assert raw[8:16] == bytes.fromhex("0000000000000040")  # d1 = 2.0
    assert raw[84:88] == (1).to_bytes(4, "little")


def test_large_fill_uses_the_streaming_path_identically():
    # >= 4 MiB takes the C non-temporal store path; compare against numpy
    n = 50_000
    start = 2**32 - 12_345
    c = generate("scidb96", start, n, impl="c")
    assert c.tobytes() == generate("scidb96", start, n, impl="python").tobytes()
    # an unaligned buffer falls back to ordinary stores
    raw = bytearray(n * 96 + 8)
    view = np.frombuffer(raw, dtype=np.uint8)[8:]
    assert _gen.fill_scidb96(view, start) == n
    assert view.tobytes() == c.tobytes()


# --- the extension module ----------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 95, 97, 96 * 3 + 1])
def test_extension_rejects_partial_records(size):
    with pytest.raises(ValueError, match="not a multiple of the scidb96 record size"):
        _gen.fill_scidb96(bytearray(size), 0)


def test_extension_fill_and_into():
    buf = bytearray(96 * 4)
    assert _gen.fill_scidb96(buf, 7) == 4
    assert bytes(buf) == generate("scidb96", 7, 4).tobytes()
    buf2 = bytearray(96 * 4)
    assert _gen.fill_scidb96_into(buf2, 7, 2) == 2
    assert bytes(buf2[:192]) == bytes(buf[:192]) and bytes(buf2[192:]) == bytes(192)
    assert _gen.fill_scidb96(bytearray(0), 2**64 - 1) == 0
    with pytest.raises(ValueError, match="do not fit"):
        _gen.fill_scidb96_into(buf2, 0, 5)


def test_extension_rejects_bad_arguments():
    with pytest.raises((TypeError, BufferError)):
        _gen.fill_scidb96(bytes(96), 0)  # read-only
    with pytest.raises(ValueError, match="start must be >= 0"):
        _gen.fill_scidb96(bytearray(96), -1)
    with pytest.raises(ValueError, match="start must be < 2"):
        _gen.fill_scidb96(bytearray(96), 2**64)
    with pytest.raises(ValueError, match="past the largest record index"):
        _gen.fill_scidb96(bytearray(192), 2**64 - 1)
    with pytest.raises(TypeError):
        _gen.fill_scidb96(bytearray(96), 1.5)
    a = np.zeros(4, dtype=LAYOUT.dtype)[::2]  # not contiguous
    with pytest.raises((ValueError, BufferError)):
        _gen.fill_scidb96(a, 0)


# --- the Python API ------------------------------------------------------------------------


def test_generate_into_out_and_fill():
    out = np.zeros(10, dtype=LAYOUT.dtype)
    view = generate("scidb96", 3, 6, out=out)
    assert view.base is out or np.shares_memory(view, out)
    assert out[:6].tobytes() == generate("scidb96", 3, 6).tobytes()
    assert out[6:].tobytes() == bytes(4 * 96)
    for impl in ("c", "python"):
        arr = np.empty(5, dtype=LAYOUT.dtype)
        assert fill(arr, 2**40, impl=impl) is arr
        assert arr.tobytes() == generate("scidb96", 2**40, 5).tobytes()
        raw = bytearray(96 * 5)
        fill(np.frombuffer(raw, dtype=np.uint8), 2**40, impl=impl, layout="scidb96")
        assert bytes(raw) == arr.tobytes()


def test_write_records_streams_in_blocks():
    for impl in ("c", "python"):
        f = io.BytesIO()
        assert write_records("scidb96", 2**32 - 10, 1001, f, impl=impl, block_records=64) == 1001 * 96
        assert f.getvalue() == generate("scidb96", 2**32 - 10, 1001).tobytes()
    f = io.BytesIO()
    assert write_records("scidb96", 5, 0, f) == 0 and f.getvalue() == b""


class _ShortWriter(io.RawIOBase):
    def __init__(self):
        self.data = bytearray()

    def writable(self):
        return True

    def write(self, b):
        b = bytes(b)[:1000]  # a raw stream may take less than offered
        self.data += b
        return len(b)


def test_write_records_handles_short_writes():
    w = _ShortWriter()
    write_records("scidb96", 0, 300, w)
    assert bytes(w.data) == generate("scidb96", 0, 300).tobytes()


def test_layout_without_generator_is_a_usage_error(tmp_path):
    p = tmp_path / "points.toml"
    p.write_text('name = "points"\n[fields]\nx = "float64"\ny = "float64"\n')
    with pytest.raises(UsageError, match="no generator for layout points; generators exist for: scidb96, ticks"):
        generate(str(p), 0, 10)
    with pytest.raises(UsageError, match="no generator for layout points"):
        write_records(str(p), 0, 10, io.BytesIO())
    with pytest.raises(UsageError, match="unknown layout"):
        generate("no-such-layout", 0, 10)
    assert set(GENERATORS) == {"scidb96", "ticks"}


@pytest.mark.parametrize(
    "start, n, message",
    [
        (-1, 5, "start must be >= 0"),
        (0, -5, "n must be >= 0"),
        (2**64 - 3, 4, "past the last record index"),
        (2**64 + 1, 0, "start must be at most 2\\*\\*64-1"),
        (2**64, 1, "start must be at most 2\\*\\*64-1"),
        (1.5, 3, "start must be an integer"),
        (0, "3", "n must be an integer"),
    ],
)
@pytest.mark.parametrize("impl", ["c", "python"])
def test_bad_ranges_are_usage_errors(start, n, message, impl):
    with pytest.raises(UsageError, match=message):
        generate("scidb96", start, n, impl=impl)


def test_unknown_impl_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown generator implementation 'rust'"):
        generate("scidb96", 0, 1, impl="rust")


def test_last_record_is_reachable():
    # start + n == 2**64 is the end of the index space and allowed
    for impl in ("c", "python"):
        a = generate("scidb96", 2**64 - 3, 3, impl=impl)
        assert a["i1"].tolist() == [-3, -2, -1]


@pytest.mark.parametrize("impl", ["c", "python"])
def test_empty_range_may_start_after_the_last_record(impl):
    """Splitting [2**64-5, 2**64) can leave an empty last piece that starts at 2**64."""
    assert len(generate("scidb96", 2**64, 0, impl=impl)) == 0
    assert generate("scidb96", 2**64 - 5, 5, impl=impl).tobytes() == b"".join(
        generate("scidb96", s, k, impl=impl).tobytes() for s, k in ((2**64 - 5, 5), (2**64, 0))
    )
