"""`Dataset.scan` (issue 31): a streaming pyarrow.RecordBatchReader with projection
(``columns``), record ranges (only the batches they cover are read), boxes of finalized
arrays, documents by id; checksums checked on every batch read whole; `to_arrow`,
`to_pandas` and `read_records` give the same records."""

import re

import numpy as np
import pyarrow as pa
import pytest

import loader
from loader.errors import CorruptBatchError, EnvironmentVariableError, UsageError
from loader.model.arrow_records import records_to_arrow
from loader.read.scan import READAHEAD, scan_threads
from tests.read.test_verify_single_pass import damage

N = 5000
KW = dict(shards=2, workers=1, batch_records=700, progress="none")


@pytest.fixture(
    scope="module",
    params=[("capnp", "lz4"), ("capnp", "none"), ("capnp", "zstd"), ("arrow", "none"), ("arrow", "zstd")],
    ids=lambda p: "-".join(p),
)
def uri(request, tmp_path_factory):
    fmt, comp = request.param
    u = f"lmdb://{tmp_path_factory.mktemp('scan')}/ds"
    loader.load(f"gen://scidb96?n={N}", u, format=fmt, compression=comp, **KW)
    return u


def scidb96(tmp_path_factory, name: str, n: int, batch_records: int) -> str:
    """A 2-shard LMDB dataset of ``n`` generated scidb96 records (a module fixture's)."""
    u = f"lmdb://{tmp_path_factory.mktemp(name)}/ds"
    loader.load(f"gen://scidb96?n={n}", u, shards=2, workers=1, batch_records=batch_records, progress="none")
    return u


def counted(ds):
    """Count the stored batch values ``ds`` reads (its one value fetch, Dataset._value)."""
    reads = []
    fetch = ds._value

    def value(b, *rd):
        reads.append(b.seq)
        return fetch(b, *rd)

    ds._value = value
    return reads


def test_scan_projects_the_columns_asked_for_equal_to_read_records(uri):
    with loader.open(uri) as ds:
        want = ds.read_records()
        rd = ds.scan(columns=["i1", "d7"])
        assert isinstance(rd, pa.RecordBatchReader) and rd.schema.names == ["i1", "d7"]
        t = rd.read_all()
        for c in ("i1", "d7"):
            assert np.array_equal(t.column(c).to_numpy(), want[c])
        full = ds.to_arrow()
        assert full.schema == ds.layout.arrow_schema
        for c in ds.layout.names:
            assert np.array_equal(full.column(c).to_numpy(), want[c])
        assert ds.scan(columns="d0,i3").read_all().column_names == ["d0", "i3"]


@pytest.mark.parametrize("a, b", [(0, N), (1234, 1236), (700, 1400), (699, 1401), (3000, None), (N, N)])
def test_a_record_range_reads_only_the_batches_it_covers(uri, a, b):
    with loader.open(uri) as ds:
        want = ds.read_records()
        reads = counted(ds)
        t = ds.scan(columns=["i0", "d2"], records=(a, b)).read_all()
        stop = N if b is None else b
        assert t.num_rows == stop - a
        assert np.array_equal(t.column("i0").to_numpy(), want["i0"][a:stop])
        assert np.array_equal(t.column("d2").to_numpy(), want["d2"][a:stop])
        covering = [e.seq for e in ds.manifest.batches if e.first < stop and e.first + e.count > a]
        assert sorted(reads) == sorted(covering)
        assert ds.to_arrow(records=f"{a}:{'' if b is None else b}").num_rows == stop - a


def test_scan_streams_a_few_batches_at_a_time(uri):
    with loader.open(uri) as ds:
        reads = counted(ds)
        rd = ds.scan(batch_rows=300)
        first = rd.read_next_batch()
        ahead = scan_threads() * READAHEAD  # the batches in flight: not the dataset's size
        assert first.num_rows == 300 and len(reads) <= ahead < len(ds.manifest.batches)
        rows = first.num_rows + sum(b.num_rows for b in rd)
        assert rows == N and len(reads) == len(ds.manifest.batches)


