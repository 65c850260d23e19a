"""The speed paths of a small finalize (issue 14, target 4) build the array the pooled
finalize builds, byte for byte, and fail the way it fails:

- kept records (arrays/decoded.py): a small finalize's scan keeps what it decodes (compressed
  Cap'n Proto, Arrow) and its build gathers each window's cells from there; the array
  (summary, index rows with sizes and hashes, cells) equals the pooled build's on lmdb://,
  rocksdb:// and mem://, for capnp lz4/zstd/none and arrow lz4/none, with batches that
  straddle windows and under every duplicates policy - and each flat batch is read once;
- ``duplicates="error"`` names the same cell and records; a damaged flat batch is the same
  error (the scan worker's CorruptBatchError); nothing is committed either way;
- `Serializer.decode_into` gives `decode`'s records, and leaves ``out`` alone for a value of
  another count;
- an LMDB shard that receives little is written in several groups (build_emit.MIN_GROUPS),
  with the same pieces.
"""

import lmdb
import numpy as np
import pytest

import loader
from loader.arrays import build_emit
from loader.arrays import finalize as fin
from loader.arrays import job as job_mod
from loader.arrays.finalize import finalize
from loader.errors import CorruptBatchError, DuplicateCellError, WorkerError
from loader.model.layouts import get_layout
from loader.model.placement import batch_key
from loader.serializers import get_serializer
from loader.stores.spec import parse_dataset_uri

from .test_small_finalize import array_state

N = 20_000
DIMS = "i0:10,i1:1000"  # 20 chunks over 2 shards
DUP_DIMS = "i0:4,i2:16"  # i2 repeats: many records per cell
ENCODINGS = [("capnp", "lz4"), ("capnp", "zstd"), ("capnp", "none"), ("arrow", "lz4"), ("arrow", "none")]


def load(uri, fmt="capnp", compression="lz4", batch_records=700):
    """N scidb96 records in batches that straddle chunk boundaries (700 vs 1000 columns)."""
    loader.load(
        f"gen://scidb96?n={N}",
        uri,
        shards=2,
        workers=2,
        batch_records=batch_records,
        format=fmt,
        compression=compression,
    )


def small_and_pooled(uri, monkeypatch, **kw):
    """The array state of a small (in-process) finalize, then of the pooled one."""
    small = finalize(uri, workers=2, compact=False, **kw)
    assert small.in_process
    got = array_state(uri, kw.get("array", "grid"))
    monkeypatch.setattr(fin, "SMALL_FINALIZE_BYTES", 0)
    pooled = finalize(uri, workers=2, compact=False, force=True, **kw)  # the same array: up to date
    monkeypatch.undo()
    assert not pooled.in_process
    return got, array_state(uri, kw.get("array", "grid"))


@pytest.mark.parametrize("fmt,compression", ENCODINGS, ids=[f"{f}-{c}" for f, c in ENCODINGS])
def test_kept_records_build_the_pooled_array(store_uri, monkeypatch, fmt, compression):
    load(store_uri, fmt, compression)
    small, pooled = small_and_pooled(store_uri, monkeypatch, dims=DIMS, strategy="direct")
    assert small == pooled


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
@pytest.mark.parametrize("policy", ["first", "last", "keep"])
def test_kept_records_apply_every_duplicates_policy_as_the_pool(tmp_path, monkeypatch, scheme, policy):
    uri = f"{scheme}://{tmp_path}/ds"
    load(uri, "arrow" if policy == "keep" else "capnp", "lz4")
    small, pooled = small_and_pooled(uri, monkeypatch, dims=DUP_DIMS, duplicates=policy, strategy="direct")
    assert small == pooled
    summary = small[0]
    if policy == "keep":
        assert summary["dropped"] == 0 and summary["cells"] == N
    else:
        assert summary["dropped"] == N - summary["cells"] > 0


def test_kept_records_name_the_same_duplicate_cell(tmp_path, monkeypatch):
    """One build worker (with two, the first to fail names its shard's cell)."""
    uri = f"lmdb://{tmp_path}/ds"
    load(uri)
    with pytest.raises(DuplicateCellError) as small:
        finalize(uri, dims=DUP_DIMS, workers=1, compact=False, strategy="direct")
    monkeypatch.setattr(fin, "SMALL_FINALIZE_BYTES", 0)
    with pytest.raises(DuplicateCellError) as pooled:
        finalize(uri, dims=DUP_DIMS, workers=1, compact=False, strategy="direct")
    assert str(small.value) == str(pooled.value)
    assert "nothing was committed" in str(small.value)
    with loader.open(uri) as ds:
        assert ds.manifest.arrays == {}


