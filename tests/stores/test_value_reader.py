"""Reading many values of one table (stores/values.py) on every backend: the same values
`get` gives, zero-copy under LMDB (buffers into the map, one snapshot until the block
ends), absent tables and keys as None, and `release` giving a zero-copy value's pages
back so that a pass over a big table stays flat in RSS."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from loader.stores.values import ValueReader

from .store_helpers import k, reader, writer

SIZES = [0, 1, 100, 4000, 4097, 70_000]  # empty, in-page and overflow values


def _values() -> dict[bytes, bytes]:
    rng = np.random.default_rng(5)
    return {k(i): rng.bytes(SIZES[i % len(SIZES)]) for i in range(0, 60, 2)}


def test_a_reader_gives_what_get_gives_on_every_backend(any_spec):
    want = _values()
    with writer(any_spec) as w:
        w.put_sorted(sorted(want.items()), table="t")
        w.sync()
    with reader(any_spec) as st:
        with ValueReader(st, "t") as rd:
            for key, value in want.items():
                got = rd.get(key)
                assert bytes(got) == value == st.get(key, table="t")
                rd.release(got)
            assert rd.get(k(1)) is None and rd.get(k(1000)) is None  # keys between and past the stored ones
            rd.release(None)
        with ValueReader(st, "missing") as rd:
            assert rd.get(k(0)) is None
        zero_copy = any_spec.scheme in ("lmdb", "mem")
        with ValueReader(st, "t") as rd:
            got = rd.get(k(4))
            assert isinstance(got, memoryview) == zero_copy and (not zero_copy or got.readonly)
        assert rd.view is None  # the block's transaction ended with it
        view = st.value_view("t")
        assert (view is not None) == zero_copy and st.value_view("missing") is None
        if view is not None:
            view.close()


def test_an_lmdb_reader_keeps_its_snapshot_until_the_block_ends(any_spec):
    if any_spec.scheme == "rocksdb":
        return  # copies: nothing to keep
    with writer(any_spec) as w:
        w.put_sorted([(k(1), b"old" * 2000)], table="t")
        with ValueReader(w, "t") as rd:
            held = rd.get(k(1))
            w.put_sorted([(k(1), b"new" * 2000), (k(2), b"added")], table="t")  # commits meanwhile
            assert bytes(held) == b"old" * 2000 and rd.get(k(2)) is None
        with ValueReader(w, "t") as rd:
            assert bytes(rd.get(k(1))) == b"new" * 2000 and bytes(rd.get(k(2))) == b"added"


DROP = """
import sys
from loader.stores.registry import backend_for
with backend_for("lmdb").open(sys.argv[1], write=True) as st:
    st.drop_table("t")
"""


def test_a_table_another_process_dropped_reads_as_absent(lmdb_spec):
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), b"x")], table="t")
    with reader(lmdb_spec) as st:
        assert st.get(k(1), table="t") == b"x"  # the handle is now cached in this process
        subprocess.run([sys.executable, "-c", DROP, lmdb_spec.shard_path(0)], check=True)
        with ValueReader(st, "t") as rd:
            assert rd.get(k(1)) is None


def _rss_kib(path: str) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def test_release_gives_the_pages_of_read_values_back(lmdb_spec):
    """Reading 32 MiB zero-copy makes them resident; released, they leave the RSS."""
    block = os.urandom(1 << 20)
    with writer(lmdb_spec) as w:
        w.put_sorted([(k(i), block) for i in range(32)])
        w.sync()
    data = os.path.realpath(os.path.join(lmdb_spec.shard_path(0), "data.mdb"))
    for release in (False, True):
        with reader(lmdb_spec) as st, ValueReader(st, "batches") as rd:
            for i in range(32):
                v = rd.get(k(i))
                assert np.frombuffer(v, np.uint8).sum() >= 0  # touch every page
                if release:
                    rd.release(v)
            resident = _rss_kib(data)
        if release:
            assert resident < 4 << 10, resident  # what is left: leaf pages, partial pages
        else:
            assert resident > 28 << 10, resident  # without release: the values stay resident