def test_threaded_scan_gives_the_same_batches_in_order(uri, monkeypatch):
    with loader.open(uri) as ds:
        monkeypatch.setenv("BULKLOAD_SCAN_THREADS", "1")
        one = ds.to_arrow(records=(100, 4900))
        assert one.equals(records_to_arrow(ds.read_records(100, 4900), ds.layout))
        monkeypatch.setenv("BULKLOAD_SCAN_THREADS", "3")
        assert ds.to_arrow(records=(100, 4900)).equals(one)
        monkeypatch.setenv("BULKLOAD_SCAN_THREADS", "-2")
        with pytest.raises(EnvironmentVariableError, match="BULKLOAD_SCAN_THREADS='-2' is not a whole number"):
            ds.to_arrow()


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("span", [None, (0, N), (100, 4900), (699, 1401), (1234, 1236), (N, N)])
def test_to_arrow_of_cap_n_proto_values_is_one_chunk_per_column_equal_to_the_scan(uri, span, threads, monkeypatch):
    """to_arrow knows its size: each column is allocated once and every batch is decoded
    into its slice (one chunk per column), with the scan's records, batch for batch."""
    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", threads)
    with loader.open(uri) as ds:
        for cols in (None, ["i1", "d7"]):
            t = ds.to_arrow(cols, span)
            assert t.equals(ds.scan(cols, span).read_all())
            a, b = span or (0, N)
            assert t.num_rows == b - a
            if ds.manifest.format == "capnp" and t.num_rows:
                assert {c.num_chunks for c in t.columns} == {1}


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_damaged_batch_fails_to_arrow_naming_shard_and_batch(tmp_path, threads, monkeypatch):
    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", threads)
    u = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N}", u, compression="lz4", **KW)
    b = damage(u, lambda bs: bs[3], "flipped")
    with loader.open(u) as ds:
        with pytest.raises(CorruptBatchError) as e:
            ds.to_arrow()
        assert f"shard {b.shard} batch {b.seq} (first record {b.first})" in str(e.value)
        assert "checksum mismatch" in str(e.value)
        assert ds.to_arrow(records=(0, b.first)).num_rows == b.first  # the batches before it read
    with pytest.raises(UsageError, match="closed"):
        ds.to_arrow()


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_a_scan_decodes_values_in_place_through_short_read_transactions(uri, threads, monkeypatch):
    """Each shard's values come through one read transaction for LEASE_VALUES values (Cap'n
    Proto values are decoded where they lie, not copied out first); a transaction ends once
    the batches decoded from it are done, and every one has ended when the scan has."""
    import loader.read.scan as scan_mod
    from loader.stores.values import ValueReader

    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", threads)
    monkeypatch.setattr(scan_mod, "LEASE_VALUES", 2)
    opened, closed = [], []
    enter, leave = ValueReader.__enter__, ValueReader.__exit__
    monkeypatch.setattr(ValueReader, "__enter__", lambda rd: opened.append(rd) or enter(rd))
    monkeypatch.setattr(ValueReader, "__exit__", lambda rd, *e: closed.append(rd) or leave(rd, *e))
    with loader.open(uri) as ds:
        want = ds.read_records()
        opened.clear(), closed.clear()
        t = ds.scan(columns=["i1", "d7"]).read_all()
        per_shard = [sum(b.shard == s for b in ds.manifest.batches) for s in range(2)]
        assert len(opened) == sum(-(-k // 2) for k in per_shard) < len(ds.manifest.batches)
        assert len(closed) == len(opened)
        assert np.array_equal(t.column("i1").to_numpy(), want["i1"])
        assert np.array_equal(t.column("d7").to_numpy(), want["d7"])


def test_to_pandas_and_read_records_agree_with_scan(uri):
    with loader.open(uri) as ds:
        df = ds.to_pandas(columns=["i2"], records=(10, 20))
        assert list(df["i2"]) == list(ds.read_records(10, 20)["i2"])


def test_bad_scan_arguments_are_usage_errors(uri):
    with loader.open(uri) as ds:
        with pytest.raises(UsageError, match="column 'x9' is not a field of layout 'scidb96'"):
            ds.scan(columns=["d0", "x9"])
        with pytest.raises(UsageError, match="goes past the end"):
            ds.scan(records=(0, N + 1))
        with pytest.raises(UsageError, match="not a record range"):
            ds.scan(records="5")
        with pytest.raises(UsageError, match="batch_rows must be a positive integer"):
            ds.scan(batch_rows=0)
        with pytest.raises(UsageError, match="scan a record range with scan"):
            ds.scan(0, 10)


def test_columns_that_name_no_fields_are_usage_errors_not_tracebacks(tmp_path):
    u = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N}", u, **KW)
    loader.finalize(u, dims="i0:4,i1:500", workers=1, progress="none")
    with loader.open(u) as ds:
        with pytest.raises(UsageError, match="columns=True names no fields"):
            ds.scan(columns=True)
        with pytest.raises(UsageError, match=re.escape("columns=7.5 names no fields")):
            ds.scan(box="i0=1:3,i1=0:900", columns=7.5)


def test_a_damaged_batch_fails_the_scan_naming_shard_and_batch(tmp_path):
    u = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N}", u, **KW)
    b = damage(u, lambda bs: bs[3], "flipped")
    with loader.open(u) as ds:
        with pytest.raises(CorruptBatchError) as e:
            ds.scan(columns=["d0"]).read_all()
        assert f"shard {b.shard} batch {b.seq} (first record {b.first})" in str(e.value)
        assert "checksum mismatch" in str(e.value)
        assert ds.scan(records=(0, b.first)).read_all().num_rows == b.first  # the batches before it read


