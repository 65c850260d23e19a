"""Compressed Cap'n Proto batches of layouts that are not framable (bools as bits, padding,
bytes and arrays: gen://ticks) are encoded straight from the records' planes
(capnp_framing.CapnpSerializer._capnp_planes), without assembling the data sections first.

- Same stored bytes: the value is the 40-byte header and `shuffled.compress` of the data
  sections `_to_capnp` assembles (what every earlier version stored), for any layout and
  any record bytes, lz4 and zstd; and it decodes back to the records.
- gen://ticks batches: the same, and a dataset loaded by the CLI reads back byte-identical.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loader
from loader.model.layouts import Field, Layout, get_layout
from loader.serializers import shuffled
from loader.serializers.capnp_framing import HEADER_BYTES, CapnpSerializer
from loader.sources.generators import generate

_TYPES = st.sampled_from(
    ["int8", "uint16", "int32", "float64", "float16", "bool", "datetime64[ns]", "bytes[3]", "bytes[8]", "float32[3]"]
)
#: (type, nullable) of each field of a random layout (`layout_of`)
FIELDS = st.lists(st.tuples(_TYPES, st.booleans()), min_size=1, max_size=9)


def layout_of(fields: list[tuple[str, bool]]) -> Layout:
    """The layout of the fields ``fields`` (`FIELDS`): f0, f1, ..."""
    return Layout("h", tuple(Field(f"f{i}", t, nullable=nul) for i, (t, nul) in enumerate(fields)))


def assembled_value(ser: CapnpSerializer, records: np.ndarray, start: int) -> bytes:
    """What a compressed value was before: the data sections assembled, then compressed."""
    n = len(records)
    buf = bytearray(HEADER_BYTES + n * ser._stride)
    ser.compression, comp = "none", ser.compression
    try:
        whole = bytes(ser.encode_buffer(buf, records, start))
    finally:
        ser.compression = comp
    return whole[:HEADER_BYTES] + shuffled.compress(
        memoryview(whole)[HEADER_BYTES:], comp, ser._stride, ser._blocks_of(n)
    )


def bools_as_bits(layout: Layout, records: np.ndarray) -> np.ndarray:
    """``records`` with every bool field 0 or 1 (what a data section's bit gives back)."""
    out = records.copy()
    raw = records.view(np.uint8).reshape(len(records), layout.record_size)
    fields: dict[str, tuple] = dict(layout.dtype.fields or {})
    for name, (dt, offset, *_title) in fields.items():
        if dt == np.dtype(bool):
            out[name] = raw[:, int(offset)] != 0
    return out


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fields=FIELDS,
    n=st.integers(0, 700),
    seed=st.integers(0, 2**32 - 1),
)
def test_compressed_values_of_unframable_layouts_store_the_bytes_they_stored_before(compression, fields, n, seed):
    layout = layout_of(fields)
    raw = np.random.default_rng(seed).integers(0, 256, n * layout.record_size, dtype=np.uint8)
    records = raw.view(layout.dtype)  # every byte pattern, bools that are not 0/1 too
    ser = CapnpSerializer(layout, compression)
    buf, view = ser.new_buffer(n)
    view[...] = records
    value = bytes(ser.encode_buffer(buf, view, 7))
    assert value == assembled_value(ser, records, 7)
    start, back = ser.decode(value)
    assert start == 7 and back.tobytes() == bools_as_bits(layout, records).tobytes()


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_ticks_batches_store_the_assembled_bytes_and_load_back_identical(tmp_path, compression):
    lay = get_layout("ticks")
    assert not lay.framable and lay.capnp_bools  # the case this path is for
    records = generate(lay, 123, 5000)
    ser = CapnpSerializer(lay, compression)
    buf, view = ser.new_buffer(len(records))
    view[...] = records
    assert bytes(ser.encode_buffer(buf, view, 123)) == assembled_value(ser, records, 123)
    uri = f"lmdb://{tmp_path}/ds"
    p = run_cli("load", "gen://ticks?n=30000&start=5", uri, "--compression", compression, "--batch-records", 7000)
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert ds.verify().ok
        assert ds.read_records().tobytes() == generate(lay, 5, 30000).tobytes()
