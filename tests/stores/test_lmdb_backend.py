"""What only the LMDB backend (lmdb:// and mem://) promises, on real LMDB environments:
the map grows instead of failing, one environment per path per process, readahead and
the overflow prefetch, data.mdb checked before it is mapped, leaf nodes checked before a
value is touched, and a compaction interrupted by a crash finished or rolled back."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from loader.stores import lmdb_env

from .store_helpers import in_child, k, read_all, reader, writer

# --- the map, the environment cache, readahead -----------------------------------------


@pytest.mark.parametrize("which", ["lmdb", "mem"])
def test_lmdb_map_grows_on_map_full(which, lmdb_spec, mem_spec):
    spec = lmdb_spec if which == "lmdb" else mem_spec
    sizes = [1, 1000, 100_000, 2_000_000, 500_000]
    expected = {}
    with writer(spec, map_size="64k") as s:
        assert s.env.info()["map_size"] == 64 * 1024
        key = 0
        for call in range(6):
            batch = [(k(key + j), os.urandom(sizes[(call + j) % len(sizes)])) for j in range(4)]
            key += 4
            expected.update(batch)
            # generators exercise the MapFullError -> grow -> retry path, lists the pre-grow
            s.put_sorted(iter(batch) if call % 2 == 0 else batch)
        # an overwrite call that also needs more room
        batch = [(k(j), os.urandom(1_500_000)) for j in range(0, 8, 2)]
        expected.update(batch)
        s.put_sorted(iter(batch))
        assert s.grows >= 3
        assert s.env.info()["map_size"] > 5 * 1024 * 1024
        assert dict(s.range()) == expected
        s.sync()
    with reader(spec) as r:
        assert dict(r.range()) == expected


def test_lmdb_reader_follows_grown_map(lmdb_spec):
    w = writer(lmdb_spec, map_size="64k")
    try:
        w.put_sorted([(k(0), b"small")])
        got = in_child(read_all, "lmdb", lmdb_spec.shard_path(0))
        assert got == [(k(0), b"small")]
        big = os.urandom(3_000_000)
        w.put_sorted(iter([(k(1), big)]))
        got = in_child(read_all, "lmdb", lmdb_spec.shard_path(0))
        assert got == [(k(0), b"small"), (k(1), big)]
    finally:
        w.close()


def test_lmdb_one_environment_per_path(lmdb_spec):
    with writer(lmdb_spec) as w, reader(lmdb_spec) as r:
        assert w.env is r.env
        w.put_sorted([(k(1), b"x")])
        assert r.get(k(1)) == b"x"
    assert not any(p.startswith(lmdb_spec.root) for p in lmdb_env.ENVS)


def test_lmdb_readahead_option(lmdb_spec):
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), b"x")])
    store = lmdb_spec.backend.open(lmdb_spec.shard_path(0), write=False, options={"readahead": "0"})
    with store:
        assert store.get(k(1)) == b"x"
        assert store.env.flags()["readahead"] is False


def test_lmdb_seek_prefetches_overflow_values_in_one_request(lmdb_spec):
    """A random reader (readahead off) asks for a big value's overflow pages at once; the
    file range it advises is exactly where LMDB keeps the value."""
    vals = [np.random.default_rng(i).bytes(3 * 4096 + 100 * i) for i in range(5)]
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(i), vals[i]) for i in range(5)] + [(k(9), b"small")])
    opts = {"readahead": "0"}
    with lmdb_spec.backend.open(lmdb_spec.shard_path(0), write=False, options=opts) as st:
        spans = []
        real = st._advise
        st._advise = lambda off, n: spans.append((off, n)) or real(off, n)
        for i in range(5):
            assert st.seek(k(i)) == (k(i), vals[i])
        assert st.seek(k(5)) == (k(9), b"small")  # in its leaf page: no overflow, no advice
        data = os.path.join(lmdb_spec.shard_path(0), "data.mdb")
        with open(data, "rb") as f:
            for i, (off, n) in enumerate(spans[:5]):
                f.seek(off + 16)  # the overflow page header, then the value
                assert n == len(vals[i]) + 16 and f.read(len(vals[i])) == vals[i]
        assert len(spans) == 5
    with lmdb_spec.backend.open(lmdb_spec.shard_path(0), write=False) as st:  # readahead on: no advice
        spans = []
        real = st._advise
        st._advise = lambda off, n: spans.append((off, n)) or real(off, n)
        assert st.seek(k(0)) == (k(0), vals[0])
        assert spans == []


@pytest.mark.parametrize("off", ["0", "false", "no", "off", False])
def test_every_spelling_of_readahead_off_prefetches_overflow_pages(lmdb_spec, off):
    big = np.random.default_rng(7).bytes(5 * 4096)
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), big)])
    with reader(lmdb_spec, readahead=off) as st:
        assert st.env.flags()["readahead"] is False
        spans = []
        real = st._advise
        st._advise = lambda off, n: spans.append((off, n)) or real(off, n)
        assert st.seek(k(0)) == (k(1), big)
        assert len(spans) == 1 and spans[0][1] == len(big) + 16


# --- data.mdb, checked without LMDB ------------------------------------------------------


def _damage(data: str, how: str) -> str:
    """Damage data.mdb ``how``; returns a fragment of the problem it must be reported as."""
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        if how == "empty":
            f.truncate(0)
            return "data.mdb is empty (0 bytes)"
        if how == "not lmdb":
            f.write(b"not an LMDB file at all" * 10)
            return "does not start with an LMDB meta page"
        if how == "page size":
            f.seek(16 + 8 + 16)  # meta page 0: header, magic, version, address, mapsize; then psize
            f.write((3000).to_bytes(4, "little"))
            return "impossible page size 3000"
        if how == "one page":
            f.truncate(4096)
            return "not even its two meta pages"
        if how == "second meta":
            f.seek(4096 + 16)
            f.write(b"\0\0\0\0")
            return "meta page 1 of data.mdb is not a valid LMDB meta page"
        if how == "short":
            f.truncate(size - 4096)
            return "data.mdb is truncated:"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["empty", "not lmdb", "page size", "one page", "second meta", "short"])
def test_a_damaged_data_mdb_is_refused_before_it_is_mapped(lmdb_spec, how):
    from loader.errors import CorruptStoreError
    from loader.stores.lmdb_files import data_file_problem

    with writer(lmdb_spec) as w:
        w.put_sorted([(k(i), os.urandom(3000)) for i in range(40)])
        w.sync()
    shard = lmdb_spec.shard_path(0)
    data = os.path.join(shard, "data.mdb")
    assert data_file_problem(data) is None and lmdb_spec.backend.check(shard) is None
    want = _damage(data, how)
    assert want in data_file_problem(data)
    assert want in lmdb_spec.backend.check(shard)
    with pytest.raises(CorruptStoreError) as ei:
        reader(lmdb_spec)
    assert f"shard 0 ({shard}) is damaged" in str(ei.value) and want in str(ei.value)


def test_check_names_a_missing_shard_and_a_missing_data_file(lmdb_spec):
    shard = lmdb_spec.shard_path(0)
    assert lmdb_spec.backend.check(shard) == "missing"
    os.makedirs(shard)
    assert lmdb_spec.backend.check(shard) == "no data.mdb in it: not an LMDB store"


READ_DAMAGED_NODE = """
import sys
from loader.errors import CorruptStoreError
from loader.stores.registry import backend_for
from loader.stores.values import ValueReader
key = bytes.fromhex(sys.argv[2])
st = backend_for("lmdb").open(sys.argv[1], write=False)
reads = {"get": lambda: st.get(key), "seek": lambda: st.seek(key), "range": lambda: list(st.range()),
         "reader": lambda: ValueReader(st, "batches").__enter__().get(key)}