def test_each_flat_batch_is_read_once_when_the_scan_keeps_it(tmp_path, monkeypatch):
    """Kept (compressed): every batch read once, by the scan; uncompressed Cap'n Proto (a
    zero-copy view, nothing to keep): read by the scan and again by the build."""
    reads = []
    real = job_mod.read_batch

    def counting(rd, store, b):
        reads.append(b.seq)
        return real(rd, store, b)

    monkeypatch.setattr(job_mod, "read_batch", counting)
    for compression, times in (("lz4", 1), ("none", 2)):
        uri = f"lmdb://{tmp_path}/{compression}"
        load(uri, "capnp", compression, batch_records=1000)
        with loader.open(uri) as ds:
            seqs = sorted(b.seq for b in ds.manifest.batches)
        reads.clear()
        assert finalize(uri, dims=DIMS, workers=2, compact=False).in_process
        assert sorted(reads) == sorted(seqs * times), compression


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_a_damaged_flat_batch_fails_as_in_the_pool(tmp_path, monkeypatch, scheme):
    uri = f"{scheme}://{tmp_path}/ds"
    load(uri)
    finalize(uri, dims=DIMS, workers=2, compact=False)
    with loader.open(uri) as ds:
        before = ds.manifest.arrays
        b = [b for b in ds.manifest.batches if b.shard == 1][3]
        k = ds.manifest.shards
    st = parse_dataset_uri(uri).with_shards(k).open_shard(1, write=True)
    value = bytearray(st.get(batch_key(b.seq)))
    value[-7] ^= 0x5A
    st.put_sorted([(batch_key(b.seq), bytes(value))])
    st.sync()
    st.close()
    with pytest.raises(WorkerError) as small:  # the array is up to date: rebuilt on request
        finalize(uri, dims=DIMS, workers=2, compact=False, force=True)
    monkeypatch.setattr(fin, "SMALL_FINALIZE_BYTES", 0)
    with pytest.raises(WorkerError) as pooled:
        finalize(uri, dims=DIMS, workers=2, compact=False, force=True)
    assert small.value.raised(CorruptBatchError) and pooled.value.raised(CorruptBatchError)
    assert f"shard 1 batch {b.seq} " in str(small.value) and str(small.value) == str(pooled.value)
    monkeypatch.undo()
    with loader.open(uri) as ds:
        assert ds.manifest.arrays == before  # the committed array is kept


@pytest.mark.parametrize("fmt,compression", ENCODINGS, ids=[f"{f}-{c}" for f, c in ENCODINGS])
def test_decode_into_gives_decode_records(fmt, compression):
    layout = get_layout("scidb96")
    ser = get_serializer(fmt, layout, compression)
    recs = np.zeros(1234, layout.dtype)
    for i, name in enumerate(layout.names):
        recs[name] = np.arange(len(recs)) * (i + 1) % 97 - 40
    value = ser.encode(recs, 5000)
    out = np.empty(len(recs), layout.dtype)
    assert ser.decode_into(value, out) == 5000
    start, want = ser.decode(value)
    assert start == 5000 and out.tobytes() == np.ascontiguousarray(want).tobytes() == recs.tobytes()
    short = np.full(len(recs) - 1, 7, layout.dtype)
    assert ser.decode_into(value, short) is None
    assert (short == np.full(len(recs) - 1, 7, layout.dtype)).all()  # untouched
    assert ser.decode_copies == (fmt == "arrow" or compression != "none")


def test_damaged_compressed_value_is_refused_by_decode_into():
    layout = get_layout("scidb96")
    ser = get_serializer("capnp", layout, "lz4")
    value = bytearray(ser.encode(np.zeros(100, layout.dtype), 0))
    value[50] ^= 0xFF  # inside the compressed records' head
    with pytest.raises(Exception) as into:
        ser.decode_into(bytes(value), np.empty(100, layout.dtype))
    with pytest.raises(Exception) as plain:
        ser.decode(bytes(value))
    assert type(into.value) is type(plain.value) and str(into.value) == str(plain.value)


def lmdb_txns(root: str, shards: int) -> int:
    total = 0
    for s in range(shards):
        env = lmdb.open(f"{root}/shard-{s:03d}", readonly=True, lock=False, subdir=True, max_dbs=0)
        total += env.info()["last_txnid"]
        env.close()
    return total


def test_a_small_lmdb_shard_is_written_in_several_groups(tmp_path, monkeypatch):
    """20 pieces of ~96 KB over 2 shards: with MIN_GROUPS = 1 one group per shard (the
    budget's group size), by default a group per ~2 pieces: >= 4 more transactions per shard,
    the same array."""
    states, txns = {}, {}
    for groups in (1, build_emit.MIN_GROUPS):
        root = tmp_path / f"g{groups}"
        uri = f"lmdb://{root}"
        load(uri, batch_records=1000)
        monkeypatch.setattr(build_emit, "MIN_GROUPS", groups)
        before = lmdb_txns(root, 2)
        finalize(uri, dims=DIMS, workers=2, compact=False)
        txns[groups] = lmdb_txns(root, 2) - before
        states[groups] = array_state(uri)
    assert txns[build_emit.MIN_GROUPS] - txns[1] >= 8, txns
    assert states[1][1] == states[build_emit.MIN_GROUPS][1]  # same pieces: index rows (sizes, hashes)


def test_record_indices_of_kept_positions_skip_empty_batches_and_gaps():
    from types import SimpleNamespace as Batch

    from loader.arrays.decoded import Decoded

    batches = [Batch(first=0, count=3), Batch(first=3, count=0), Batch(first=10, count=2), Batch(first=12, count=1)]
    kept = Decoded.for_batches(batches, np.dtype([("a", "<i4")]))
    want = [0, 1, 2, 10, 11, 12]
    assert kept.ridx[np.arange(6)].tolist() == want
    assert kept.ridx[np.array([5, 0, 3])].tolist() == [12, 0, 10] and int(kept.ridx[4]) == 11
