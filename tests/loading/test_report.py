"""A load's report (loading/report.py): the same fields as `bulkload load --json` always
printed, and figures that agree with the manifest, for every way a run can end."""

from __future__ import annotations

import numpy as np

import loader
from loader.sources.generators import generate

FIELDS = [
    "dataset",
    "source",
    "run_id",
    "records",
    "bytes",
    "stored_bytes",
    "batches",
    "shards",
    "workers",
    "seconds",
    "records_per_s",
    "mb_per_s",
    "format",
    "compression",
    "layout",
    "stages",
    "peak_rss_bytes",
    "status",
    "written_records",
    "resumed_records",
    "map_grows",
    "skipped",
    "in_process",
]
STAGES = ["produce_s", "serialize_s", "write_s", "sync_s"]


def stored(uri):
    with loader.open(uri) as ds:
        return ds.records, ds.manifest.stored_bytes, len(ds.manifest.batches)


def check(rep, uri, *, status, records, batches):
    d = rep.to_dict()
    assert list(d) == FIELDS
    assert (d["dataset"], d["status"], d["records"], d["batches"]) == (uri, status, records, batches)
    assert d["bytes"] == records * 96 and d["written_records"] == records - d["resumed_records"]
    assert d["layout"] == "scidb96" and d["peak_rss_bytes"] > 0
    return d


def test_reports_of_each_ending(store_uri, tmp_path):
    d = check(
        loader.load("gen://scidb96?n=5000", store_uri, shards=2, workers=2, batch_records=1000),
        store_uri,
        status="loaded",
        records=5000,
        batches=5,
    )
    assert list(d["stages"]) == STAGES and (d["shards"], d["workers"]) == (2, 2)
    assert (d["records"], d["stored_bytes"], d["batches"]) == stored(store_uri)
    assert d["source"] == "gen://scidb96?n=5000&start=0" and d["format"] == "capnp"

    d = check(loader.load("gen://scidb96?n=5000", store_uri), store_uri, status="already-loaded", records=0, batches=0)
    assert (d["stages"], d["workers"], d["stored_bytes"]) == ({}, 0, 0)

    path = tmp_path / "f.bin"
    path.write_bytes(generate("scidb96", 0, 300).tobytes())
    check(loader.load(str(path), store_uri), store_uri, status="loaded", records=300, batches=1)
    with open(path, "ab") as f:
        f.write(generate("scidb96", 300, 200).tobytes())
    d = check(loader.load(str(path), store_uri), store_uri, status="appended", records=200, batches=1)
    assert stored(store_uri)[0] == 5500

    d = check(
        loader.load(
            "gen://scidb96?n=700", store_uri, replace=True, format="arrow", compression="zstd", batch_records=100
        ),
        store_uri,
        status="loaded",
        records=700,
        batches=7,
    )
    assert (d["format"], d["compression"]) == ("arrow", "zstd")
    assert (d["records"], d["stored_bytes"], d["batches"]) == stored(store_uri)
    with loader.open(store_uri) as ds:
        assert np.array_equal(ds.read_records(0, 700), generate("scidb96", 0, 700))
