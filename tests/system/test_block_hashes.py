"""BLZ3 values in real LMDB datasets (infra/checksums.py, serializers/shuffled.py): each LZ4
block carries its own xxh3_64 after the block table, and the catalog row's checksum covers
the value's bytes up to the end of those hashes.

- The writer (a load, compaction) writes BLZ3, its row's checksum the head hash.
- A byte changed anywhere in a value (Cap'n Proto header, BLZ3 head, block table, hash
  array, any block, a byte added) fails every read that needs it with one line naming the
  shard and batch: a scan of the columns of a changed block (the other columns read back
  right), to_arrow, read_records and `bulkload verify` (exit 1).
- A BLZ2 dataset main's code wrote (tests/data/blz2) reads whole and by columns, verifies,
  compacts, and a changed byte in it is still found (its whole-value checksum).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
import xxhash
from helpers import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loader
from loader.errors import CorruptBatchError
from loader.model.layouts import get_layout
from loader.model.placement import batch_key
from loader.sources.generators import generate
from loader.stores.spec import parse_dataset_uri

GOLDEN = Path(__file__).parent.parent / "data" / "blz2" / "scidb96-3000.tar.gz"
HEADER = 40  # the Cap'n Proto header before the BLZ3 framing
TABLE = HEADER + 20  # where the block count (u32, u32 zero), then the block table, start
N = 3000
LAYOUT = get_layout("scidb96")
NAMES = list(LAYOUT.dtype.names)


def stored(uri: str, b) -> bytes:
    with loader.open(uri) as ds:
        k = ds.manifest.shards
    st_ = parse_dataset_uri(uri).with_shards(k).open_shard(b.shard, write=False)
    try:
        return bytes(st_.get(batch_key(b.seq)))
    finally:
        st_.close()


def put(uri: str, b, value: bytes) -> None:
    with loader.open(uri) as ds:
        k = ds.manifest.shards
    st_ = parse_dataset_uri(uri).with_shards(k).open_shard(b.shard, write=True)
    try:
        st_.put_sorted([(batch_key(b.seq), value)])
        st_.sync()
    finally:
        st_.close()


def batches(uri: str) -> list:
    with loader.open(uri) as ds:
        return list(ds.manifest.batches)


def blocks_of(value: bytes) -> list[tuple[int, int, int, int, int]]:
    """(lo, hi, where its hash is, where its bytes start, its bytes) of each block of a BLZ3 value."""
    k = struct.unpack_from("<I", value, HEADER + 20)[0]
    pos, out = TABLE + 8 + 24 * k, []
    for j in range(k):
        lo, hi, _mode, size = struct.unpack_from("<IIB3xI", value, TABLE + 8 + 16 * j)
        out.append((lo, hi, TABLE + 8 + 16 * k + 8 * j, pos, size))
        pos += size
    assert pos == len(value)
    return out


def columns_in(lo: int, hi: int) -> set[str]:
    """The fields whose bytes lie in planes [lo, hi) of a record's data section."""
    spans = {n: LAYOUT.capnp_span(n) for n in NAMES}
    return {n for n, (at, size) in spans.items() if at < hi and at + size > lo}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("blz3")
    uri = f"lmdb://{root}/ds"
    loader.load(f"gen://scidb96?n={N}", uri, batch_records=1000, shards=2, workers=1)
    return uri


@pytest.fixture
def dataset(base, tmp_path) -> str:
    src = Path(base.removeprefix("lmdb://"))
    shutil.copytree(src, tmp_path / "ds", ignore=shutil.ignore_patterns("lock.mdb", ".lock", "writer.lock"))
    return f"lmdb://{tmp_path}/ds"


