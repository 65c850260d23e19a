"""The shard and batch checks (stores/health.py) on real datasets of every backend: a
missing or damaged shard the manifest relies on is named (which shard, how many
committed batches, what to do) and stops a writer; a stored batch whose bytes changed is
CorruptBatchError naming shard and batch."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

import loader
from loader.errors import CorruptBatchError, CorruptStoreError, MissingShardError
from loader.stores.health import (
    ShardProblem,
    batch_message,
    check_shard,
    check_value,
    committed_shards,
    existing_shards,
    require_shards,
    shard_problems,
)
from loader.stores.spec import parse_dataset_uri


@pytest.fixture(params=["lmdb", "rocksdb", "mem"])
def dataset(request, tmp_path):
    """(spec with its shard count, manifest) of a 3-shard dataset of 6 batches."""
    scheme = request.param
    uri = f"mem://health-{uuid.uuid4().hex[:10]}" if scheme == "mem" else f"{scheme}://{tmp_path}/ds"
    loader.load("gen://scidb96?n=3000", uri, shards=3, batch_records=500, workers=1, progress="none")
    with loader.open(uri) as ds:
        m = ds.manifest
    yield parse_dataset_uri(uri).with_shards(m.shards), m
    if scheme == "mem":
        shutil.rmtree(parse_dataset_uri(uri).root, ignore_errors=True)


def test_a_sound_dataset_has_no_problems(dataset):
    spec, m = dataset
    counts = committed_shards(m)
    assert sum(counts.values()) == len(m.batches) == 6
    assert counts == {s: sum(1 for b in m.batches if b.shard == s) for s in range(3)}
    assert existing_shards(m) == (0, 1, 2) and existing_shards(None) == ()
    assert shard_problems(spec, m) == [] and all(check_shard(spec, s) is None for s in range(3))
    require_shards(spec, m)
    require_shards(spec, None)  # a new dataset: nothing is required yet


def test_a_missing_shard_is_named_with_its_batches_and_stops_a_writer(dataset):
    spec, m = dataset
    n1 = committed_shards(m)[1]
    shutil.rmtree(spec.shard_path(1))
    [p] = shard_problems(spec, m)
    assert p == ShardProblem(1, spec.shard_path(1), n1, "missing") and p.missing
    assert p.line() == f"DAMAGED: shard 1 ({spec.shard_path(1)}) missing ({n1} committed batches)"
    assert ShardProblem(**p.to_dict()) == p  # what `info --json` prints comes back (cli)
    with pytest.raises(MissingShardError) as ei:
        require_shards(spec, m)
    assert str(ei.value) == (
        f"shard 1 ({spec.shard_path(1)}) is missing, but the manifest lists {n1} committed batches in it; "
        "the dataset is damaged, nothing was written - restore the shard from a backup, or rebuild the "
        "dataset with `bulkload load SOURCE DATASET --replace`"
    )
    assert "nothing was written" not in str(p.error())  # a reader's message
    assert check_shard(spec, 1).batches is None  # a worker's check does not count


def test_several_damaged_shards_are_all_counted(dataset):
    spec, m = dataset
    for s in (0, 2):
        shutil.rmtree(spec.shard_path(s))
    with pytest.raises(MissingShardError, match=r"shard 0 .* \(and 1 more damaged shard\(s\): 2\)$"):
        require_shards(spec, m)


def _damage(spec, shard: int, how: str) -> type:
    """Damage one shard ``how``; returns the error class a writer must get."""
    path = spec.shard_path(shard)
    if spec.scheme == "rocksdb":
        current = os.path.join(path, "CURRENT")
        if how == "no store file":
            os.unlink(current)
            return MissingShardError
        with open(current, "w") as f:
            f.write("MANIFEST-999999\n" if how == "broken" else "garbage\n")
        return CorruptStoreError
    data = os.path.join(path, "data.mdb")
    if how == "no store file":
        os.unlink(data)
        return MissingShardError
    os.truncate(data, os.path.getsize(data) // 2 if how == "broken" else 4096)
    return CorruptStoreError


@pytest.mark.parametrize("how", ["no store file", "broken", "very broken"])
def test_a_shard_that_is_not_a_sound_store_is_named_with_what_is_wrong(dataset, how):
    spec, m = dataset
    error = _damage(spec, 2, how)
    [p] = shard_problems(spec, m)
    assert p.shard == 2 and p.batches == committed_shards(m)[2] and p.problem == spec.backend.check(p.path)
    assert p.missing == (error is MissingShardError)
    with pytest.raises(error) as ei:
        require_shards(spec, m)
    assert type(ei.value) is error
    what = "is missing" if p.problem == "missing" else f"is damaged ({p.problem})"
    assert str(ei.value).startswith(f"shard 2 ({spec.shard_path(2)}) {what}, but the manifest lists")


def _stored(spec, b) -> bytes:
    with spec.open_shard(b.shard, write=False) as st:
        return bytes(st.get(b.seq.to_bytes(8, "big")))


def test_a_stored_batch_is_checked_against_its_manifest_row(dataset):
    spec, m = dataset
    for b in m.batches:
        check_value(spec.uri, b, _stored(spec, b))
    b = m.batches[3]
    value = bytearray(_stored(spec, b))
    value[len(value) // 2] ^= 1
    with pytest.raises(CorruptBatchError) as ei:
        check_value(spec.uri, b, value)
    assert str(ei.value) == batch_message(spec.uri, b, "stored bytes changed (checksum mismatch)")
    assert str(ei.value).startswith(f"shard {b.shard} batch {b.seq} (first record {b.first}) of {spec.uri}: ")
    assert f"run `bulkload verify {spec.uri}` to list every damaged batch" in str(ei.value)
    with pytest.raises(CorruptBatchError, match=f"{len(value) - 1} bytes stored, {b.nbytes} in the manifest"):
        check_value(spec.uri, b, value[:-1])


def test_a_document_batch_is_named_by_its_ids(tmp_path):
    uri = f"lmdb://{tmp_path}/docs"
    loader.load("gen://docs?n=40&seed=3", uri, shards=2, workers=1, progress="none")
    with loader.open(uri) as ds:
        b = ds.manifest.batches[0]
    assert b.keyed
    assert batch_message(uri, b, "gone").startswith(
        f"shard {b.shard} batch {b.seq} (documents {b.lo}..{b.hi}) of {uri}: gone; "
    )


def test_a_file_the_store_replaces_while_it_is_checked_is_no_permission_denial(tmp_path):
    """A shard's files are checked for access before it is opened (stores/base.py
    `require_access`). RocksDB rotates its OPTIONS-N files as another worker opens the same
    shard: a file listed and gone before its check failed os.access and was called
    "permission denied" (a finalize of a fresh RocksDB dataset failed so in CI). Here a
    thread replaces files as fast as it can while the shard is checked in a loop."""
    import threading
    import time

    from loader.errors import NotReadableError
    from loader.stores.base import require_access

    shard = tmp_path / "shard-000"
    shard.mkdir()
    for i in range(50):
        (shard / f"{i:06d}.sst").write_bytes(b"x")
    stop = threading.Event()

    def rotate() -> None:
        i = 0
        while not stop.is_set():
            (shard / f"OPTIONS-{i:06d}").write_bytes(b"")
            (shard / f"OPTIONS-{i - 1:06d}").unlink(missing_ok=True)
            i += 1

    t = threading.Thread(target=rotate)
    t.start()
    denials, checks, until = 0, 0, time.monotonic() + 1.5
    try:
        while time.monotonic() < until:
            try:
                require_access(str(shard))
            except NotReadableError:
                denials += 1
            checks += 1
    finally:
        stop.set()
        t.join()
    assert checks > 100 and denials == 0
