"""Box queries in the random-read mode (``?readahead=0``) read only the parts of a chunk
piece that can hold the box's cells, found from the index's sample of the piece
(arrays/box_parts.py; issue 14, target 6).

- Any box gives exactly what the default whole-piece read gives (hypothesis), on a
  capnp array read in parts, on an array with 100 rows per piece (boxes of more than
  MAX_ROWS rows are read whole), on a ``--duplicates keep`` array (cells stored twice)
  and on Arrow and compressed arrays (always read whole); most boxes of the first are
  really read in parts (counted), and `part_ranges` never leaves out a cell of the box.
- An index written before the sample existed (no sample columns) still answers, whole.
- A cold box of 100 cells reads tens of KB from the disk, not its ~1.9 MB piece
  (/proc/self/io ``read_bytes`` after the files were evicted from the page cache); the
  whole-piece read, the control, does read it all.
- A piece whose header is damaged is read whole, which names the damage, as the default
  mode does; a box elsewhere still answers. A sample that does not match its piece (which
  would make boxes miss cells) is found by `verify`.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loader
from loader.arrays import box_parts, query
from loader.arrays.finalize import finalize
from loader.bench.processes import evict
from loader.errors import VerifyError
from loader.model.chunk_index import SAMPLE_COLUMNS, index_path, read_index, write_index
from loader.stores.registry import open_writer
from loader.stores.spec import parse_dataset_uri
from loader.stores.values import ValueReader
from tests.arrays.test_verify_arrays import index_rows
from tests.read.test_partial_reads import _read_bytes

N = 60_000
PIECE = 20_000  # i1 chunk: i1 = j, so a piece holds 20,000 cells (~1.9 MB), 2,000 per row


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    """name -> (uri, array): capnp arrays read in parts, and arrays always read whole."""
    root = tmp_path_factory.mktemp("boxparts")
    out = {}
    uri = f"lmdb://{root}/capnp"
    loader.load(f"gen://scidb96?n={N}", uri, shards=2, workers=1, progress="none")
    finalize(uri, dims=f"i0:10,i1:{PIECE}", array="grid", workers=1, progress="none")
    finalize(uri, dims="i2:100,i1:5000", array="tall", workers=1, progress="none")  # 100 rows a piece
    out["grid"], out["tall"] = (uri, "grid"), (uri, "tall")
    dup = f"lmdb://{root}/dup"
    for _ in range(2):  # every record twice: each cell is stored twice (syn 0, 1)
        loader.load(f"gen://scidb96?n={N // 3}", dup, shards=2, workers=1, progress="none")
    finalize(dup, dims="i0:10,i1:5000", array="grid", duplicates="keep", workers=1, progress="none")
    out["keep"] = (dup, "grid")
    for name, fmt, comp in (("arrow", "arrow", "none"), ("lz4", "capnp", "lz4")):
        u = f"lmdb://{root}/{name}"
        loader.load(f"gen://scidb96?n={N // 3}", u, shards=2, workers=1, format=fmt, compression=comp, progress="none")
        finalize(u, dims="i0:10,i1:5000", array="grid", workers=1, progress="none")
        out[name] = (u, "grid")
    return out


@pytest.fixture
def parts_read(monkeypatch):
    """Counts the pieces read in parts (a spy on the real reader: nothing is replaced)."""
    seen = []
    real = box_parts.read_parts

    def spy(ai, box, todo, stats=None):
        got = real(ai, box, todo, stats)
        seen.extend(i for i in got)
        return got

    monkeypatch.setattr(query, "read_parts", spy)
    return seen


def _both(uri: str, array: str, ranges: dict) -> tuple[pa.Table, pa.Table]:
    with loader.open(uri) as whole, loader.open(uri + "?readahead=0") as parts:
        return whole.read_box(array, **ranges), parts.read_box(array, **ranges)


bounds = st.integers(-3, N + 3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["grid", "tall", "keep", "arrow", "lz4"]),
    r=st.tuples(st.integers(-2, 102), st.integers(0, 104)),
    c=st.tuples(bounds, st.integers(0, 3000)),
    attrs=st.sampled_from([None, ["d3", "i2"]]),
)
def test_any_box_read_in_parts_is_the_box_read_whole(arrays, name, r, c, attrs):
    uri, array = arrays[name]
    d0 = "i2" if name == "tall" else "i0"
    ranges = {d0: (r[0], r[0] + r[1]), "i1": (c[0], c[0] + c[1])}
    with loader.open(uri) as whole, loader.open(uri + "?readahead=0") as parts:
        a, b = whole.read_box(array, attrs=attrs, **ranges), parts.read_box(array, attrs=attrs, **ranges)
    assert a.equals(b), (name, ranges)


def test_boxes_of_a_few_rows_are_read_in_parts_and_match_the_model(arrays, parts_read):
    uri, array = arrays["grid"]
    rng = np.random.default_rng(7)
    asked = 0
    for _ in range(40):
        lo = int(rng.integers(0, N - 1000))
        r0 = int(rng.integers(0, 8))
        a, b = _both(uri, array, {"i0": (r0, r0 + 3), "i1": (lo, lo + 1000)})
        j = np.arange(lo, lo + 1000)
        j = j[(j % 10 >= r0) & (j % 10 < r0 + 3)]
        j = j[np.lexsort((j, j % 10))]
        assert b.column("i1").to_numpy().tolist() == j.tolist()
        assert np.array_equal(b.column("d3").to_numpy(), j.astype(np.float64) ** 2) and a.equals(b)
        asked += len({lo // PIECE, (lo + 999) // PIECE})
    assert len(parts_read) == asked  # every piece of every box was read in parts


def test_boxes_across_more_rows_than_max_rows_are_read_whole(arrays, parts_read):
    uri, array = arrays["tall"]
    a, b = _both(uri, array, {"i1": (100, 1100)})  # all 100 rows of a piece
    assert a.equals(b) and b.num_rows == 1000 and parts_read == []
    a, b = _both(uri, array, {"i2": (10, 20), "i1": (100, 1100)})
    assert a.equals(b) and b.num_rows == 100 and parts_read != []


def test_part_ranges_hold_every_cell_of_the_box(arrays):
    """For random boxes, every cell of the piece inside the box lies in the ranges."""
    uri, array = arrays["keep"]
    rng = np.random.default_rng(3)
    with loader.open(uri) as ds:
        ai = query.array_index(ds, array)
        checked = 0
        for _ in range(300):
            i = int(rng.integers(0, len(ai.cells)))
            lo0, lo1 = int(rng.integers(-1, 10)), int(rng.integers(ai.cmin[i] - 50, ai.cmax[i] + 50))
            box = query._Box(lo0, lo0 + int(rng.integers(0, 4)), lo1, lo1 + int(rng.integers(0, 600)))
            ranges = box_parts.part_ranges(ai, i, box)
            if ranges is None:
                continue
            assert all(a < b for a, b in ranges) and all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(ranges))
            with ValueReader(ds.shard(int(ai.shard[i])), ai.table) as rd:
                cells = query._columns(ai, rd.get(ai.keys[i]))
                rv, cv = cells["i0"], cells["i1"]
                inside = np.flatnonzero((rv >= box.lo0) & (rv < box.hi0) & (cv >= box.lo1) & (cv < box.hi1))
            held = np.zeros(int(ai.cells[i]), bool)
            for a, b in ranges:
                held[a:b] = True
            assert held[inside].all(), (i, box, ranges)
            checked += len(inside)
        assert checked > 1000


def _replace_index(path: str, table: pa.Table) -> None:
    """Write ``table`` as the index file at ``path`` the way finalize does (a new file
    renamed over it: readers' maps of the old one stay valid)."""
    tmp = f"{path}.tmp"
    with pa.OSFile(tmp, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, path)


def test_an_index_without_a_sample_is_read_whole(arrays, parts_read):
    uri, array = arrays["grid"]
    with loader.open(uri) as ds:
        path = index_path(ds.spec.root, ds.manifest.arrays[array])
    with pa.memory_map(path, "r") as src:
        table = pa.ipc.open_file(src).read_all()
    assert {*SAMPLE_COLUMNS, "sample_every"} <= set(table.column_names)
    try:
        _replace_index(path, table.drop_columns([*SAMPLE_COLUMNS, "sample_every"]))
        a, b = _both(uri, array, {"i0": (2, 5), "i1": (30_000, 31_000)})
        assert a.equals(b) and b.num_rows == 300 and parts_read == []
    finally:
        _replace_index(path, table)
    a, b = _both(uri, array, {"i0": (2, 5), "i1": (30_000, 31_000)})
    assert a.equals(b) and parts_read != []


def _cold_box_bytes(ds, root, array: str, ranges: dict) -> int:
    evict(root)
    before = _read_bytes()
    ds.read_box(array, **ranges)
    return _read_bytes() - before


def test_a_cold_box_reads_its_parts_not_its_piece(tmp_path):
    root = tmp_path / "ds"
    uri = f"lmdb://{root}"
    loader.load(f"gen://scidb96?n={N}", uri, shards=1, workers=1, progress="none")
    finalize(uri, dims=f"i0:10,i1:{PIECE}", workers=1, progress="none")
    box = {"i0": (0, 10), "i1": (25_000, 25_100)}  # 100 cells in 10 rows of one 1.9 MB piece
    with loader.open(uri) as ds:
        ds.read_box(i1=(0, 1))  # opens the shard and reads the index
        whole = _cold_box_bytes(ds, root, "grid", box)
    if whole < PIECE * 96 // 2:
        pytest.skip(f"reads of {root} do not show in /proc/self/io read_bytes ({whole} bytes): not a disk")
    with loader.open(uri + "?readahead=0") as ds:
        ds.read_box(i1=(0, 1))
        got = _cold_box_bytes(ds, root, "grid", box)
        assert got <= 10 * 4 * 4096 + 8 * 4096, (got, whole)  # 10 rows of <= 4 pages each, + the B-tree
        assert ds.read_box(**box).num_rows == 100


def test_a_damaged_piece_header_is_named_in_both_modes(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N // 3}", uri, shards=1, workers=1, progress="none")
    finalize(uri, dims="i0:10,i1:5000", workers=1, progress="none")
    with loader.open(uri) as ds:
        ai = query.array_index(ds, "grid")
        key, table = ai.keys[1], ai.table  # the piece of i1 5000..9999
    spec = parse_dataset_uri(uri)
    with spec.backend.open(spec.shard_path(0), write=False) as stq:
        value = bytearray(stq.get(key, table=table))
    value[8] ^= 0x40  # the framing's segment size
    w = open_writer(spec, 0, {})
    try:
        w.put_sorted([(key, bytes(value))], table=table)
        w.sync()
    finally:
        w.close()
    for mode in ("", "?readahead=0"):
        with loader.open(uri + mode) as ds:
            with pytest.raises(VerifyError):
                ds.read_box(i0=(0, 10), i1=(6000, 6100))
            assert ds.read_box(i0=(0, 10), i1=(100, 200)).num_rows == 100


def test_verify_finds_a_sample_that_does_not_match_its_piece(tmp_path):
    """A sample that lies would make random-read boxes miss cells: `verify` checks every
    piece's sample against its cells."""
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N // 3}", uri, shards=1, workers=1, progress="none")
    finalize(uri, dims="i0:10,i1:5000", workers=1, progress="none")
    with loader.open(uri) as ds:
        assert ds.verify().ok
        path = index_path(ds.spec.root, ds.manifest.arrays["grid"])
    idx = read_index(path)
    rows, samples = index_rows(idx)
    samples["c"][idx["sample_off"][1] + 3] += 1  # piece 1's sample: one column moved
    write_index(path, rows, samples)
    with loader.open(uri) as ds:
        rep = ds.verify()
    assert [p["problem"] for p in rep.problems] == [
        "array 'grid': chunk (0,1,0): its sample in the index does not match its cells"
    ]