def test_the_writer_writes_blz3_values_whose_row_checksum_covers_head_table_and_hashes(base, tmp_path):
    small = f"lmdb://{tmp_path}/small"
    loader.load(f"gen://scidb96?n={N}", small, batch_records=100, shards=2, workers=1)
    for uri, k in ((base, 14), (small, 1)):  # under 1,000 records: one block of every plane
        for b in batches(uri):
            v = stored(uri, b)
            assert v[HEADER : HEADER + 4] == b"BLZ3"
            blocks = blocks_of(v)
            assert len(blocks) == k
            end = TABLE + 8 + 24 * k
            assert b.checksum == xxhash.xxh3_64_intdigest(v[:end]) != xxhash.xxh3_64_intdigest(v)
            for _lo, _hi, h, at, size in blocks:
                assert struct.unpack_from("<Q", v, h)[0] == xxhash.xxh3_64_intdigest(v[at : at + size])
    with loader.open(base) as ds:
        assert ds.to_arrow().num_rows == N


def _regions(value: bytes) -> dict[str, tuple[int, int]]:
    """Byte ranges of the regions of a BLZ3 value."""
    blocks = blocks_of(value)
    k = len(blocks)
    out = {
        "capnp header": (0, HEADER),
        "blz3 head": (HEADER, TABLE + 8),
        "block table": (TABLE + 8, TABLE + 8 + 16 * k),
        "hash array": (TABLE + 8 + 16 * k, TABLE + 8 + 24 * k),
    }
    for j, (_lo, _hi, _h, at, size) in enumerate(blocks):
        out[f"block {j}"] = (at, at + size)
    return out


def _damaged_columns(value: bytes, spot: int) -> set[str]:
    """The columns whose scan must fail when byte ``spot`` of ``value`` changes: all of them
    in the head, table or header; a block's (or the block its hash belongs to) otherwise."""
    for lo, hi, _h, at, size in blocks_of(value):
        if at <= spot < at + size:
            return columns_in(lo, hi)
    return set(NAMES)


def _expect_scans(uri: str, b, bad: set[str], expected: np.ndarray) -> None:
    where = re.escape(f"shard {b.shard} batch {b.seq} (first record {b.first})")
    with loader.open(uri) as ds:
        for name in NAMES:
            if name in bad:
                with pytest.raises(CorruptBatchError, match=rf"{where} of .*: ") as e:
                    ds.scan(columns=[name]).read_all()
                assert "\n" not in str(e.value)
            else:
                got = ds.scan(columns=[name]).read_all().column(name).to_numpy()
                assert got.tobytes() == expected[name].tobytes(), name
        for whole in (lambda: ds.to_arrow(), lambda: ds.read_records()):
            with pytest.raises(CorruptBatchError, match=where):
                whole()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_changed_byte_in_any_region_fails_the_reads_that_need_it_naming_shard_and_batch(dataset, data):
    b = batches(dataset)[1]
    value = stored(dataset, b)
    regions = _regions(value)
    region = data.draw(st.sampled_from(sorted(regions)), label="region")
    lo, hi = regions[region]
    spot = data.draw(st.integers(lo, hi - 1), label="byte")
    flip = data.draw(st.integers(1, 255), label="xor")
    put(dataset, b, value[:spot] + bytes([value[spot] ^ flip]) + value[spot + 1 :])
    try:
        expected = generate(LAYOUT, 0, N)
        _expect_scans(dataset, b, _damaged_columns(value, spot), expected)
    finally:
        put(dataset, b, value)


@pytest.mark.parametrize(
    "how", ["capnp header", "blz3 head", "block table", "hash array", "block 3", "block 13", "added"]
)
def test_bulkload_verify_finds_a_changed_byte_in_every_region_of_a_blz3_value(dataset, how):
    b = batches(dataset)[2]
    value = stored(dataset, b)
    if how == "added":
        bad = value + b"\x00"
    else:
        lo, hi = _regions(value)[how]
        spot = (lo + hi) // 2
        bad = value[:spot] + bytes([value[spot] ^ 0x01]) + value[spot + 1 :]
    put(dataset, b, bad)
    p = run_cli("verify", dataset)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"shard {b.shard} batch {b.seq}" in p.stdout + p.stderr
    if how == "added":
        with loader.open(dataset) as ds, pytest.raises(CorruptBatchError, match=f"batch {b.seq} .*bytes stored"):
            ds.scan(columns=["i0"]).read_all()


