"""Arrays on time: a datetime64 field is a dimension bucketed by a duration (--dims ts:1h), box
bounds on it are instants (ISO-8601 text, numpy.datetime64, datetime), half-open, through
read_box, loader.query, --box 'ts=LO..HI' and to_dask_array - each checked against a numpy
filter of the same records."""

import datetime as dt
import json

import numpy as np
import pytest
from helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib import recfunctions as rf

import loader
from loader.arrays.query import parse_box
from loader.errors import UsageError
from loader.sources.generators import TICKS_DEFAULT_T0, generate

N = 20_000  # one record a second from 2026-01-02T14:30: about 5.5 hours
T0 = np.datetime64(TICKS_DEFAULT_T0, "ns")
LAYOUT = """name = "tsec"
[fields]
ts = "datetime64[s]"
sym = "bytes[8]"
size = "int32"
price = "float64"
halted = "bool"
"""


def records() -> np.ndarray:
    """gen://ticks records with ts in whole seconds (one record a second: distinct cells)."""
    r = rf.repack_fields(generate("ticks", 0, N)[["ts", "sym", "size", "price", "halted"]])
    return r.astype([("ts", "<M8[s]"), ("sym", "S8"), ("size", "<i4"), ("price", "<f8"), ("halted", "?")])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("timedims")
    (d / "tsec.toml").write_text(LAYOUT)
    uri = f"lmdb://{d}/ds"
    recs = records()
    loader.load(recs, uri, layout=str(d / "tsec.toml"))
    r = run_cli("finalize", uri, "--dims", "ts:1h,size:1000", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["dims"][0] == {"name": "ts", "type": "datetime64[s]", "chunk": 3600}
    return uri, recs


def brute(recs, lo, hi, slo=None, shi=None):
    """The records inside the half-open box, by numpy's own datetime comparisons, in (ts, size) order."""
    m = np.ones(len(recs), bool)
    if lo is not None:
        m &= recs["ts"] >= np.datetime64(lo, "ns")
    if hi is not None:
        m &= recs["ts"] < np.datetime64(hi, "ns")
    if slo is not None:
        m &= recs["size"] >= slo
    if shi is not None:
        m &= recs["size"] < shi
    out = recs[m]
    return out[np.lexsort((out["size"], out["ts"]))]


def same(table, want):
    assert table.num_rows == len(want)
    assert table.schema.field("ts").type.unit == "s" and str(table.schema.field("sym").type) == "fixed_size_binary[8]"
    got = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}
    order = np.lexsort((got["size"], got["ts"]))
    for c in ("ts", "size", "price", "halted"):
        np.testing.assert_array_equal(got[c][order], want[c])
    assert [bytes(x) for x in got["sym"][order]] == [s.ljust(8, b"\0") for s in want["sym"].tolist()]  # raw bytes


INSTANTS = st.integers(-600, N + 600).map(lambda s: T0 + np.timedelta64(s * 10**9 + 250_000_000, "ns"))


@settings(max_examples=60, deadline=None)
@given(
    lo=INSTANTS,
    span=st.integers(0, 4 * 3600),
    sizes=st.one_of(st.none(), st.tuples(st.integers(0, 3300), st.integers(0, 3300))),
    spelling=st.sampled_from(["iso", "numpy", "datetime"]),
)
def test_any_time_box_equals_a_numpy_filter_of_the_records(dataset, lo, span, sizes, spelling):
    uri, recs = dataset
    hi = lo + np.timedelta64(span, "s")

    def spell(t):
        if spelling == "iso":
            return str(t) + "Z"
        if spelling == "numpy":
            return t
        return dt.datetime.fromisoformat(str(t.astype("M8[us]")))  # naive: UTC (these are whole us)

    box = {"ts": (spell(lo), spell(hi))}
    if sizes is not None:
        box["size"] = sizes
    with loader.open(uri) as ds:
        got = ds.read_box(**box)
    want = brute(recs, lo, hi, *(sizes or (None, None)))
    same(got, want)


