"""`read_records`, `iter_batches` and every export are the scan's one read loop (issue 31:
"`read_records` ... built on it"): the same snapshot pin, checksums, partial-read rules
and decoding threads as `Dataset.scan`, so a rule of the scan holds for them too."""

import numpy as np
import pytest

import loader
from loader.errors import CorruptBatchError, UsageError
from tests.read.test_scan import scidb96
from tests.read.test_verify_single_pass import damage

N = 5000


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return scidb96(tmp_path_factory, "onepath", N, 400)


@pytest.mark.parametrize(
    "read",
    [
        lambda ds: ds.read_records(),
        lambda ds: ds.read_records(10, 20),
        lambda ds: list(ds.iter_batches()),
    ],
    ids=["read_records", "read_records-part", "iter_batches"],
)
def test_records_read_after_the_dataset_closed_are_refused_not_read_unpinned(uri, read):
    ds = loader.open(uri)
    ds.close()  # its pin is released: compact / finalize may remove what it would read
    with pytest.raises(UsageError, match="was closed before its scan was read"):
        read(ds)


@pytest.mark.parametrize("threads", ["1", "3"])
def test_read_records_and_iter_batches_equal_the_scan_across_batch_ends(uri, threads, monkeypatch):
    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", threads)
    with loader.open(uri) as ds:
        t = ds.to_arrow()
        for a, b in [(0, N), (0, 1), (399, 401), (123, 4321), (4800, N), (N, N)]:
            got = ds.read_records(a, b)
            assert got.dtype == ds.layout.dtype and len(got) == b - a
            for c in ("i1", "d5"):
                assert np.array_equal(got[c], t.column(c).to_numpy()[a:b])
        firsts = [(first, len(recs)) for first, recs in ds.iter_batches()]
        assert firsts == [(b.first, b.count) for b in ds.manifest.batches]
        whole = np.concatenate([recs for _, recs in ds.iter_batches()])
        assert np.array_equal(whole, ds.read_records())


def test_read_records_reads_each_batch_of_the_range_once(uri):
    with loader.open(uri) as ds:
        before = ds.read_stats.copy()
        ds.read_records(350, 2050)  # two partial batches and three whole ones
        got = ds.read_stats.since(before)
        covering = ds.batches_covering(350, 2050)
        assert got.batches == len(covering) == 6 and got.bytes == sum(b.nbytes for b in covering)


@pytest.mark.parametrize("compression", ["none", "lz4"])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_damaged_batch_fails_every_records_read_naming_shard_and_batch(tmp_path, threads, compression, monkeypatch):
    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", threads)
    u = f"lmdb://{tmp_path}/ds"
    loader.load(
        f"gen://scidb96?n={N}", u, shards=2, workers=1, batch_records=700, compression=compression, progress="none"
    )
    b = damage(u, lambda bs: bs[3], "flipped")
    with loader.open(u) as ds:
        for read in (
            lambda: ds.read_records(),
            lambda: list(ds.iter_batches()),
            lambda: loader.export(u, str(tmp_path / "x.capnp"), format="capnp"),
        ):
            with pytest.raises(CorruptBatchError) as e:
                read()
            assert f"shard {b.shard} batch {b.seq} (first record {b.first})" in str(e.value)
            assert "checksum mismatch" in str(e.value)
        assert len(ds.read_records(0, b.first)) == b.first  # the batches before it read
    assert not (tmp_path / "x.capnp").exists()