def _golden(tmp_path: Path) -> str:
    with tarfile.open(GOLDEN) as t:
        t.extractall(tmp_path, filter="data")
    return f"lmdb://{tmp_path}/ds"


def test_a_blz2_dataset_main_wrote_reads_whole_and_by_columns_and_verifies(tmp_path):
    uri = _golden(tmp_path)
    expected = generate(LAYOUT, 0, N)
    for b in batches(uri):
        v = stored(uri, b)
        assert v[HEADER : HEADER + 4] == b"BLZ2" and b.checksum == xxhash.xxh3_64_intdigest(v)
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == expected.tobytes()
        t = ds.to_arrow()
        for name in NAMES:
            assert t.column(name).to_numpy().tobytes() == expected[name].tobytes()
            got = ds.scan(columns=[name]).read_all().column(name).to_numpy()
            assert got.tobytes() == expected[name].tobytes()
    p = run_cli("verify", uri)
    assert p.returncode == 0, p.stdout + p.stderr
    b = batches(uri)[1]
    v = stored(uri, b)
    put(uri, b, v[:-1] + bytes([v[-1] ^ 1]))  # its last block: a column this scan does not ask for
    with loader.open(uri) as ds, pytest.raises(CorruptBatchError, match=f"batch {b.seq} .*checksum mismatch"):
        ds.scan(columns=["i0"]).read_all()
    assert run_cli("verify", uri).returncode == 1


@pytest.mark.parametrize("source", ["blz3", "blz2"])
def test_compaction_keeps_values_readable_and_verified(tmp_path, source):
    if source == "blz2":
        uri = _golden(tmp_path)  # 3 batches of 1000: compaction to 3000 re-encodes them as BLZ3
    else:
        uri = f"lmdb://{tmp_path}/ds"
        loader.load(f"gen://scidb96?n={N}", uri, batch_records=100, shards=2, workers=1)
    p = run_cli("compact", uri, "--target-batch-records", "3000", "--force", "-q")
    assert p.returncode == 0, p.stdout + p.stderr
    expected = generate(LAYOUT, 0, N)
    rows = batches(uri)
    assert len(rows) < (3 if source == "blz2" else 30)
    for b in rows:
        v = stored(uri, b)
        assert v[HEADER : HEADER + 4] == b"BLZ3"
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == expected.tobytes()
        for name in NAMES:
            assert ds.scan(columns=[name]).read_all().column(name).to_numpy().tobytes() == expected[name].tobytes()
    p = run_cli("verify", uri)
    assert p.returncode == 0, p.stdout + p.stderr
    b = rows[-1]
    v = stored(uri, b)
    lo, hi, _h, at, _size = blocks_of(v)[1]
    put(uri, b, v[:at] + bytes([v[at] ^ 1]) + v[at + 1 :])
    _expect_scans(uri, b, columns_in(lo, hi), expected)
    assert run_cli("verify", uri).returncode == 1


MAPPED_SCRIPT = """
import sys
import loader

def mapped_kib():  # resident KiB of this process's mappings of the shards' data.mdb
    kib, in_data = 0, False
    for line in open("/proc/self/smaps"):
        if line[0] in "0123456789abcdef" and " " in line and "-" in line.split()[0]:
            in_data = line.rstrip().endswith("/data.mdb") and "/shard-" in line
        elif in_data and line.startswith("Rss:"):
            kib += int(line.split()[1])
    return kib

with loader.open(sys.argv[1]) as ds:
    before = mapped_kib()
    rows = ds.scan(columns=[sys.argv[2]]).read_all().num_rows
    print(rows, mapped_kib() - before)
"""