def test_loader_query_takes_a_mapping_of_instant_bounds(dataset):
    uri, recs = dataset
    lo, hi = "2026-01-02T15:00:00Z", "2026-01-02T16:00:00Z"
    t = loader.query(uri, {"ts": (lo, hi), "size": (100, 300)})
    same(t, brute(recs, "2026-01-02T15:00", "2026-01-02T16:00", 100, 300))
    assert 100 < t.num_rows < 3600
    # an offset is an instant too; an open end is None
    t = loader.query(uri, {"ts": ("2026-01-02T18:00:00+02:00", None)})
    same(t, brute(recs, "2026-01-02T16:00", None))


def test_the_cli_box_takes_iso_instants_with_dot_dot(dataset):
    uri, recs = dataset
    r = run_cli("query", uri, "--box", "ts=2026-01-02T15:00..2026-01-02T15:10:30,size=100:1000", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    rows = rows[0] if len(rows) == 1 and isinstance(rows[0], list) else rows
    want = brute(recs, "2026-01-02T15:00", "2026-01-02T15:10:30", 100, 1000)
    assert len(rows) == len(want) > 0
    assert sorted((r["ts"], r["size"], r["sym"]) for r in rows) == [  # exact ISO text, symbols as text
        (str(t), int(z), s.decode()) for t, z, s in zip(want["ts"], want["size"], want["sym"], strict=True)
    ]
    r = run_cli("query", uri, "--box", "ts=2026-01-02T14:30..2026-01-02T14:30:01,size=1500:1501", "--attrs", "sym")
    assert r.returncode == 0 and r.stdout.splitlines()[1].split() == ["2026-01-02", "14:30:00", "1500", "XOM"]
    r = run_cli("query", uri, "--box", "ts=..2026-01-02T14:30:05Z", "--format", "csv")
    assert r.returncode == 0 and len(r.stdout.strip().splitlines()) == 1 + len(brute(recs, None, "2026-01-02T14:30:05"))


def test_a_fraction_of_a_second_rounds_up_as_the_half_open_box_does(dataset):
    uri, _recs = dataset
    with loader.open(uri) as ds:
        a = ds.read_box(ts=("2026-01-02T15:00:00.5", "2026-01-02T15:00:09.5"))
        b = ds.read_box(ts=("2026-01-02T15:00:01", "2026-01-02T15:00:10"))
    assert a.equals(b) and a.num_rows == 9


def test_to_dask_array_takes_instant_bounds(dataset):
    pytest.importorskip("dask")
    uri, recs = dataset
    with loader.open(uri) as ds:
        x = ds.to_dask_array(
            "grid", attr="price", box={"ts": ("2026-01-02T15:00", "2026-01-02T15:01"), "size": (0, 3300)}
        )
        got = x.compute(scheduler="threads")
    assert got.shape == (60, 3300)
    want = brute(recs, "2026-01-02T15:00", "2026-01-02T15:01", 0, 3300)
    base = np.datetime64("2026-01-02T15:00", "s")
    expect = np.full((60, 3300), np.nan)
    expect[(want["ts"] - base).astype(np.int64), want["size"]] = want["price"]
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize(
    "box, message",
    [
        ({"ts": ("yesterday", None)}, "'yesterday' is not an ISO-8601 instant"),
        ({"ts": (np.datetime64("NaT"), None)}, "NaT is not an instant"),
        ({"ts": (3.5, None)}, "3.5 is not an instant"),
        ({"size": ("2026-01-02", None)}, "range for 'size' must have integer bounds"),
    ],
)
def test_bad_time_bounds_are_usage_errors(dataset, box, message):
    uri, _ = dataset
    with pytest.raises(UsageError) as e:
        loader.query(uri, box)
    assert message in str(e.value)


@pytest.mark.parametrize(
    "args, message",
    [
        (["query", "--box", "ts=yesterday..tomorrow"], "'yesterday' is not an ISO-8601 instant"),
        (["query", "--box", "ts=2026-01-02T15:00"], "is not DIM=START:STOP with integer bounds or DIM=LO..HI"),
        (["finalize", "--dims", "ts:1.5h,size:10", "--array", "x"], "'1.5h' is not a duration"),
        (["finalize", "--dims", "ts:1500ms,size:10", "--array", "x"], "is not a whole number of s"),
        (
            ["finalize", "--dims", "sym:10,size:10", "--array", "x"],
            "field 'sym' is bytes[8], not an integer or a time; dimensions must be integer or datetime64/timedelta64 "
            "fields (ts, size)",
        ),
    ],
)
def test_bad_time_dims_and_boxes_exit_2_in_one_line(dataset, args, message):
    uri, _ = dataset
    r = run_cli(args[0], uri, *args[1:])
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_parse_box_keeps_instants_as_text_and_integers_as_integers():
    assert parse_box("ts=2026-01-02T15:00:00.5..2026-01-02T16:00Z,size=1:5") == {
        "ts": ("2026-01-02T15:00:00.5", "2026-01-02T16:00Z"),
        "size": (1, 5),
    }
    assert parse_box("size=-3..7, ts=..2026-01-02") == {"size": (-3, 7), "ts": (None, "2026-01-02")}


def test_info_shows_a_time_dimension_as_a_duration_and_instants(dataset):
    uri, _ = dataset
    r = run_cli("info", uri)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("array"))
    assert "[ts/1h x size/1000]" in line and "ts 2026-01-02T14:30:00Z..2026-01-02T20:03:19Z" in line


