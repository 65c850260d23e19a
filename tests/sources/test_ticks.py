"""gen://ticks: the C generator equals its numpy reference byte for byte, for any range and
options; any split of a range gives the same records; record i is what generators/ticks.h
defines; the gen:// options and bulkload-gen --layout ticks."""

import itertools
import subprocess

import numpy as np
import pytest
from helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.errors import UsageError
from loader.model.layouts import get_layout
from loader.sources import _gen, parse_source
from loader.sources.generators import (
    TICKS_DEFAULT_STEP,
    TICKS_DEFAULT_T0,
    TICKS_DTYPE,
    TICKS_SYMBOLS,
    _py_fill_ticks,
    generate,
)

from .test_bulkload_gen import GEN

T0_2026 = TICKS_DEFAULT_T0  # 2026-01-02T14:30:00Z


@st.composite
def ticks_ranges(draw, max_n=3000):
    """(start, n, t0, step) whose timestamps stay within int64."""
    n = draw(st.integers(0, max_n))
    step = draw(st.one_of(st.integers(1, 10**9), st.just(TICKS_DEFAULT_STEP), st.integers(1, 2**20)))
    t0 = draw(st.one_of(st.just(T0_2026), st.integers(-(2**62), 2**62)))
    top = min(2**40, (2**63 - 1 - t0) // step - n)  # ts of the last record < 2**63
    start = draw(st.one_of(st.integers(0, top), st.integers(0, 3 * max_n), st.integers(max(0, top - 50), top)))
    return start, n, t0, step


def test_layout_ticks_is_the_generators_41_bytes():
    lay = get_layout("ticks")
    assert lay.record_size == 41 and lay.dtype.itemsize == 41
    assert lay.dtype == TICKS_DTYPE


@settings(max_examples=200, deadline=None)
@given(ticks_ranges())
def test_c_generator_is_byte_identical_to_the_numpy_reference(r):
    start, n, t0, step = r
    c = generate("ticks", start, n, impl="c", t0=t0, step=step)
    py = generate("ticks", start, n, impl="python", t0=t0, step=step)
    assert len(c) == n and c.dtype == TICKS_DTYPE
    assert c.tobytes() == py.tobytes()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2000), st.integers(0, 2**64 - 1), st.integers(-(2**63), 2**63 - 1), st.integers(1, 2**64 - 1))
def test_c_and_numpy_agree_modulo_2_64_at_any_index(n, start, t0, step):
    """The definition is total (uint64 arithmetic wraps): the two agree even where the
    source refuses the range (timestamps past int64)."""
    start = min(start, 2**64 - n)
    c = np.empty(n, TICKS_DTYPE)
    py = np.empty(n, TICKS_DTYPE)
    assert _gen.fill_ticks(c, start, t0, step) == n
    _py_fill_ticks(py, start, t0=t0, step=step)
    assert c.tobytes() == py.tobytes()


@settings(max_examples=100, deadline=None)
@given(ticks_ranges(max_n=2000), st.data())
def test_any_split_of_a_range_gives_the_same_bytes(r, data):
    start, n, t0, step = r
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    bounds = [0, *cuts, n]
    whole = generate("ticks", start, n, t0=t0, step=step).tobytes()
    for impl in ("c", "python"):
        pieces = [
            generate("ticks", start + a, b - a, impl=impl, t0=t0, step=step).tobytes()
            for a, b in itertools.pairwise(bounds)
        ]
        assert b"".join(pieces) == whole


def test_records_follow_the_definition():
    start, n = 10**9, 200_000
    r = generate("ticks", start, n)
    i = np.arange(start, start + n, dtype=np.int64)
    ts = r["ts"].view(np.int64)
    jitter = ts - (T0_2026 + i * TICKS_DEFAULT_STEP)
    assert (jitter >= 0).all() and (jitter < TICKS_DEFAULT_STEP).all()
    assert (np.diff(ts) > 0).all()  # strictly increasing
    assert set(np.unique(r["sym"])) == set(TICKS_SYMBOLS)  # all 16 symbols, zero-padded
    raw = r.view(np.uint8).reshape(n, 41)
    assert (raw[:, 8:16][r["sym"] == b"V"][:, 1:] == 0).all()
    cents = np.rint(r["price"] * 100)
    assert (r["price"] == cents / 100.0).all()
    assert (r["bid"] < r["price"]).all() and (r["price"] < r["ask"]).all()
    assert set(np.unique(raw[:, 37])) == {0, 1}  # halted is a 0/1 byte
    assert 0 < r["halted"].mean() < 0.01
    valid = raw[:, 40]
    assert set(np.unique(valid)) == {0, 1}
    assert ((r["venue"] == 0) == (valid == 0)).all()  # a null venue is all zero bytes
    assert 0.08 < (valid == 0).mean() < 0.17
    assert ((r["size"] >= 1) & (r["size"] <= 3200)).all()


