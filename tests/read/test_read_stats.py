"""`Dataset.read_stats` (stores/read_stats.py): the stored bytes and batch values a reader
fetched - what a scan, a record range, a Polars or DuckDB query really read."""

import loader

N = 6000


def test_read_stats_count_the_stored_bytes_of_every_batch_a_scan_fetched(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(
        f"gen://scidb96?n={N}", uri, shards=2, workers=1, batch_records=500, compression="zstd", progress="none"
    )
    with loader.open(uri) as ds:
        assert (ds.read_stats.bytes, ds.read_stats.batches) == (0, 0)
        ds.scan(columns=["d0"]).read_all()  # one column: still every batch's stored value
        assert ds.read_stats.bytes == ds.manifest.stored_bytes == sum(b.nbytes for b in ds.manifest.batches)
        assert ds.read_stats.batches == len(ds.manifest.batches)
        before = ds.read_stats.copy()
        ds.scan(records=(1100, 2600)).read_all()
        got = ds.read_stats.since(before)
        covering = ds.batches_covering(1100, 2600)
        assert got.batches == len(covering) == 4 and got.bytes == sum(b.nbytes for b in covering)
        assert ds.read_stats.bytes == before.bytes + got.bytes  # the counter only grows


def test_a_part_read_in_random_read_mode_counts_only_the_bytes_it_read(tmp_path):
    u = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N}", u, workers=1, batch_records=3000, compression="none", progress="none")
    with loader.open(u + "?readahead=0") as ds:
        (b,) = ds.batches_covering(1000, 1003)
        assert len(ds.read_records(1000, 1003)) == 3
        spans = ds.serializer.part_spans(1000, 1003, b.nbytes, b.count)  # the header, the 3 records
        assert ds.read_stats.batches == 1 and ds.read_stats.bytes == sum(n for _, n in spans) < 3 * 96 + 100


def test_a_box_scan_counts_the_chunk_pieces_it_read(tmp_path):
    u = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N}", u, shards=1, workers=1, batch_records=1000, progress="none")
    loader.finalize(u, dims="i0:10,i1:1000", progress="none")  # 10 chunks along i1
    with loader.open(u) as ds:
        (a,) = ds.arrays()
        assert ds.scan(box={}).read_all().num_rows == N
        assert (ds.read_stats.bytes, ds.read_stats.batches) == (a["bytes"], a["pieces"])
        before = ds.read_stats.copy()
        assert ds.scan(box="i0=2:5,i1=0:1000").read_all().num_rows == 300
        got = ds.read_stats.since(before)
        assert got.batches == 1 and got.bytes * a["pieces"] == a["bytes"]  # one chunk of ten, equal sizes
    with loader.open(u + "?readahead=0") as ds:  # random-read mode: the piece's header and cells only
        assert ds.scan(box="i0=2:3,i1=12:13").read_all().column("i1").to_pylist() == [12]
        assert ds.read_stats.batches == 1 and 0 < ds.read_stats.bytes < a["bytes"] // a["pieces"] // 10