def test_to_dask_array_of_a_bool_attribute_on_a_time_box(dataset):
    pytest.importorskip("dask")
    uri, recs = dataset
    with loader.open(uri) as ds:
        x = ds.to_dask_array(
            "grid",
            attr="halted",
            fill=False,
            box={"ts": (np.datetime64("2026-01-02T14:30"), np.datetime64("2026-01-02T16:30")), "size": (0, 3300)},
        )
        got = x.compute(scheduler="threads")
        with pytest.raises(UsageError, match="attribute 'halted' is bool, which has no empty value"):
            ds.to_dask_array("grid", attr="halted")
    assert got.dtype == np.bool_ and got.shape == (2 * 3600, 3300)
    rows, cols = np.nonzero(got)
    want = brute(recs, "2026-01-02T14:30", "2026-01-02T16:30")
    want = want[want["halted"]]
    assert len(want) > 0
    assert sorted(zip(rows.tolist(), cols.tolist(), strict=True)) == sorted(
        zip(
            (want["ts"] - np.datetime64("2026-01-02T14:30", "s")).astype(np.int64).tolist(),
            want["size"].tolist(),
            strict=True,
        )
    )


@pytest.fixture(scope="module", params=["capnp", "arrow"])
def ticks(request, tmp_path_factory):
    """gen://ticks (ts datetime64[ns], bytes, bool, a nullable venue) finalized on time."""
    uri = f"lmdb://{tmp_path_factory.mktemp('ticks')}/ds"
    r = run_cli("load", f"gen://ticks?n={N}", uri, "--format", request.param, "-q")
    assert r.returncode == 0, r.stderr
    r = run_cli("finalize", uri, "--dims", "ts:1h,size:1000", "-q")
    assert r.returncode == 0, r.stderr
    return uri, generate("ticks", 0, N)


