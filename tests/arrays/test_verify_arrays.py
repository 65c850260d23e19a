"""arrays/verify.py: each kind of damage to a stored array is found and named (piece
present, size, checksum, decodable, cell count, inside its chunk, row-major order, syn,
the multiset of cells against the flat records), on LMDB and RocksDB."""

import os

import numpy as np
import pytest
import xxhash

import loader
from loader.arrays.chunks import chunk_key
from loader.arrays.finalize import finalize
from loader.model.chunk_index import SAMPLE_COLUMNS, index_path, read_index, write_index
from loader.model.layouts import Layout
from loader.serializers import get_serializer
from loader.stores.spec import parse_dataset_uri


@pytest.fixture(params=["lmdb", "rocksdb"])
def grid(request, tmp_path):
    """2,000 records in 2 shards finalized as i0:10,i1:100 (and as 'k' with keep)."""
    uri = f"{request.param}://{tmp_path}/ds"
    loader.load("gen://scidb96?n=2000", uri, shards=2, batch_records=300)
    finalize(uri, dims="i0:10,i1:100", workers=2)
    finalize(uri, dims="i2:10,i3:1000", array="k", duplicates="keep", workers=1, compact=False)
    return uri


def rewrite_piece(uri, array, fn, fix_index=True, cells_delta=0):
    """Replace the stored value of the first piece of ``array`` holding several cells with
    fn(cells) re-encoded; the index keeps naming it (size and checksum follow the new
    value unless ``fix_index`` is False)."""
    with loader.open(uri) as ds:
        a = ds.manifest.arrays[array]
        root = ds.spec.root
    path = index_path(root, a)
    idx = read_index(path)
    i = int(np.flatnonzero(idx["cells"] > 3)[0])
    s, key = int(idx["shard"][i]), chunk_key(idx["crow"][i], idx["ccol"][i], idx["piece"][i])
    ser = get_serializer(a["format"], Layout.from_dict(a["cell_layout"]), a["compression"])
    st = parse_dataset_uri(uri).with_shards(2).open_shard(s, write=True)
    try:
        _, cells = ser.decode(st.get(key, table=a["table"]))
        new = fn(np.array(cells))
        buf, view = ser.new_buffer(len(new))
        view[...] = new
        value = bytes(memoryview(ser.encode_buffer(buf, view, 0)).cast("B"))
        st.put_sorted([(key, value)], table=a["table"])
        st.sync()
    finally:
        st.close()
    if fix_index:
        rows, samples = index_rows(idx)
        rows["nbytes"][i] = len(value)
        rows["checksum"][i] = xxhash.xxh3_64_intdigest(value)
        if cells_delta:  # the sample of a piece of other cells is not the issue here: none
            rows["cells"][i] += cells_delta
            samples = None
        write_index(path, rows, samples)
    return f"({int(idx['crow'][i])},{int(idx['ccol'][i])},{int(idx['piece'][i])})", s


def index_rows(idx: dict) -> tuple[np.ndarray, np.ndarray]:
    """`read_index`'s columns back as the rows and samples `write_index` takes."""
    cols = [n for n in idx if n not in (*SAMPLE_COLUMNS, "sample_off")]
    rows = np.zeros(len(idx["crow"]), [(n, idx[n].dtype) for n in cols])
    for n in cols:
        rows[n] = idx[n]
    samples = np.zeros(len(idx["sample_r"]), [("r", "<i8"), ("c", "<i8")])
    samples["r"], samples["c"] = idx["sample_r"], idx["sample_c"]
    return rows, samples


def problems(uri):
    with loader.open(uri) as ds:
        rep = ds.verify()
    assert not rep.ok
    return [p["problem"] for p in rep.problems]


def test_a_sound_array_verifies(grid):
    with loader.open(grid) as ds:
        assert ds.verify().ok


@pytest.mark.parametrize(
    "damage,delta,expect",
    [
        (lambda c: c[::-1], 0, "cells are not in strict row-major order"),
        (lambda c: np.concatenate([c[:1], c[:1], c[1:]]), 1, "cells are not in strict row-major order"),
        (lambda c: _set(c, "i1", c["i1"] + 100), 0, "holds cells outside the chunk"),
        (lambda c: _set(c, "d0", c["d0"] + 1), 0, "the multiset of cells does not match the flat records"),
        (lambda c: c[1:], -1, "holds 1999 cells (+0 dropped duplicates), built from 2000 records"),
    ],
)
def test_changed_cells_with_a_consistent_index_are_found(grid, damage, delta, expect):
    where, _s = rewrite_piece(grid, "grid", damage, cells_delta=delta)
    found = problems(grid)
    assert len(found) == 1 and expect in found[0] and found[0].startswith("array 'grid': ")
    if "chunk" in expect or "order" in expect:
        assert f"chunk {where}" in found[0]


def test_cell_count_size_and_checksum_against_the_index(grid):
    where, _ = rewrite_piece(grid, "grid", lambda c: c[1:], cells_delta=0)
    assert problems(grid) == [
        f"array 'grid': chunk {where}: holds {_cells(grid, where) - 1} cells, the index says {_cells(grid, where)}"
    ]


def test_a_value_the_index_does_not_describe(grid):
    where, _ = rewrite_piece(grid, "grid", lambda c: c[1:], fix_index=False)
    (p,) = problems(grid)
    assert p.startswith(f"array 'grid': chunk {where}: size ") and p.endswith("in the index")


def test_keep_syn_must_count_from_zero(grid):
    def first_cell_from_one(c):  # still consecutive within the cell: only the start is wrong
        c["syn"][(c["i2"] == c["i2"][0]) & (c["i3"] == c["i3"][0])] += 1
        return c

    where, _ = rewrite_piece(grid, "k", first_cell_from_one)
    assert problems(grid) == [f"array 'k': chunk {where}: syn does not start at 0"]
    rewrite_piece(grid, "k", lambda c: _set(c, "syn", c["syn"] + 1))  # every cell
    (p,) = problems(grid)
    assert p == f"array 'k': chunk {where}: cells are not in strict row-major order"


def test_missing_piece_index_and_shard(grid):
    with loader.open(grid) as ds:
        a = ds.manifest.arrays["grid"]
        root = ds.spec.root
    idx = read_index(index_path(root, a))
    s = int(idx["shard"][0])
    where = f"({int(idx['crow'][0])},{int(idx['ccol'][0])},{int(idx['piece'][0])})"
    st = parse_dataset_uri(grid).with_shards(2).open_shard(s, write=True)
    st.delete_range(
        chunk_key(idx["crow"][0], idx["ccol"][0], 0), chunk_key(idx["crow"][0], idx["ccol"][0], 1), table=a["table"]
    )
    st.sync()
    st.close()
    found = problems(grid)
    assert any(f"chunk {where} is missing from shard {s}" in p for p in found), found
    os.unlink(index_path(root, a))
    found = problems(grid)
    assert any(p.startswith("array 'grid': cannot read the chunk index ") for p in found), found


def _set(cells, name, values):
    cells[name] = values
    return cells


def _cells(uri, where):
    with loader.open(uri) as ds:
        a = ds.manifest.arrays["grid"]
        idx = read_index(index_path(ds.spec.root, a))
    crow, ccol, piece = map(int, where.strip("()").split(","))
    i = np.flatnonzero((idx["crow"] == crow) & (idx["ccol"] == ccol) & (idx["piece"] == piece))[0]
    return int(idx["cells"][i])
