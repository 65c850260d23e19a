"""`_preads.read_spans` (C): the spans of a value in a file, read with one release of the
GIL - the read of every random-read path (a box's runs of cells, a record and its header).

It reads exactly what the same slices of the file hold, for any spans inside the value, with
or without asking the disk for them first; it refuses spans outside the value and a buffer
too small, says how far it got when the file ends, and lets other threads run Python while
it waits for the disk. Through an LMDB value view, a data.mdb cut short under a reader is a
CorruptStoreError naming the byte where it ended."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.stores._preads import read_spans

FILE = 64 * 1024


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("preads") / "data.bin"
    path.write_bytes(os.urandom(FILE))
    fd = os.open(path, os.O_RDONLY)
    yield fd, path.read_bytes()
    os.close(fd)


@st.composite
def value_and_spans(draw):
    at = draw(st.integers(0, FILE - 1))
    size = draw(st.integers(0, FILE - at))
    spans = []
    for _ in range(draw(st.integers(0, 12))):
        offset = draw(st.integers(0, size))
        spans.append((offset, draw(st.integers(0, size - offset))))
    return at, size, spans


@settings(max_examples=200, deadline=None)
@given(case=value_and_spans(), advise=st.booleans(), spare=st.integers(0, 9))
def test_read_spans_reads_what_the_file_holds(data_file, case, advise, spare):
    fd, raw = data_file
    at, size, spans = case
    total = sum(n for _, n in spans)
    into = bytearray(b"\xee" * (total + spare))
    assert read_spans(fd, at, size, spans, memoryview(into), advise) == total
    assert bytes(into[:total]) == b"".join(raw[at + o : at + o + n] for o, n in spans)
    assert into[total:] == b"\xee" * spare  # nothing past the spans is written


@pytest.mark.parametrize("span", [(-1, 2), (0, -1), (10, 91), (101, 0), (0, 2**62)])
def test_a_span_outside_the_value_is_refused_before_anything_is_read(data_file, span):
    fd, _ = data_file
    into = bytearray(b"\xee" * 200)
    with pytest.raises((ValueError, OverflowError), match=r"outside a value of 100|int too big"):
        read_spans(fd, 1000, 100, [(0, 5), span], into, True)
    assert into == b"\xee" * 200


@pytest.mark.parametrize(
    "args, error",
    [
        ((0, 100, [(0, 50)], bytearray(49), False), ValueError),  # a buffer too small
        ((0, 100, [(0, 5)], b"read-only", False), BufferError),  # a buffer it cannot write
        ((0, 100, [[0, 5]], bytearray(5), False), TypeError),  # a span that is not a tuple
        ((0, 100, [(0, 5, 1)], bytearray(5), False), TypeError),
        ((0, 100, None, bytearray(5), False), TypeError),
        ((-1, 100, [(0, 5)], bytearray(5), False), ValueError),  # a negative position
    ],
)
def test_bad_arguments_are_errors_not_crashes(data_file, args, error):
    fd, _ = data_file
    with pytest.raises(error):
        read_spans(fd, *args)


def test_the_end_of_the_file_stops_the_read_and_says_where(data_file):
    fd, raw = data_file
    into = bytearray(300)
    got = read_spans(fd, FILE - 150, 1000, [(0, 100), (100, 100), (200, 100)], into, True)
    assert got == 150
    assert bytes(into[:150]) == raw[-150:]


def test_a_failed_read_is_an_oserror(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY)  # a directory: pread fails with EISDIR
    try:
        with pytest.raises(IsADirectoryError):
            read_spans(fd, 0, 10, [(0, 10)], bytearray(10), True)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        read_spans(2**30, 0, 10, [(0, 10)], bytearray(10), False)  # not a descriptor


def test_other_threads_run_python_while_it_reads():
    """One long read (256 MiB of /dev/zero) with the GIL switch interval longer than the
    read: a thread counting in Python moves only if read_spans released the GIL."""
    count, stop = [0], threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1

    old = sys.getswitchinterval()
    fd = os.open("/dev/zero", os.O_RDONLY)
    into = bytearray(256 << 20)
    t = threading.Thread(target=counter)
    try:
        sys.setswitchinterval(0.5)  # ~20x the read
        t.start()
        before = count[0]
        read_spans(fd, 0, len(into), [(0, len(into))], into, False)
        during = count[0] - before
    finally:
        stop.set()
        sys.setswitchinterval(old)
        t.join()
        os.close(fd)
    assert during > 0


CUT_SHORT = """
import os, sys
from loader.errors import CorruptStoreError
from loader.stores.registry import backend_for
from loader.stores.values import ValueReader
st = backend_for("lmdb").open(sys.argv[1], write=False, options={"readahead": "0"})
with ValueReader(st, "batches") as rd:
    v = rd.get(bytes.fromhex(sys.argv[2]), touch=False)
    at, size, _ = rd.view.find(bytes.fromhex(sys.argv[2]))
    os.truncate(os.path.join(sys.argv[1], "data.mdb"), at + size // 2)  # a page boundary: 4096 | at + size // 2
    for how in ("view", "parts"):
        try:
            if how == "view":
                rd.read_spans(v, [(0, 10), (size - 10, 10)], memoryview(bytearray(20)))
            else:
                rd.read_parts(v, [(size - 10, 10)])
            print(how, "read")
        except CorruptStoreError as e:
            print(how, at + size // 2, e)
os._exit(0)  # the map's pages past the cut are never touched
"""


def test_a_data_file_cut_short_under_a_reader_is_a_corrupt_store(lmdb_spec, tmp_path):
    from .store_helpers import k, writer

    with writer(lmdb_spec) as w:
        w.put_sorted([(k(1), b"x" * 100), (k(2), os.urandom(16 * 4096 - 16))])
        w.sync()
    script = tmp_path / "cut.py"
    script.write_text(CUT_SHORT)
    p = subprocess.run(
        [sys.executable, str(script), lmdb_spec.shard_path(0), k(2).hex()], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["view", "parts"], lines
    for line in lines:
        _, cut, message = line.split(" ", 2)
        assert f"data.mdb ended at byte {cut} inside a value (bytes " in message, line
        assert lmdb_spec.shard_path(0) in message, line


def test_a_copied_value_is_read_and_checked_the_same_way(tmp_path):
    """A backend that copies values (RocksDB: no map, no file offset) reads the same spans
    through `ValueReader.read_spans`, and refuses a span outside the value likewise."""
    from loader.stores.registry import backend_for
    from loader.stores.values import ValueReader

    st = backend_for("rocksdb").open(str(tmp_path / "shard"), write=True)
    try:
        st.put_sorted([(b"k", b"0123456789")])
        with ValueReader(st, "batches") as rd:
            v = rd.get(b"k")
            assert rd.view is None
            assert [bytes(p) for p in rd.read_parts(v, [(0, 2), (8, 2), (5, 0)])] == [b"01", b"89", b""]
            into = bytearray(b"\xee" * 7)
            with pytest.raises(ValueError, match=re.escape("bytes 8..13 are outside a value of 10")):
                rd.read_spans(v, [(0, 2), (8, 5)], memoryview(into))
            assert into == b"\xee" * 7  # refused before anything is copied
    finally:
        st.close()