def test_scan_of_a_box_reads_that_box_of_the_array(tmp_path):
    u = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N}", u, **KW)
    loader.finalize(u, dims="i0:4,i1:500", workers=1, progress="none")
    with loader.open(u) as ds:
        want = ds.read_box("grid", ["d1"], i0=(1, 3), i1=(0, 900))
        got = ds.scan(box="i0=1:3,i1=0:900", array="grid", columns=["i0", "i1", "d1"]).read_all()
        assert got.equals(want.select(["i0", "i1", "d1"]))
        assert ds.scan(box={"i0": (1, 3), "i1": (0, 900)}, columns="d1,i1").read_all().column_names == ["d1", "i1"]


def test_documents_scan_by_id_range_in_both_forms(tmp_path):
    u = f"lmdb://{tmp_path}/docs"
    loader.load("gen://docs?n=300&seed=3", u, workers=1, progress="none")
    with loader.open(u) as ds:
        a = ds.scan(ids=(10, 50)).to_arrow()
        b = ds.scan(10, 50).to_arrow()
        assert a.equals(b) and a.num_rows > 0
        assert a.column("id").to_pylist() == sorted(a.column("id").to_pylist())
        assert min(a.column("id").to_pylist()) >= 10 and max(a.column("id").to_pylist()) < 50
        with pytest.raises(UsageError, match="scan them by id"):
            ds.scan(box="i0=0:1")


def test_a_scan_read_after_its_dataset_closed_is_refused_not_read_unpinned(uri):
    with loader.open(uri) as ds:
        rd = ds.scan(columns=["d0"])
    with pytest.raises(UsageError, match="was closed before its scan was read"):
        rd.read_all()


