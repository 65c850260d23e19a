"""A column whose type is not its field's is loaded only when every value converts exactly.

Every kind of source that converts (an .npy, Arrow IPC or Parquet file; a pandas DataFrame
or an Arrow Table in memory) either stores each value unchanged or refuses the load with
one line naming the column, the first row whose value would change and that value, and
writes nothing; a numpy array in memory is never converted (its dtype must be the layout's).
The oracle is Python's exact int/float arithmetic (tests/model/test_conversions.py)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from model.test_conversions import EDGES, TYPES, column, kept

import loader
from loader.errors import BulkloadError, LayoutError

NAMES = {
    "i1": "int8",
    "i2": "int16",
    "i4": "int32",
    "i8": "int64",
    "u1": "uint8",
    "u2": "uint16",
    "u4": "uint32",
    "u8": "uint64",
    "f4": "float32",
    "f8": "float64",
}


def write(kind: str, path, values: np.ndarray):
    """``values`` as column x of a file of ``kind``, or the in-memory object."""
    table = pa.table({"x": pa.array(values)})
    if kind == "npy":
        arr = np.zeros(len(values), [("x", values.dtype)])
        arr["x"] = values
        np.save(path, arr)
        return str(path)
    if kind == "parquet":
        pq.write_table(table, path, row_group_size=3)  # several row groups: rows counted across them
        return str(path)
    if kind == "arrow":
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            for batch in table.to_batches(max_chunksize=4):
                w.write_batch(batch)
        return str(path)
    return pd.DataFrame({"x": values}) if kind == "pandas" else table


KINDS = ["npy", "parquet", "arrow", "pandas", "table"]


@st.composite
def columns(draw):
    src = np.dtype(draw(st.sampled_from(TYPES)))
    random = draw(hnp.arrays(src, st.integers(1, 6)))
    edges = column(draw(st.lists(st.sampled_from(EDGES), max_size=3)), src)
    return np.concatenate([random, edges])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=columns(), dst=st.sampled_from(TYPES))
def test_every_source_converts_exactly_or_names_the_first_changed_row(tmp_path_factory, values, dst):
    tmp = tmp_path_factory.mktemp("conv")
    layout = tmp / "x.toml"
    layout.write_text(f'name = "x"\n[fields]\nx = "{NAMES[dst]}"\n')
    first = next((i for i, v in enumerate(values.tolist()) if not kept(v, np.dtype(dst))), None)
    for kind in KINDS:
        uri = f"lmdb://{tmp}/{kind}"
        source = write(kind, tmp / f"c.{kind}", values)
        if values.dtype == np.dtype(dst).newbyteorder("<") or first is None:
            loader.load(source, uri, layout=str(layout), workers=1)
            with loader.open(uri) as ds:
                got = ds.read_records()["x"]
            assert np.array_equal(got.astype(values.dtype), values, equal_nan=values.dtype.kind == "f"), kind
            continue
        with pytest.raises(BulkloadError) as e:
            loader.load(source, uri, layout=str(layout), workers=1)
        value = values[first].item()
        assert f"column 'x', row {first}: {value!r} cannot be held exactly by {NAMES[dst]}" in str(e.value), kind
        assert "\n" not in str(e.value)
        assert not os.path.exists(tmp / kind), kind  # refused before anything is written


@pytest.mark.parametrize("kind", KINDS)
def test_int64_beyond_2_53_is_not_rounded_into_float64(tmp_path, kind):
    layout = tmp_path / "f.toml"
    layout.write_text('name = "f"\n[fields]\nx = "float64"\n')
    values = np.array([1, 2**53, 2**53 + 1, 5], np.int64)
    with pytest.raises(
        BulkloadError,
        match=r"column 'x', row 2: 9007199254740993 cannot be held exactly by "
        r"float64 \(converting the column from int64",
    ):
        loader.load(write(kind, tmp_path / f"c.{kind}", values), f"lmdb://{tmp_path}/ds", layout=str(layout))
    rep = loader.load(write(kind, tmp_path / f"d.{kind}", values[:2]), f"lmdb://{tmp_path}/ok", layout=str(layout))
    assert rep.records == 2


def test_a_numpy_array_in_memory_is_never_converted(tmp_path):
    layout = tmp_path / "f.toml"
    layout.write_text('name = "f"\n[fields]\nx = "float64"\n')
    arr = np.zeros(3, [("x", "<i8")])
    with pytest.raises(LayoutError, match="does not hold records of layout 'f'"):
        loader.load(arr, f"lmdb://{tmp_path}/ds", layout=str(layout))