for name, read in reads.items():
    try:
        read()
        print(name, "read")
    except CorruptStoreError as e:
        print(name, e)
"""


@pytest.mark.parametrize("size", [10_000, 100], ids=["overflow-pages", "in-leaf-page"])
def test_a_leaf_node_pointing_past_the_file_is_an_error_not_a_signal(lmdb_spec, tmp_path, size):
    """A value (big: on overflow pages; small: inside its leaf page) whose leaf node was
    damaged to say it is 1 MiB longer, past the end of the file: every read path names the
    shard (py-lmdb would touch pages past the end of the file: SIGBUS)."""
    import subprocess
    import sys

    marker = bytes.fromhex("a5a5a5a5a5a5a5a5")
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), b"x" * 100), (marker, b"y" * size)])
        w.sync()
    data = os.path.join(lmdb_spec.shard_path(0), "data.mdb")
    raw = Path(data).read_bytes()
    nodes = [
        at
        for at in range(len(raw))
        if raw.startswith(marker, at) and int.from_bytes(raw[at - 2 : at], "little") == len(marker)
    ]  # the node's key size
    assert nodes
    with open(data, "r+b") as f:
        for at in nodes:  # every copy of the node (a page LMDB freed may hold an old one)
            f.seek(at - 6)  # the node's hi u16 of the value size: + 16 << 16 bytes (+ 1 MiB)
            f.write(b"\x10\x00")
    script = tmp_path / "read.py"
    script.write_text(READ_DAMAGED_NODE)
    p = subprocess.run(
        [sys.executable, str(script), lmdb_spec.shard_path(0), marker.hex()], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])  # < 0: killed by a signal
    lines = p.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["get", "seek", "range", "reader"]
    for line in lines:
        assert f"shard 0 ({lmdb_spec.shard_path(0)}) is damaged" in line, line
        if size > 4096:  # a small one's damaged node is found by LMDB itself (MDB_CORRUPTED), or by the check
            assert "lies outside the pages in use of data.mdb" in line, line


# --- the writer lock and the environment cache --------------------------------------------

HOLD_WRITER = """
import sys, time
from loader.stores.registry import backend_for
st = backend_for("lmdb").open(sys.argv[1], write=True)
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_busy_shard_names_the_pid_of_its_writer(lmdb_spec, tmp_path):
    import subprocess
    import sys

    from loader.errors import DatasetBusyError

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITER, lmdb_spec.shard_path(0)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(DatasetBusyError) as ei:
            writer(lmdb_spec)
        assert f"shard {lmdb_spec.shard_path(0)} is being written by another job (pid {holder.pid})" in str(ei.value)
        with reader(lmdb_spec) as r:  # readers never wait for the writer
            assert list(r.range()) == []
    finally:
        holder.communicate("", timeout=30)
    with writer(lmdb_spec) as w:  # the lock went with its process
        w.put_sorted([(k(1), b"x")])


