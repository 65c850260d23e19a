"""`CapnpSerializer.reused_encoder`: a load worker's small batches of one size encoded from
one buffer of their own (loading/worker.py `_inline`). Its values are byte for byte those of
`encode_buffer`, for any framable layout and batch size; other layouts and compressions
have none (they take `encode_buffer`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loader
from loader.errors import UsageError
from loader.model.layouts import get_layout
from loader.serializers.capnp_framing import CapnpSerializer
from loader.sources.generators import generate

from .test_capnp_planes import FIELDS, layout_of


@pytest.mark.parametrize("n", [1, 100, 511, 512, 999, 1000, 5000])
def test_reused_encoder_values_are_those_of_encode_buffer(n):
    ser = CapnpSerializer(get_layout("scidb96"), "lz4")
    enc = ser.reused_encoder(n)
    assert enc is not None
    for first in (0, 7, 2**40):
        recs = generate("scidb96", first, n)
        enc.records[...] = recs
        buf, _ = ser.new_buffer(n)
        assert enc.encode(first) == bytes(ser.encode_buffer(buf, recs, first))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=FIELDS, n=st.integers(1, 1200), data=st.data())
def test_random_framable_layouts_encode_the_same_through_the_reused_buffer(fields, n, data):
    layout = layout_of(fields)
    ser = CapnpSerializer(layout, "lz4")
    enc = ser.reused_encoder(n)
    if not layout.framable:
        assert enc is None
        return
    assert enc is not None
    raw = data.draw(st.binary(min_size=n * layout.record_size, max_size=n * layout.record_size))
    recs = np.frombuffer(raw, layout.dtype).copy()
    enc.records.view(np.uint8)[...] = recs.view(np.uint8)
    buf, _ = ser.new_buffer(n)
    assert enc.encode(3) == bytes(ser.encode_buffer(buf, recs, 3))


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_uncompressed_and_zstd_values_have_no_reused_encoder(compression):
    """An uncompressed value is a view of its buffer (it must not be filled again before it
    is written); zstd goes through encode_buffer."""
    assert CapnpSerializer(get_layout("scidb96"), compression).reused_encoder(100) is None


def test_a_batch_start_out_of_range_is_a_usage_error():
    enc = CapnpSerializer(get_layout("scidb96"), "lz4").reused_encoder(10)
    assert enc is not None
    with pytest.raises(UsageError, match="out of range"):
        enc.encode(2**64)
    with pytest.raises(UsageError, match="out of range"):
        enc.encode(-1)


def test_a_load_of_small_batches_stores_what_a_load_of_big_ones_reads(tmp_path):
    small, big = f"lmdb://{tmp_path}/small", f"lmdb://{tmp_path}/big"
    loader.load("gen://scidb96?n=30000", small, batch_records=100, shards=2, workers=2, progress="none")
    loader.load("gen://scidb96?n=30000", big, shards=2, workers=1, progress="none")
    with loader.open(small) as a, loader.open(big) as b:
        assert a.manifest.stored_bytes > 0 and len(a.manifest.batches) == 300
        assert (a.read_records() == b.read_records()).all()
