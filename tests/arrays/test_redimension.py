"""Redimension (finalize) against a plain numpy model, bad input, verify, memory bound."""

import json
import os
import re
import shutil
import uuid

import numpy as np
import pytest
from helpers import manifest_json, run_cli
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import loader
from loader.arrays.chunks import chunk_key, decode_key
from loader.arrays.finalize import finalize
from loader.arrays.spec import parse_dims
from loader.errors import DuplicateCellError, UsageError
from loader.model.layouts import get_layout
from loader.stores.spec import parse_dataset_uri

# two test layouts: framable for capnp (16 bytes), and not (19 bytes, mixed widths)
LAYOUTS = {
    "tgrid": {"x": "int32", "y": "int32", "v": "float64"},
    "tmix": {"v": "float64", "a": "int16", "b": "int64", "u": "uint8"},
}
DIMS = {"tgrid": ("x", "y"), "tmix": ("a", "b")}


def layout_file(tmp_path, name):
    p = tmp_path / f"{name}.toml"
    if not p.exists():
        body = "\n".join(f'{k} = "{v}"' for k, v in LAYOUTS[name].items())
        p.write_text(f'name = "{name}"\n[fields]\n{body}\n')
    return str(p)


def write_records(path, recs):
    with open(path, "wb") as f:
        f.write(recs.tobytes())


def make_records(layout, n, rng, center, spread):
    recs = np.zeros(n, layout.dtype)
    d0, d1 = DIMS[layout.name]
    recs[d0] = rng.integers(center[0] - spread[0], center[0] + spread[0] + 1, n)
    recs[d1] = rng.integers(center[1] - spread[1], center[1] + spread[1] + 1, n)
    recs["v"] = rng.standard_normal(n)
    if "u" in recs.dtype.names:
        recs["u"] = rng.integers(0, 256, n)
    return recs


def model(recs, d0, d1, policy):
    """Expected cells (records in row-major order; syn for keep) or the duplicate groups."""
    n = len(recs)
    r = recs[d0].astype(np.int64)
    c = recs[d1].astype(np.int64)
    order = np.lexsort((np.arange(n), c, r))
    sr, sc = r[order], c[order]
    same = np.r_[False, (sr[1:] == sr[:-1]) & (sc[1:] == sc[:-1])]
    if policy in ("error", "keep"):
        cells = recs[order]
        syn = np.zeros(n, np.int64)
        for i in range(1, n):
            if same[i]:
                syn[i] = syn[i - 1] + 1
        return cells, syn, same.any()
    keep = ~same if policy == "first" else ~np.r_[same[1:], False]
    return recs[order[keep]], None, same.any()


def in_box(cells, d0, d1, box):
    m = np.ones(len(cells), bool)
    for d in (d0, d1):
        lo, hi = box.get(d, (None, None))
        if lo is not None:
            m &= cells[d].astype(np.int64) >= lo
        if hi is not None:
            m &= cells[d].astype(np.int64) < hi
    return m


def check_table(tb, cells, syn, d0, d1, names, keep):
    cols = [d0, d1] + [n for n in names if n not in (d0, d1)] + (["syn"] if keep else [])
    assert tb.column_names == cols
    assert tb.num_rows == len(cells)
    for n in cols:
        got = tb.column(n).to_numpy()
        want = syn if n == "syn" else cells[n]
        assert np.array_equal(got, want), n


