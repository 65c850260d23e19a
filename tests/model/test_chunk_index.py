"""model/chunk_index.py: the chunk index file round-trips, is written atomically, and a
missing or damaged file is a one-line error naming it; maintain/garbage.py removes index
files no manifest names."""

import os

import numpy as np
import pytest

from loader.arrays.spec import cell_layout
from loader.errors import StoreError, VerifyError
from loader.maintain.garbage import collect_index_garbage, retire_array
from loader.model import manifest as mf
from loader.model.chunk_index import (
    INDEX_DIR,
    SAMPLE_COLUMNS,
    TABLE_PREFIX,
    index_columns,
    index_file,
    index_path,
    read_index,
    sample_counts,
    write_index,
)
from loader.model.layouts import get_layout


def index_rows(cell, n: int, rng) -> np.ndarray:
    rows = np.zeros(n, np.dtype(index_columns(cell)))
    for name in rows.dtype.names:
        info = np.iinfo(rows.dtype[name]) if rows.dtype[name].kind in "iu" else None
        if info is not None:
            rows[name] = rng.integers(info.min, info.max, n, dtype=rows.dtype[name], endpoint=True)
        else:
            rows[name] = rng.standard_normal(n)
    return rows


@pytest.mark.parametrize("policy", ["error", "keep"])
@pytest.mark.parametrize("n", [0, 1, 777])
def test_index_round_trip(tmp_path, policy, n):
    cell = cell_layout(get_layout("scidb96"), policy)
    cols = index_columns(cell)
    assert [c for c, _ in cols[:8]] == ["crow", "ccol", "piece", "shard", "cells", "nbytes", "checksum", "sample_every"]
    assert len(cols) == 8 + 2 * len(cell.fields)
    assert (("max_syn", "<u4") in cols) == (policy == "keep")
    rng = np.random.default_rng(n)
    rows = index_rows(cell, n, rng)
    path = tmp_path / "array-grid-r1.arrow"
    write_index(str(path), rows)
    got = read_index(str(path))
    assert list(got) == list(rows.dtype.names)
    for name in rows.dtype.names:
        assert got[name].dtype == rows.dtype[name] and np.array_equal(got[name], rows[name]), name
    assert os.listdir(tmp_path) == ["array-grid-r1.arrow"]  # no temporary left behind
    # with the pieces' samples: row j has ceil(cells / sample_every) of them
    rows["cells"], rows["sample_every"] = rng.integers(0, 500, n), rng.integers(1, 50, n)
    counts = sample_counts(rows)
    samples = np.zeros(int(counts.sum()), [("r", "<i8"), ("c", "<i8")])
    samples["r"], samples["c"] = rng.integers(-(2**63), 2**63 - 1, (2, len(samples)), endpoint=True)
    write_index(str(path), rows, samples)
    got = read_index(str(path))
    assert list(got) == [*rows.dtype.names, "sample_off", *SAMPLE_COLUMNS]
    assert got["sample_off"].tolist() == np.concatenate([[0], np.cumsum(counts)]).tolist()
    assert np.array_equal(got["sample_r"], samples["r"]) and np.array_equal(got["sample_c"], samples["c"])


def test_write_replaces_atomically_and_reports_failures(tmp_path):
    cell = get_layout("scidb96")
    path = tmp_path / "x.arrow"
    write_index(str(path), index_rows(cell, 5, np.random.default_rng(1)))
    write_index(str(path), index_rows(cell, 9, np.random.default_rng(2)))
    assert len(read_index(str(path))["crow"]) == 9
    with pytest.raises(StoreError) as ei:
        write_index(str(tmp_path / "no-such-dir" / "x.arrow"), index_rows(cell, 1, np.random.default_rng(3)))
    msg = str(ei.value)
    assert msg.startswith(f"could not write the chunk index {tmp_path}/no-such-dir/x.arrow: ")
    assert msg.endswith("nothing was committed - free space and retry") and "\n" not in msg


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage", "truncated"])
def test_unreadable_index_is_a_verify_error_naming_the_file(tmp_path, damage):
    path = tmp_path / "array-g-r.arrow"
    if damage != "missing":
        write_index(str(path), index_rows(get_layout("scidb96"), 50, np.random.default_rng(0)))
        data = path.read_bytes()
        path.write_bytes({"empty": b"", "garbage": b"x" * len(data), "truncated": data[: len(data) // 2]}[damage])
    with pytest.raises(VerifyError) as ei:
        read_index(str(path))
    msg = str(ei.value)
    assert msg.startswith(f"cannot read the chunk index {path}: ") and msg.endswith("re-run `bulkload finalize`")


def test_index_file_names():
    assert index_file("array-grid-abc") == os.path.join(INDEX_DIR, "array-grid-abc.arrow")
    assert index_path("/d", {"index": index_file("array-g-1")}) == "/d/arrays/array-g-1.arrow"
    assert index_file("array-g-1").startswith(INDEX_DIR + os.sep + TABLE_PREFIX)


def test_index_garbage_keeps_live_and_held_files(tmp_path):
    root = str(tmp_path)
    collect_index_garbage(root, _manifest())  # no arrays/ directory yet: nothing to do
    os.makedirs(tmp_path / INDEX_DIR)
    names = [
        "array-live-1.arrow",
        "array-old-1.arrow",
        "array-crashed-2.arrow",
        "array-crashed-2.arrow.tmp-123",
        "README",
    ]
    for name in names:
        (tmp_path / INDEX_DIR / name).write_bytes(b"x")
    m = _manifest()
    m.arrays["live"] = {"table": "array-live-1", "index": index_file("array-live-1")}
    retire_array(m, {"table": "array-old-1", "index": index_file("array-old-1")})  # a reader may use it
    collect_index_garbage(root, m)
    assert sorted(os.listdir(tmp_path / INDEX_DIR)) == ["README", "array-live-1.arrow", "array-old-1.arrow"]


def _manifest() -> mf.Manifest:
    return mf.Manifest(
        layout=get_layout("scidb96").to_dict(),
        format="capnp",
        compression="none",
        scheme="lmdb",
        shards=1,
        batch_records=10,
    )