def test_options_change_only_the_timestamps():
    a = generate("ticks", 5, 1000)
    b = generate("ticks", 5, 1000, t0=0, step=250_000_000)
    rest = slice(8, 41)  # every byte after ts
    assert (a.view(np.uint8).reshape(-1, 41)[:, rest] == b.view(np.uint8).reshape(-1, 41)[:, rest]).all()
    assert (b["ts"].view(np.int64) // 250_000_000 == np.arange(5, 1005)).all()


def test_gen_uri_takes_an_iso_t0_and_a_duration_step():
    src = parse_source("gen://ticks?n=100&start=7&t0=2026-03-01T12:00:00%2B01:00&step=250ms")
    assert src.uri == "gen://ticks?n=100&start=7&t0=2026-03-01T11:00:00Z&step=250000000ns"
    recs = np.empty(100, TICKS_DTYPE)
    src.fill(recs, 0)
    want = generate("ticks", 7, 100, t0=int(np.datetime64("2026-03-01T11:00", "ns").astype(np.int64)), step=250_000_000)
    assert recs.tobytes() == want.tobytes()
    # the defaults leave the URI as it was: one URI (and one fingerprint) per range
    assert parse_source("gen://ticks?n=5&t0=2026-01-02T14:30Z&step=1s").uri == "gen://ticks?n=5&start=0"
    assert parse_source(src.uri).uri == src.uri


@pytest.mark.parametrize(
    "query, message",
    [
        ("n=5&t0=yesterday", "'yesterday' is not an ISO-8601 instant"),
        ("n=5&t0=2026-02-30T00:00", "is not a valid instant"),
        ("n=5&step=0s", "step=0 ns must be at least 1 ns"),
        ("n=5&step=1x", "'1x' is not a duration"),
        ("n=5&seed=3", "unknown parameter(s) seed; gen://ticks takes n, start, impl, t0, step"),
        ("n=10&start=9223372036", "run past datetime64[ns]'s last instant"),
    ],
)
def test_bad_ticks_options_are_usage_errors(tmp_path, query, message):
    with pytest.raises(UsageError, match=None) as e:
        parse_source(f"gen://ticks?{query}")
    assert message in str(e.value)
    r = run_cli("load", f"gen://ticks?{query}", f"lmdb://{tmp_path}/d")
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "d").exists()


def test_bulkload_gen_writes_the_same_ticks():
    out = subprocess.run([GEN, "--layout", "ticks", "30000", "123"], capture_output=True, timeout=60)
    assert out.returncode == 0 and out.stderr == b""
    assert out.stdout == generate("ticks", 123, 30000, impl="python").tobytes()
    out = subprocess.run([GEN, "--layout", "ticks", "--t0", "-5", "--step", "7", "100"], capture_output=True)
    assert out.stdout == generate("ticks", 0, 100, impl="python", t0=-5, step=7).tobytes()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--layout", "trades", "5"], "unknown layout (use scidb96 or ticks): 'trades'"),
        (["--t0", "5", "5"], "--t0 and --step are options of --layout ticks"),
        (["--layout", "ticks", "--step", "0", "5"], "--step must be an unsigned decimal integer of ns, at least 1"),
        (["--layout", "ticks", "--t0", "9223372036854775808", "5"], "--t0 must be a signed decimal integer"),
        (["--layout"], "option needs a value"),
        (["--seed", "1", "5"], "unknown option: '--seed'"),
    ],
)
def test_bulkload_gen_bad_ticks_arguments_exit_2(args, message):
    r = subprocess.run([GEN, *args], capture_output=True, timeout=60)
    assert r.returncode == 2 and r.stdout == b""
    assert message in r.stderr.decode()


def test_a_plus_of_a_utc_offset_may_be_written_as_is_in_the_uri():
    assert (
        parse_source("gen://ticks?n=1&t0=2026-03-01T12:00:00+01:00").uri
        == parse_source("gen://ticks?n=1&t0=2026-03-01T11:00Z").uri
    )


def test_ticks_load_from_a_raw_file_stdin_and_npy_as_generated(tmp_path):
    """Records with datetime64 fields go through every byte path (a numpy buffer of them has
    no buffer format: 'cannot include dtype M in a buffer' before)."""
    import loader

    want = generate("ticks", 0, 25_000)
    raw = tmp_path / "t.bin"
    raw.write_bytes(want.tobytes())
    np.save(tmp_path / "t.npy", want)
    stdin = subprocess.run([GEN, "--layout", "ticks", "25000"], capture_output=True, check=True).stdout
    for name, args, inp in (
        ("raw", [raw, "--layout", "ticks"], None),
        ("npy", [tmp_path / "t.npy", "--layout", "ticks"], None),
        ("stdin", ["-", "--layout", "ticks"], stdin),
    ):
        r = run_cli("load", args[0], f"lmdb://{tmp_path}/{name}", *args[1:], "--workers", 2, "-q", input=inp)
        assert r.returncode == 0, (name, r.stderr)
        with loader.open(f"lmdb://{tmp_path}/{name}") as ds:
            assert ds.read_records().tobytes() == want.tobytes(), name
    out = tmp_path / "x.npy"
    assert run_cli("export", f"lmdb://{tmp_path}/raw", "--out", out, "--format", "npy").returncode == 0
    assert np.load(out).tobytes() == want.tobytes()