@settings(max_examples=25, deadline=None)
@given(
    lo=st.integers(-600, N + 600),
    span=st.integers(0, 3 * 3600),
    sizes=st.tuples(st.integers(0, 3300), st.integers(0, 3300)),
)
def test_ticks_boxes_on_time_equal_a_numpy_filter_with_their_nulls(ticks, lo, span, sizes):
    uri, recs = ticks
    lo = T0 + np.timedelta64(lo * 10**9 + 123_456_789, "ns")  # ns bounds on a ns field: exact
    hi = lo + np.timedelta64(span, "s")
    t = loader.query(uri, {"ts": (lo, hi), "size": sizes})
    want = brute(recs, lo, hi, *sizes)
    assert t.num_rows == len(want) and t.schema.field("ts").type.unit == "ns"
    got = {c: t.column(c) for c in t.column_names}
    order = np.lexsort((got["size"].to_numpy(), got["ts"].to_numpy().view(np.int64)))
    for c in ("ts", "price", "size", "bid", "ask", "flags", "halted"):
        np.testing.assert_array_equal(got[c].to_numpy(zero_copy_only=False)[order], want[c])
    valid = want["_validity"][:, 0] == 1
    venue = got["venue"].to_pylist()
    assert [venue[i] for i in order] == [int(v) if ok else None for v, ok in zip(want["venue"], valid, strict=True)]


def test_a_nullable_field_is_not_a_dimension(ticks):
    uri, _ = ticks
    r = run_cli("finalize", uri, "--dims", "venue:4,ts:1h", "--array", "v")
    assert r.returncode == 2 and "field 'venue' is nullable; a cell needs a coordinate in every record" in r.stderr


def test_finalize_says_a_time_dimensions_chunk_and_bounds_as_written(dataset):
    uri, _ = dataset
    r = run_cli("finalize", uri, "--dims", "ts:15min,size:1000", "--array", "quarters", "-q")
    assert r.returncode == 0, r.stderr
    r = run_cli("finalize", uri, "--dims", "ts:15min,size:1000", "--array", "quarters", "--force")
    assert r.returncode == 0, r.stderr
    assert "[ts chunk 15min, size chunk 1000; ts 2026-01-02T14:30:00Z..2026-01-02T20:03:19Z, size 1..3200]" in r.stdout


def test_the_spill_and_direct_builds_of_a_time_array_are_the_same_and_verify(ticks):
    from loader.arrays.finalize import finalize

    uri, _recs = ticks
    for strategy in ("spill", "direct"):
        finalize(uri, dims="ts:30min,size:500", array=strategy, workers=2, strategy=strategy, compact=False)
    with loader.open(uri) as ds:
        a, b = ds.read_box(array="spill"), ds.read_box(array="direct")
        assert a.num_rows == N and a.equals(b)
        assert ds.verify().ok


@pytest.mark.parametrize("strategy", ["direct", "spill"])
def test_a_uint64_dimension_below_2_63_is_an_array_and_above_is_refused_naming_the_record(tmp_path, strategy):
    from loader.arrays.finalize import finalize
    from loader.errors import InputError

    recs = np.zeros(3000, [("k", "<u8"), ("j", "<i4"), ("v", "<f8")])
    recs["k"] = np.uint64(2**63 - 3000) + np.arange(3000, dtype=np.uint64)  # the top of int64
    recs["j"] = np.arange(3000) % 7
    recs["v"] = np.arange(3000)
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(recs, uri, batch_records=500)
    finalize(uri, dims="k:1000,j:7", workers=2, strategy=strategy, compact=False)
    with loader.open(uri) as ds:
        t = ds.read_box(k=(2**63 - 10, None))
        assert t.column("v").to_pylist() == list(range(2990, 3000)) and ds.verify().ok
    bad = recs.copy()
    bad["k"][1234] = np.uint64(2**63)
    loader.load(bad, uri, replace=True, batch_records=500)
    with pytest.raises(InputError, match=r"dimension 'k': record 1234 holds 9223372036854775808, beyond the int64"):
        finalize(uri, dims="k:1000,j:7", workers=2, strategy=strategy, compact=False, array="again")
    with loader.open(uri) as ds:
        assert "again" not in ds.manifest.arrays