def test_a_scan_of_one_column_maps_in_only_the_pages_of_its_blocks():
    """Random-valued records (every block raw): a scan of one column of fourteen hashes and
    decodes only its blocks, and reads only their pages of the store - not every page of
    every value (py-lmdb touches them all as it hands a value out). In tmpfs (/dev/shm): a
    disk file's page faults map the pages read around them too, which hides the difference."""
    from loader.bench.reads import random_records

    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        _one_column_maps_in_its_blocks(Path(d), random_records)


def _one_column_maps_in_its_blocks(tmp_path: Path, random_records) -> None:
    n = 100_000
    raw = tmp_path / "rnd.raw"
    random_records(n).tofile(raw)
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(str(raw), uri, layout="scidb96", batch_records=10_000, shards=1, workers=1)
    with loader.open(uri) as ds:
        stored_kib = sum(b.nbytes for b in ds.manifest.batches) // 1024
    p = subprocess.run([sys.executable, "-c", MAPPED_SCRIPT, uri, "d3"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows, grew_kib = map(int, p.stdout.split())
    assert rows == n
    assert stored_kib > 8000  # ~8.4 MB (of 9.6): random values barely compress
    assert grew_kib < stored_kib // 4, (grew_kib, stored_kib)  # d3's blocks: 1/12 of the bytes, and their edges


def test_dictionary_blocks_of_ticks_load_verify_compact_and_their_damage_is_found(tmp_path):
    """gen://ticks values hold dictionary blocks (mode 3: sym, price, ...): a load reads back
    byte-identical (whole and by columns) and verifies; compaction re-encodes them as
    dictionaries; a changed byte in one fails the scans of its column only, and verify."""
    ticks, n = get_layout("ticks"), 10000
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://ticks?n={n}", uri, batch_records=5000, shards=2, workers=1)
    expected = generate(ticks, 0, n)
    spans = {name: span for name in ticks.names if (span := ticks.capnp_span(name)) is not None}

    def check(uri: str) -> None:
        with loader.open(uri) as ds:
            assert ds.read_records().tobytes() == expected.tobytes()
            for name in ("price", "bid", "size"):
                assert ds.scan(columns=[name]).read_all().column(name).to_numpy().tobytes() == expected[name].tobytes()
            assert ds.scan(columns=["sym"]).read_all().column("sym").to_pylist() == [
                s.ljust(8, b"\0") for s in expected["sym"].tolist()
            ]
        for b in batches(uri):
            v = stored(uri, b)
            modes = {
                lo: struct.unpack_from("<B", v, TABLE + 8 + 16 * j + 8)[0] for j, (lo, *_r) in enumerate(blocks_of(v))
            }
            assert modes[spans["sym"][0]] == modes[spans["price"][0]] == 3
        p = run_cli("verify", uri)
        assert p.returncode == 0, p.stdout + p.stderr

    check(uri)
    p = run_cli("compact", uri, "--target-batch-records", "10000", "--force", "-q")
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(batches(uri)) < 3
    check(uri)
    b = batches(uri)[0]
    v = stored(uri, b)
    j, (_lo, _hi, _h, at, size) = next((j, x) for j, x in enumerate(blocks_of(v)) if x[0] == spans["price"][0])
    spot = at + size - 3  # (an index of the last records)
    put(uri, b, v[:spot] + bytes([v[spot] ^ 1]) + v[spot + 1 :])
    where = re.escape(f"shard {b.shard} batch {b.seq}")
    with loader.open(uri) as ds:
        with pytest.raises(CorruptBatchError, match=rf"{where} .*block {j} of the records: checksum mismatch") as e:
            ds.scan(columns=["price"]).read_all()
        assert "\n" not in str(e.value)
        assert ds.scan(columns=["sym"]).read_all().column("sym").to_pylist() == [
            s.ljust(8, b"\0") for s in expected["sym"].tolist()
        ]
    p = run_cli("verify", uri)
    assert p.returncode == 1 and f"shard {b.shard} batch {b.seq}" in p.stdout + p.stderr
