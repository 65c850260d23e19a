"""One conformance suite that every store backend runs (lmdb, lmdb with a writable map,
rocksdb, mem), on real stores: `StoreTests` holds the tests, one subclass per backend
says which (zarr-python's ``StoreTests`` shape). A new backend gets the whole suite by
adding a subclass."""

from __future__ import annotations

import os
import pickle
import shutil

import pytest

from loader.errors import DatasetBusyError, InputError, MissingPathError, NotWritableError, UsageError
from loader.stores.registry import backend_for
from loader.stores.spec import MEM_ROOT, StoreSpec, parse_dataset_uri

from .store_helpers import BACKENDS, in_child, k, make_spec, read_all, reader, try_open_writer, v, writer


class StoreTests:
    """The tests every backend passes; a subclass names its backend (store_helpers.BACKENDS)."""

    backend: str

    @pytest.fixture
    def spec(self, tmp_path) -> StoreSpec:
        spec = make_spec(self.backend, tmp_path)
        yield spec
        if spec.scheme == "mem":
            shutil.rmtree(spec.root, ignore_errors=True)

    # --- basic operations ---------------------------------------------------------------

    def test_put_get_range(self, spec):
        with writer(spec) as s:
            assert s.scheme == spec.scheme
            assert s.put_sorted([(k(i), v(i)) for i in range(100)]) == 100
            assert s.get(k(5)) == b"v5"
            assert bytes(s.get(k(99))) == b"v99"
            assert s.get(k(100)) is None
            assert [a for a, _ in s.range(k(10), k(13))] == [k(10), k(11), k(12)]
            assert [a for a, _ in s.range(None, k(2))] == [k(0), k(1)]
            assert [a for a, _ in s.range(k(98), None)] == [k(98), k(99)]
            assert len(list(s.range())) == 100
            assert list(s.range(k(50), k(50))) == []
            assert list(s.range(k(60), k(50))) == []
            assert list(s.range(k(1000), None)) == []
            assert [(bytes(a), bytes(b)) for a, b in s.range(k(7), k(8))] == [(k(7), b"v7")]
            assert s.seek(k(7)) == (k(7), b"v7")
            assert s.seek(k(0)) == (k(0), b"v0")
            assert s.seek(k(100)) is None
            assert s.seek(k(7) + b"\x00") == (k(8), b"v8")  # the first key >= the given one
            assert s.seek(k(1), table="nope") is None
            # empty call, missing table
            assert s.put_sorted([]) == 0
            assert s.put_sorted(iter(())) == 0
            assert s.get(k(1), table="nope") is None
            assert list(s.range(table="nope")) == []

    def test_bytes_like_values_and_generators(self, spec):
        with writer(spec) as s:
            items = ((k(i), memoryview(bytearray(v(i)))) for i in range(10))
            assert s.put_sorted(items) == 10
            assert s.get(k(3)) == b"v3"

    def test_big_endian_keys_sort_numerically(self, spec):
        nums = [0, 1, 255, 256, 1000, 65535, 65536, 2**32, 2**40, 2**63]
        with writer(spec) as s:
            s.put_sorted([(k(n), v(n)) for n in nums[::2]])
            # interleaving keys, below the table's last key: the overwrite path
            s.put_sorted([(k(n), v(n)) for n in nums[1::2]])
            got = [int.from_bytes(a, "big") for a, _ in s.range()]
            assert got == sorted(nums)
            assert [int.from_bytes(a, "big") for a, _ in s.range(k(256), k(2**32 + 1))] == [
                256,
                1000,
                65535,
                65536,
                2**32,
            ]

    def test_tables_are_independent(self, spec):
        with writer(spec) as s:
            s.put_sorted([(k(i), b"a") for i in range(5)], table="batches")
            s.put_sorted([(k(i), b"b") for i in range(3, 8)], table="chunks_x")
            assert s.get(k(4)) == b"a"
            assert s.get(k(4), table="chunks_x") == b"b"
            assert s.get(k(7)) is None
            assert len(list(s.range(table="chunks_x"))) == 5
            assert s.tables() == ["batches", "chunks_x"]
            s.drop_table("chunks_x")
            s.drop_table("never_existed")
            assert s.tables() == ["batches"]
            assert list(s.range(table="chunks_x")) == []
            assert len(list(s.range())) == 5
            # a dropped table can be recreated
            s.put_sorted([(k(1), b"c")], table="chunks_x")
            assert s.get(k(1), table="chunks_x") == b"c"

    def test_overwrite_when_keys_not_above_last(self, spec):
        with writer(spec) as s:
            s.put_sorted([(k(i), v(i)) for i in range(10, 20)])
            assert s.put_sorted([(k(i), v(i, b"new")) for i in range(5, 15)]) == 10
            got = dict(s.range())
            assert len(got) == 15
            assert got[k(5)] == b"new5" and got[k(14)] == b"new14" and got[k(15)] == b"v15"
            # same key rewritten by itself
            s.put_sorted([(k(19), b"last")])
            assert s.get(k(19)) == b"last"

    @pytest.mark.parametrize("bad", [[20, 21, 19], [20, 21, 21], [5, 25, 24]])
    def test_non_ascending_call_raises_and_writes_nothing(self, spec, bad):
        with writer(spec) as s:
            s.put_sorted([(k(i), v(i)) for i in range(10)])
            with pytest.raises(InputError) as ei:
                s.put_sorted([(k(i), v(i, b"bad")) for i in bad])
            assert "strictly ascending" in str(ei.value)
            assert k(bad[-1]).hex() in str(ei.value)
            assert isinstance(ei.value, ValueError)
            got = dict(s.range())
            assert len(got) == 10
            assert all(val.startswith(b"v") for val in got.values())
            # the store is still usable after the failed call
            assert s.put_sorted([(k(30), b"ok")]) == 1

    def test_delete_range(self, spec):
        with writer(spec) as s:
            s.put_sorted([(k(i), v(i)) for i in range(20)])
            assert s.delete_range(k(5), k(8)) == 3
            assert [int.from_bytes(a, "big") for a, _ in s.range(k(3), k(10))] == [3, 4, 8, 9]
            assert s.delete_range(k(5), k(8)) == 0
            assert s.delete_range(None, k(2)) == 2
            assert s.delete_range(k(18), None) == 2
            assert len(list(s.range())) == 20 - 7
            assert s.delete_range(table="nope") == 0
            assert s.delete_range() == 13
            assert list(s.range()) == []
            # and writing again after deleting everything
            s.put_sorted([(k(1), b"x")])
            assert s.get(k(1)) == b"x"

    def test_reopen_after_close_sees_data(self, spec):
        s = writer(spec)
        s.put_sorted([(k(i), v(i)) for i in range(50)])
        s.put_sorted([(k(i), v(i)) for i in range(5)], table="t2")
        s.sync()
        s.close()
        s.close()  # idempotent
        with reader(spec) as r:
            assert len(list(r.range())) == 50
            assert r.get(k(3), table="t2") == b"v3"
            assert r.tables() == ["batches", "t2"]
            with pytest.raises(UsageError):
                r.put_sorted([(k(100), b"x")])
        with writer(spec) as s:  # the writer can come back
            s.put_sorted([(k(50), b"v50")])
            assert len(list(s.range())) == 51

    def test_reader_missing_shard(self, spec):
        with pytest.raises(MissingPathError):
            reader(spec)

    def test_reader_while_writer_open(self, spec):
        w = writer(spec)
        try:
            w.put_sorted([(k(i), v(i)) for i in range(10)])
            # same process
            with reader(spec) as r:
                assert len(list(r.range())) == 10
                assert r.get(k(9)) == b"v9"
            # another process, while the writer still holds the shard
            got = in_child(read_all, spec.scheme, spec.shard_path(0))
            assert got == [(k(i), v(i)) for i in range(10)]
            w.put_sorted([(k(i), v(i)) for i in range(10, 20)])
            got = in_child(read_all, spec.scheme, spec.shard_path(0))
            assert len(got) == 20
        finally:
            w.close()

    def test_second_writer_is_busy(self, spec):
        w = writer(spec)
        try:
            w.put_sorted([(k(1), b"x")])
            name, msg = in_child(try_open_writer, spec.scheme, spec.shard_path(0))
            assert name == "DatasetBusyError", msg
            assert "being written by another job" in msg and spec.shard_path(0) in msg
            with pytest.raises(DatasetBusyError):  # a second writer in this process too
                writer(spec)
        finally:
            w.close()
        # once the writer is gone, another process may write
        assert in_child(try_open_writer, spec.scheme, spec.shard_path(0))[0] == "opened"

    def test_compact_sync_nbytes(self, spec):
        payload = os.urandom(50_000)
        with writer(spec) as s:
            s.put_sorted([(k(i), payload) for i in range(200)])
            s.put_sorted([(k(i), payload) for i in range(50)], table="other")
            s.sync()
            assert s.nbytes() > 0
            s.delete_range(k(0), k(150))
            before, after = s.compact()
            assert before > 0 and after > 0
            if spec.scheme != "rocksdb":
                assert after < before
            assert [int.from_bytes(a, "big") for a, _ in s.range()] == list(range(150, 200))
            assert s.get(k(199)) == payload
            assert len(list(s.range(table="other"))) == 50
            # still writable after compaction
            s.put_sorted([(k(500), b"after")])
            s.sync()
        with reader(spec) as r:
            assert r.get(k(500)) == b"after"
            assert r.nbytes() > 0

    def test_not_writable(self, spec, tmp_path):
        blocker = tmp_path / "file"
        blocker.write_text("x")
        with pytest.raises(NotWritableError) as ei:
            spec.backend.open(str(blocker / "shard-000"), write=True)
        assert str(blocker) in str(ei.value)
        if os.geteuid() != 0:
            ro = tmp_path / "ro"
            ro.mkdir()
            ro.chmod(0o500)
            try:
                with pytest.raises(NotWritableError):
                    spec.backend.open(str(ro / "ds" / "shard-000"), write=True)
            finally:
                ro.chmod(0o700)

    # --- the description workers receive ------------------------------------------------

    def test_store_spec_pickles_and_parses(self, tmp_path, monkeypatch):
        scheme, _query = BACKENDS[self.backend]
        monkeypatch.chdir(tmp_path)
        where = "name" if scheme == "mem" else "rel/data"
        opt = "block_size=8192" if scheme == "rocksdb" else "readahead=0"  # an option of the backend
        spec = parse_dataset_uri(f"{scheme}://{where}?shards=3&{opt}")
        assert spec.scheme == scheme
        assert spec.shards == 3
        assert dict(spec.options) == dict([opt.split("=")])
        if scheme == "mem":
            assert spec.root == os.path.join(MEM_ROOT, "name")
            assert spec.uri == "mem://name"
        else:
            assert os.path.isabs(spec.root)
            assert spec.root == str(tmp_path / "rel" / "data")
            assert spec.uri == f"{scheme}://{tmp_path / 'rel' / 'data'}"
        again = pickle.loads(pickle.dumps(spec))
        assert again == spec and hash(again) == hash(spec)
        assert again.shard_path(2).endswith("shard-002")
        assert again.with_shards(5).shards == 5
        assert again.backend is backend_for(scheme)
        assert parse_dataset_uri(f"{scheme}://x").shards is None

    def test_spec_open_shard_round_trip(self, spec):
        s3 = spec.with_shards(3)
        for i in range(3):
            with s3.open_shard(i, write=True) as s:
                s.put_sorted([(k(i), b"shard%d" % i)])
        for i in range(3):
            with s3.open_shard(i, write=False) as r:
                assert list(r.range()) == [(k(i), b"shard%d" % i)]


class TestLmdb(StoreTests):
    backend = "lmdb"


class TestLmdbWritemap(StoreTests):
    backend = "lmdb-writemap"


class TestRocksdb(StoreTests):
    backend = "rocksdb"


class TestMem(StoreTests):
    backend = "mem"