def random_boxes(rng, cells, d0, d1):
    boxes = [{}, {d0: (5, 5)}, {d0: (10**12, 10**12 + 5)}]
    if len(cells):
        i = int(rng.integers(len(cells)))
        r, c = int(cells[d0][i]), int(cells[d1][i])
        boxes.append({d0: (r, r + 1), d1: (c, c + 1)})  # a single cell
        lo0, hi0 = int(cells[d0].min()), int(cells[d0].max())
        lo1, hi1 = int(cells[d1].min()), int(cells[d1].max())
        for _ in range(4):
            a = sorted(rng.integers(lo0 - 3, hi0 + 4, 2).tolist())
            b = sorted(rng.integers(lo1 - 3, hi1 + 4, 2).tolist())
            boxes.append({d0: (a[0], a[1] + 1), d1: (b[0], b[1])})
        boxes.append({d1: (lo1, (lo1 + hi1) // 2)})  # one dim only
    return boxes


def dataset_uri(tmp_path, store):
    return f"{store}://{tmp_path}/ds-{uuid.uuid4().hex[:8]}"


# no shrinking: each example loads and finalizes real stores (seconds); the failing
# example is printed as drawn
@settings(
    max_examples=int(os.environ.get("BULKLOAD_PROP_EXAMPLES", "10")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)
@given(
    seed=st.integers(0, 2**32 - 1),
    lname=st.sampled_from(sorted(LAYOUTS)),
    store=st.sampled_from(["lmdb", "rocksdb"]),
    fmt=st.sampled_from(["capnp", "arrow"]),
    n=st.integers(1, 400),
    chunks=st.tuples(st.sampled_from([1, 2, 3, 5, 16, 10**9]), st.sampled_from([1, 4, 7, 64, 10**9])),
    center=st.tuples(st.integers(-1000, 1000), st.integers(-(10**6), 10**6)),
    spread=st.tuples(st.integers(0, 30), st.integers(0, 40)),
    budget=st.sampled_from([4096, 1 << 22]),
    strategy=st.sampled_from(["auto", "direct", "spill"]),
)
def test_redimension_matches_numpy_model(
    tmp_path_factory, seed, lname, store, fmt, n, chunks, center, spread, budget, strategy
):
    tmp_path = tmp_path_factory.mktemp("prop")
    rng = np.random.default_rng(seed)
    layout = get_layout(layout_file(tmp_path, lname))
    d0, d1 = DIMS[lname]
    recs = make_records(layout, n, rng, center, spread)
    src = tmp_path / "recs.bin"
    write_records(src, recs)
    uri = dataset_uri(tmp_path, store)
    loader.load(
        str(src),
        uri,
        layout=layout_file(tmp_path, lname),
        format=fmt,
        shards=2,
        workers=2,
        batch_records=int(rng.integers(7, 120)),
    )
    dims = f"{d0}:{chunks[0]},{d1}:{chunks[1]}"
    for policy in ("error", "first", "last", "keep"):
        cells, syn, has_dup = model(recs, d0, d1, policy)
        name = f"a{policy}"
        if policy == "error" and has_dup:
            with pytest.raises(DuplicateCellError) as ei:
                finalize(uri, dims=dims, array=name, workers=2, memory_budget=budget, compact=False, strategy=strategy)
            m = re.search(rf"cell \({d0}=(-?\d+), {d1}=(-?\d+)\).*records (\d+) and (\d+)", str(ei.value))
            assert m, str(ei.value)
            r, c, i, j = map(int, m.groups())
            assert i < j and recs[d0][i] == recs[d0][j] == r and recs[d1][i] == recs[d1][j] == c
            with loader.open(uri) as ds:
                assert name not in ds.manifest.arrays  # nothing committed
            continue
        rep = finalize(
            uri,
            dims=dims,
            array=name,
            duplicates=policy,
            workers=2,
            memory_budget=budget,
            compact=(policy == "first"),
            strategy=strategy,
        )
        assert strategy == "auto" or rep.strategy == strategy or rep.strategy_reason.startswith("chunk")
        assert rep.cells == len(cells)
        assert rep.dropped == n - len(cells)
        with loader.open(uri) as ds:
            keep = policy == "keep"
            whole = ds.read_box(array=name)
            check_table(whole, cells, syn, d0, d1, layout.names, keep)
            for box in random_boxes(rng, cells, d0, d1):
                m = in_box(cells, d0, d1, box)
                tb = ds.read_box(array=name, **box)
                check_table(tb, cells[m], syn[m] if keep else None, d0, d1, layout.names, keep)
            tb = ds.read_box(array=name, attrs=["v"], **{d0: (None, None)})
            assert tb.column_names == [d0, d1, "v"] + (["syn"] if keep else [])
            summary = ds.manifest.arrays[name]
            assert summary["bounds"] == {
                d0: [int(cells[d0].min()), int(cells[d0].max())],
                d1: [int(cells[d1].min()), int(cells[d1].max())],
            }
    with loader.open(uri) as ds:
        rep = ds.verify()
        assert rep.ok, rep.problems
        # each chunk piece lives on shard (crow + ccol) mod K, under its order-preserving key
        for a in ds.manifest.arrays.values():
            for s in range(2):
                keys = [k for k, _ in ds.shard(s).range(table=a["table"])]
                assert keys == sorted(keys)
                for k in keys:
                    crow, ccol, _ = decode_key(k)
                    assert (crow + ccol) % 2 == s


def test_chunk_key_order_preserving():
    coords = [(-(2**62), 5), (-3, -1), (-3, 0), (-1, 2**40), (0, -7), (0, 0), (2, -(2**50)), (2**62, 1)]
    keys = [chunk_key(r, c, 0) for r, c in coords]
    assert keys == sorted(keys) and len(keys[0]) == 20
    assert [decode_key(k)[:2] for k in keys] == coords
    assert chunk_key(0, 0, 1) > chunk_key(0, 0, 0) and chunk_key(0, 0, 99) < chunk_key(0, 1, 0)


def test_scidb96_keep_on_colliding_dims(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=30000", uri, shards=3, workers=2, batch_records=4000)
    with pytest.raises(DuplicateCellError, match=r"cell \(i2=\d+, i3=\d+\) of array 'g' is set by records \d+ and \d+"):
        finalize(uri, dims="i2:7,i3:13", array="g", workers=2)
    rep = finalize(uri, dims="i2:7,i3:13", array="g", duplicates="keep", workers=2)
    assert rep.cells == 30000 and rep.dropped == 0
    with loader.open(uri) as ds:
        recs = ds.read_records()
        cells, syn, _ = model(recs, "i2", "i3", "keep")
        tb = ds.read_box("g", i2=(10, 30), i3=(-5, 40))
        m = in_box(cells, "i2", "i3", {"i2": (10, 30), "i3": (-5, 40)})
        check_table(tb, cells[m], syn[m], "i2", "i3", ds.layout.names, True)
        assert ds.arrays()[0]["synthetic"] == ["syn"]
        assert ds.verify().ok
    rep = finalize(uri, dims="i2:7,i3:13", array="g2", duplicates="last", workers=1)
    assert rep.cells == 100  # (17j mod 100, 113j mod 100) depends on j mod 100 only
    with loader.open(uri) as ds:
        cells, _, _ = model(recs, "i2", "i3", "last")
        check_table(ds.read_box("g2"), cells, None, "i2", "i3", ds.layout.names, False)
        assert {a["name"] for a in ds.arrays()} == {"g", "g2"}


def test_memory_budget_forces_spill_runs_and_results_match(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=20000", uri, shards=2, batch_records=1500)
    big = finalize(uri, dims="i0:3,i1:700", array="big", workers=2)
    assert big.strategy == "direct" and big.spill_runs == 0 and big.windows == 2  # it all fits
    small = finalize(uri, dims="i0:3,i1:700", array="small", workers=2, memory_budget=32 * 1024)
    # 32 KiB holds ~200 records: a window of about one chunk reads 1-2 batches of 1500
    # records for ~170 it owns, so auto spills: ~100 runs, and the build reads windows of
    # a few chunks
    assert small.strategy == "spill" and small.spill_runs > 50
    # forced direct within the same budget: many small windows, no spill run
    sd = finalize(uri, dims="i0:3,i1:700", array="sdirect", workers=2, memory_budget=32 * 1024, strategy="direct")
    assert sd.strategy == "direct" and sd.spill_runs == 0 and sd.windows > 50
    for r in (big, small, sd):
        assert r.worker_peak_rss_bytes > 0
    with loader.open(uri) as ds:
        a, b = ds.read_box("big"), ds.read_box("small")
        assert a.equals(b) and a.num_rows == 20000
        assert ds.read_box("sdirect").equals(a)
        assert ds.read_box("small", i0=(1, 2), i1=(699, 1401)).column("i1").to_pylist() == [
            i for i in range(699, 1401) if i % 10 == 1
        ]
        assert ds.verify().ok


def test_rebuild_is_atomic_and_drops_the_old_build(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    root = parse_dataset_uri(uri).root
    loader.load("gen://scidb96?n=5000", uri, shards=2, batch_records=1000)
    finalize(uri, dims="i0:10,i1:100", workers=2)
    m1 = manifest_json(root)["arrays"]["grid"]
    rep = finalize(uri, dims="i0:2,i1:1000", workers=2)
    m2 = manifest_json(root)["arrays"]["grid"]
    assert m1["table"] != m2["table"]
    assert not os.path.exists(os.path.join(root, m1["index"])) and os.path.exists(os.path.join(root, m2["index"]))
    assert [d["chunk"] for d in m2["dims"]] == [2, 1000] and rep.chunks == 5 * 5
    with loader.open(uri) as ds:
        for s in range(2):
            assert ds.shard(s).tables() == sorted(["batches", m2["table"]])
        runs = [r for r in ds.info()["runs"] if r["kind"] == "finalize"]
        assert [r["status"] for r in runs] == ["done", "done"]
    assert not [p for p in os.listdir(root) if p.startswith(".finalize-")]  # spill removed


def test_failed_finalize_commits_nothing(tmp_path):
    uri = f"rocksdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=3000", uri, shards=2, batch_records=500)
    with pytest.raises(DuplicateCellError):
        finalize(uri, dims="i2:10,i3:10", workers=2)
    with loader.open(uri) as ds:
        assert ds.manifest.arrays == {}
        assert ds.manifest.runs[-1].kind == "finalize" and ds.manifest.runs[-1].status == "failed"
        assert "records" in ds.manifest.runs[-1].error
    root = parse_dataset_uri(uri).root
    from loader.stores.registry import backend_for

    for s in range(2):
        with backend_for("rocksdb").open(os.path.join(root, f"shard-{s:03d}"), write=False) as stt:
            assert stt.tables() == ["batches"]


def test_stale_after_append_and_verify_detects_a_corrupt_chunk(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=4000", uri, shards=2, batch_records=1000)
    finalize(uri, dims="i0:5,i1:1000", workers=2)
    loader.load("gen://scidb96?n=1000&start=4000", uri)
    with loader.open(uri) as ds:
        (a,) = ds.arrays()
        assert a["stale"] and a["built_from_records"] == 4000 and a["cells"] == 4000
        assert ds.verify().ok  # the array is checked against the records it was built from
        table = ds.manifest.arrays["grid"]["table"]
        key, value = next(iter(ds.shard(1).range(table=table)))
        value = bytearray(value)
    value[-3] ^= 0xFF
    spec = parse_dataset_uri(uri)
    st_ = spec.open_shard(1, write=True)
    st_.put_sorted([(bytes(key), bytes(value))], table=table)
    st_.close()
    with loader.open(uri) as ds:
        rep = ds.verify()
    assert not rep.ok
    (p,) = rep.problems
    assert p["array"] == "grid" and "checksum mismatch" in p["problem"]
    r = run_cli("verify", uri)
    assert r.returncode == 1


def test_parse_dims_errors():
    lay = get_layout("scidb96")
    assert parse_dims("i0:10,i1:100000", lay) == (("i0", "i1"), (10, 100000))
    assert parse_dims([("i3", 2), ("i0", 1)], lay) == (("i3", "i0"), (2, 1))
    for bad, msg in [
        ("i0:10", "exactly two"),
        ("i0:10,i1:1,i2:1", "exactly two"),
        ("zz:10,i1:5", "unknown field 'zz'"),
        ("d0:10,i1:5", "'d0' is float64"),
        ("i0:10,i0:5", "given twice"),
        ("i0:0,i1:5", "positive"),
        ("i0:-3,i1:5", "positive"),
        ("i0:x,i1:5", "not an integer"),
        ("i0,i1", "FIELD:CHUNK"),
        ("", "FIELD:CHUNK"),
    ]:
        with pytest.raises(UsageError, match=msg):
            parse_dims(bad, lay)


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--dims", "nope:10,i1:5"], "unknown field 'nope'"),
        (["--dims", "d3:10,i1:5"], "not an integer"),
        (["--dims", "i1:10,i1:5"], "given twice"),
        (["--dims", "i0:0,i1:5"], "positive integer"),
        (["--dims", "i0:10"], "exactly two"),
        (["--duplicates", "sometimes"], "--duplicates 'sometimes' is unknown"),
        (["--array", "no good"], "array name"),
    ],
)
def test_cli_finalize_bad_input_exit_2(tmp_path, args, msg):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100", uri, shards=1)
    r = run_cli("finalize", uri, *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bulkload: error: ") and msg in lines[0], r.stderr
    with loader.open(uri) as ds:
        assert ds.manifest.arrays == {}


def test_cli_finalize_collision_exit_1_and_json(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=2000", uri, shards=2, batch_records=500)
    r = run_cli("finalize", uri, "--dims", "i2:10,i3:10", "-q")
    assert r.returncode == 1
    assert re.fullmatch(
        r"bulkload: error: cell \(i2=\d+, i3=\d+\) of array 'grid' is set by records \d+ and \d+; "
        r"nothing was committed .*\n",
        r.stderr,
    ), r.stderr
    r = run_cli("finalize", uri, "--dims", "i0:10,i1:300", "--json", "--workers", "2")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["cells"] == 2000 and rep["chunks"] == 7 and rep["array"] == "grid"
    r = run_cli("info", uri, "--json")
    assert json.loads(r.stdout)["arrays"]["grid"]["cells"] == 2000
    r = run_cli("info", uri)  # text: one line per array
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("array")]
    assert len(line) == 1 and "grid: [i0/10 x i1/300] 2,000 cells in 7 chunks" in line[0], r.stdout
    assert "i0 0..9, i1 0..1999" in line[0] and "duplicates error" in line[0] and "STALE" not in line[0]
    loader.load("gen://scidb96?n=10&start=2000", uri)
    r = run_cli("info", uri)
    assert "STALE" in next(ln for ln in r.stdout.splitlines() if ln.startswith("array")), r.stdout
    r = run_cli("finalize", uri, "--dims", "i0:10,i1:300", "--strategy", "sometimes")
    assert r.returncode == 2 and "strategy 'sometimes' is unknown" in r.stderr


def test_empty_box_and_empty_dataset_schema(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=1000", uri, shards=2, batch_records=100)
    finalize(uri, dims="i0:10,i1:100", workers=1)
    with loader.open(uri) as ds:
        full = ds.read_box()
        empty = ds.read_box(i0=(3, 3))
        assert empty.num_rows == 0 and empty.schema == full.schema
        assert ds.read_box(i1=(5000, 6000)).schema == full.schema


@pytest.fixture(autouse=True)
def _no_leftover_shm():
    yield
    shutil.rmtree("/dev/shm/bulkload/test-redim", ignore_errors=True)