def test_a_reader_open_in_the_same_process_keeps_the_writer_out(lmdb_spec):
    from loader.errors import StoreError

    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), b"x")])
    with reader(lmdb_spec):
        with pytest.raises(StoreError) as ei:
            writer(lmdb_spec)
        assert "already open read-only in this process" in str(ei.value)
    with writer(lmdb_spec):  # and once the reader is closed, the writer opens
        pass


# --- compaction, interrupted --------------------------------------------------------------


def test_a_compaction_interrupted_between_its_two_renames_is_completed_by_the_next_writer(lmdb_spec):
    """The fallback swap (no renameat2) renames the shard away, then the copy in: a crash
    between the two leaves no shard, its copy (.compacting) and the old one (.replaced)."""
    shard = lmdb_spec.shard_path(0)
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(i), os.urandom(2000)) for i in range(100)])
        w.delete_range(k(0), k(90))
        os.makedirs(shard + ".compacting")
        w.env.copy(shard + ".compacting", compact=True)  # the complete copy
        want = dict(w.range())
    os.rename(shard, shard + ".replaced")
    with writer(lmdb_spec) as w:
        assert dict(w.range()) == want
    assert not os.path.exists(shard + ".compacting") and not os.path.exists(shard + ".replaced")


@pytest.mark.parametrize("left", [".compacting", ".replaced"])
def test_a_compaction_leftover_beside_a_sound_shard_is_removed_by_the_next_writer(lmdb_spec, left):
    shard = lmdb_spec.shard_path(0)
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), b"kept")])
    os.makedirs(shard + left)
    with open(os.path.join(shard + left, "data.mdb"), "wb") as f:
        f.write(b"half a copy")
    with writer(lmdb_spec) as w:
        assert w.get(k(1)) == b"kept"
    assert not os.path.exists(shard + left)