RSS_SCRIPT = r"""
import resource, sys, loader
import loader.read.scan
loader.read.scan.RESIDENT_BYTES = 4 << 20  # past 4 MB read (of 48 MB), pages are released once used
with loader.open(sys.argv[1]) as ds:
    rd = ds.scan()
    rd.read_next_batch()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = sum(b.num_rows for b in rd)
    print(rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.parametrize("fmt, threads", [("capnp", "1"), ("capnp", "2"), ("arrow", "1")])
def test_a_scan_s_resident_memory_stays_a_few_batches(tmp_path, fmt, threads):
    """Streaming 48 MB of records (uncompressed: the values are as big as the records) grows
    the process's peak resident set by RESIDENT_BYTES and a few batches, not by the store's
    pages it read."""
    import subprocess
    import sys

    u = f"lmdb://{tmp_path}/ds"
    loader.load(
        "gen://scidb96?n=500000",
        u,
        format=fmt,
        compression="none",
        shards=1,
        workers=1,
        batch_records=10000,
        progress="none",
    )
    p = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, u],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(__import__("os").environ, BULKLOAD_SCAN_THREADS=threads),
    )
    assert p.returncode == 0, p.stderr
    rows, grew_kib = map(int, p.stdout.split())
    assert rows == 490000 and grew_kib < 16 * 1024  # 48 MB read; a batch is 0.96 MB


@pytest.mark.parametrize("fmt", ["capnp", "arrow"])
def test_scan_reads_every_backend(store_uri, fmt):
    loader.load("gen://scidb96?n=2500", store_uri, format=fmt, shards=2, workers=1, batch_records=300, progress="none")
    with loader.open(store_uri) as ds:
        want = ds.read_records()
        t = ds.scan(columns=["d5", "i0"], records=(250, 2400)).read_all()
        assert t.column("d5").to_pylist() == want["d5"][250:2400].tolist()
        assert t.column("i0").to_pylist() == want["i0"][250:2400].tolist()


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("read", ["scan", "iter_batches"])
def test_a_repeated_scan_reuses_its_batches_memory_not_faulting_it_in_again(tmp_path, monkeypatch, threads, read):
    """A scan's batches are new memory each; once a scan's batches are freed, the next scan's
    come from the same pages (Arrow's pool), not from fresh pages faulted in one by one
    (numpy's ~1 MB arrays were: half of a 20-batch scan's time)."""
    import resource

    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", threads)
    u = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=100000", u, shards=1, workers=1, batch_records=10000, progress="none")

    def faults() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    with loader.open(u) as ds:
        for _ in range(3):  # the last one counted: the pool then holds the pages of the first
            before = faults()
            rows = ds.scan().read_all().num_rows if read == "scan" else sum(len(r) for _, r in ds.iter_batches())
            got = faults() - before
        assert rows == 100000
        pages = 100000 * 96 // 4096  # of the decoded records: 2,343
        assert got < pages // 4, f"{got} page faults in a scan of {pages} pages of records"


def _scan_threads_while_reading(ds) -> list:
    """The decoding threads alive while a scan of several batches is being read."""
    import threading

    rd = ds.scan()
    rd.read_next_batch()
    alive = [t for t in threading.enumerate() if t.name.startswith("bulkload-scan")]
    rd.read_all()
    return alive


def test_repeated_scans_reuse_the_decoding_threads_not_start_their_own(uri, monkeypatch):
    """Starting and joining a scan's own threads cost each scan 1.2 ms (a third of a
    20-batch scan's time): scans share the process's decoding threads."""
    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", "2")
    with loader.open(uri) as ds:
        first = _scan_threads_while_reading(ds)
        second = _scan_threads_while_reading(ds)
    assert first and second
    assert all(any(t is s for s in first) for t in second), "the second scan started threads of its own"


def test_a_forked_child_scans_with_threads_of_its_own(uri, monkeypatch):
    """The decoding threads are not inherited by a fork (none of them runs there): a child's
    scan starts its own and reads every record."""
    import os

    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", "2")
    with loader.open(uri) as ds:
        assert _scan_threads_while_reading(ds)
        pid = os.fork()
        if pid == 0:  # the child: no pytest machinery; its exit status says what it read
            try:
                ok = ds.scan().read_all().num_rows == N and _scan_threads_while_reading(ds)
            except BaseException:
                ok = False
            os._exit(0 if ok else 1)
        import time

        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's scan hung")
    assert os.waitstatus_to_exitcode(done[1]) == 0


MAPPED_SCRIPT = """
import sys

import loader
import loader.read.scan

loader.read.scan.RESIDENT_BYTES = 1 << 20  # past 1 MB of values read, pages are released once used


def mapped_kib():  # this process's resident pages of the shards' data.mdb
    kib, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
                inside = len(head) >= 6 and head[-1].endswith("data.mdb") and "shard-" in head[-1]
            elif inside and head[0] == "Rss:":
                kib += int(head[1])
    return kib


with loader.open(sys.argv[1]) as ds:
    assert getattr(ds, sys.argv[2])() is not None
    kept = mapped_kib()
    assert ds.scan().read_all().num_rows == 100000
    print(kept, mapped_kib())
"""


@pytest.mark.parametrize("read", ["to_arrow", "read_records"])
def test_a_whole_read_keeps_the_store_pages_it_read_mapped_up_to_its_output_size(tmp_path, read):
    """A read into an output allocated whole (to_arrow, read_records) does not release the
    pages of the values it read past RESIDENT_BYTES while they are fewer than its output's
    bytes: released, the next read faulted every page in again (20-33 % of a repeated full
    read of 20M ticks). A scan still releases them (its memory stays a few batches)."""
    import subprocess
    import sys

    u = f"lmdb://{tmp_path}/ds"
    loader.load(
        "gen://scidb96?n=100000", u, compression="none", shards=1, workers=1, batch_records=5000, progress="none"
    )
    p = subprocess.run([sys.executable, "-c", MAPPED_SCRIPT, u, read], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    kept, after_scan = map(int, p.stdout.split())
    records_kib = 100000 * 96 // 1024  # 9,375: uncompressed, the values are as big as the records
    assert kept > records_kib / 2, f"{kept} KiB of the store kept mapped after {read}"
    assert after_scan < records_kib / 2, f"{after_scan} KiB of the store still mapped after a scan"


def test_a_scan_decodes_its_batches_itself_while_the_shared_threads_are_busy(uri, monkeypatch):
    """The decoding threads are shared by the process's scans: a scan whose batches wait
    behind other work (another scan's, or a slow consumer's) decodes them in its reading
    thread rather than waiting for a thread to come free."""
    import threading
    import time

    from loader.read.scan import decoding_pool

    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", "2")
    release = threading.Event()
    busy = [decoding_pool(2).submit(release.wait, 20) for _ in range(2)]  # both threads taken
    try:
        with loader.open(uri) as ds:
            t = time.monotonic()
            got = ds.scan(columns=["i1"]).read_all()
            took = time.monotonic() - t
            assert got.column("i1").to_pylist() == ds.read_records()["i1"].tolist()
    finally:
        release.set()
        for f in busy:
            f.result()
    assert took < 10, f"the scan waited {took:.1f} s for the busy threads"


def test_a_narrow_scan_of_small_batches_is_decoded_in_the_reading_thread(tmp_path, monkeypatch):
    """Handing a batch to a decoding thread and back cost more than decoding one column of it
    (0.11 s against 0.06 s for one column of 20M records): with the default thread count a
    batch that decodes to under THREADED_BATCH_BYTES stays in the reading thread; a wide one,
    or any batch when BULKLOAD_SCAN_THREADS is set, goes to the threads."""
    import threading

    from loader.read import scan as scan_mod

    monkeypatch.delenv("BULKLOAD_SCAN_THREADS", raising=False)
    monkeypatch.setattr(scan_mod, "scan_threads", lambda: 2)  # this machine's cores aside
    u = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=40000", u, shards=1, workers=1, batch_records=10000, progress="none")
    decoded_in: list[str] = []
    whole = scan_mod.ColumnsDecoder.whole

    def recording(self, b, value, out):
        decoded_in.append(threading.current_thread().name)
        return whole(self, b, value, out)

    monkeypatch.setattr(scan_mod.ColumnsDecoder, "whole", recording)
    with loader.open(u) as ds:
        narrow = ds.scan(columns=["d3"]).read_all()  # 80 KB a batch
        assert decoded_in == ["MainThread"] * 4
        todo = ds.batches_covering(0, ds.records)
        wide = scan_mod.ColumnsDecoder(ds, list(ds.layout.names))  # 960 KB a batch
        assert scan_mod.threaded(wide, todo, 2)
        assert not scan_mod.threaded(scan_mod.ColumnsDecoder(ds, ["d3"]), todo, 2)
        assert not scan_mod.threaded(wide, todo[:1], 2) and not scan_mod.threaded(wide, todo, 1)
        monkeypatch.setenv("BULKLOAD_SCAN_THREADS", "2")
        assert scan_mod.threaded(scan_mod.ColumnsDecoder(ds, ["d3"]), todo, 2)
        assert narrow.column("d3").to_numpy().tolist() == ds.read_records(0, 40000)["d3"].tolist()


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize(
    "span, batch_rows, most",
    [(None, None, 1), ((150, 19_950), None, 3), ((0, 20_000), 1000, 23), ((650, 651), None, 1), ((0, 0), None, 0)],
)
def test_a_narrow_scan_merges_small_stored_batches_into_few_output_batches(
    tmp_path_factory, monkeypatch, threads, span, batch_rows, most
):
    """A consumer pays per batch (DuckDB's GROUP BY over a scan of 200 KB batches took 1.6 x
    as long as over 2 MB ones): stored batches whose columns are under a quarter of
    MERGED_BYTES are decoded into one output batch of up to MERGED_BYTES (at most
    ``batch_rows`` rows); the partial batches at a range's ends stay their own. The records,
    in order, are the same."""
    u = scidb96(tmp_path_factory, "merged", 20_000, 300)  # 67 stored batches
    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", threads)
    with loader.open(u) as ds:
        a, b = span or (0, ds.records)
        batches = list(ds.scan(columns=["d0", "i3"], records=span, batch_rows=batch_rows))
        assert len(batches) == most
        assert all(x.num_rows <= (batch_rows or ds.records) for x in batches)
        got = pa.Table.from_batches(batches, schema=ds.scan(columns=["d0", "i3"]).schema)
        want = ds.read_records(a, b)
        assert got.column("d0").to_numpy().tolist() == want["d0"].tolist()
        assert got.column("i3").to_numpy().tolist() == want["i3"].tolist()
        wide = list(ds.scan(records=span, batch_rows=batch_rows))  # 29 KB a batch: merged as well
        assert pa.Table.from_batches(wide).equals(records_to_arrow(want, ds.layout)) if wide else a == b


def test_merged_batches_of_typed_and_nullable_fields_keep_their_values_and_nulls(tmp_path):
    u = f"lmdb://{tmp_path}/ds"
    loader.load("gen://ticks?n=5000", u, shards=2, workers=1, batch_records=300, progress="none")
    with loader.open(u) as ds:
        batches = list(ds.scan(columns=["ts", "sym", "halted", "venue"]))
        assert len(batches) == 1
        want = ds.to_arrow().select(["ts", "sym", "halted", "venue"])
        assert pa.Table.from_batches(batches).equals(want) and want.column("venue").null_count > 0


def test_a_narrow_scan_counts_only_the_pages_it_maps_toward_its_resident_bound(tmp_path, monkeypatch):
    """Past RESIDENT_BYTES of values mapped, a scan releases each value's pages once used
    (so a later scan faults them in again). A scan of one column maps only its block and the
    head of each value, so only that share counts: one column of 48 MB of values (~4 MB
    mapped) stays under an 8 MiB bound and releases nothing - and a repeated one-column scan
    of 20M random-valued records ran 0.094 -> 0.058 s; the whole read still releases."""
    from loader.read import scan as scan_mod
    from loader.stores.values import ValueReader

    u = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=500000", u, compression="none", shards=1, workers=1, progress="none")
    monkeypatch.setattr(scan_mod, "RESIDENT_BYTES", 8 << 20)
    monkeypatch.setenv("BULKLOAD_SCAN_THREADS", "1")
    released: list[int] = []
    release = ValueReader.release

    def counted_release(self, value):
        released.append(1)
        return release(self, value)

    monkeypatch.setattr(ValueReader, "release", counted_release)
    with loader.open(u) as ds:
        assert ds.scan(columns=["d3"]).read_all().num_rows == 500000
        assert released == []
        assert ds.scan().read_all().num_rows == 500000
        assert len(released) > 10


@pytest.mark.parametrize(
    "ram, want",
    [(2 << 30, 256 << 20), (8 << 30, 512 << 20), (24 << 30, 1 << 30), (1 << 40, 1 << 30), (None, 256 << 20)],
)
def test_a_scan_keeps_a_sixteenth_of_memory_mapped_within_bounds(monkeypatch, ram, want):
    """The values' pages a scan keeps mapped before it releases each once used: a sixteenth
    of the machine's memory, at least 256 MiB, at most 1 GiB (unknown memory: 256 MiB)."""
    from loader.read import scan as scan_mod

    def sysconf(name):
        if ram is None:
            raise ValueError(name)
        return {"SC_PHYS_PAGES": ram // 4096, "SC_PAGE_SIZE": 4096}[name]

    monkeypatch.setattr(scan_mod.os, "sysconf", sysconf)
    assert scan_mod._resident_bytes() == want
