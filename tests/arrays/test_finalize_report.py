"""arrays/report.py: finalize's report has the fields (and order) of the JSON that
`bulkload finalize --json` always printed, and agrees with the manifest."""

import json

import pytest
from helpers import run_cli

import loader
from loader.arrays.finalize import finalize
from loader.arrays.report import FinalizeReport

REPORT_KEYS = [
    "dataset",
    "array",
    "run_id",
    "dims",
    "policy",
    "records",
    "bytes",
    "cells",
    "chunks",
    "pieces",
    "dropped",
    "bounds",
    "stored_bytes",
    "strategy",
    "strategy_reason",
    "windows",
    "spill_runs",
    "workers",
    "memory_budget",
    "seconds",
    "mb_per_s",
    "records_per_s",
    "stages",
    "worker_peak_rss_bytes",
    "worker_max_rss_bytes",
    "compact",
    "in_process",
    "status",
]
WORKER_MAX = ["scan_worker_max_s", "partition_worker_max_s", "build_worker_max_s"]
BUILD_STEPS = [f"build_{k}" for k in ("read_s", "sort_s", "encode_s", "write_s", "sync_s", "minflt", "cpu_s")]
PARTITION_STEPS = [f"partition_{k}" for k in ("read_s", "sort_s", "spill_s")]


@pytest.mark.parametrize(
    "strategy,stages",
    [
        ("direct", ["scan_s", "build_s", "index_s", *WORKER_MAX, *BUILD_STEPS]),
        ("spill", ["partition_s", "build_s", "index_s", *WORKER_MAX, *PARTITION_STEPS, *BUILD_STEPS]),
    ],
)
def test_report_fields_and_manifest_agree(tmp_path, strategy, stages):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=3000", uri, shards=3, batch_records=400)
    rep = finalize(uri, dims="i0:5,i1:200", duplicates="last", workers=2, strategy=strategy, compact=False)
    assert isinstance(rep, FinalizeReport)
    d = rep.to_dict()
    assert list(d) == REPORT_KEYS and list(d["stages"]) == stages
    with loader.open(uri) as ds:
        a = ds.manifest.arrays["grid"]
        run = ds.manifest.runs[-1]
    assert (d["cells"], d["chunks"], d["pieces"], d["stored_bytes"], d["bounds"], d["dims"]) == (
        a["cells"],
        a["chunks"],
        a["pieces"],
        a["bytes"],
        a["bounds"],
        a["dims"],
    )
    assert d["records"] == a["built_from_records"] == 3000 and d["bytes"] == 3000 * 96 and d["dropped"] == 0
    assert d["run_id"] == a["run_id"] == run.id and run.status == "done" and run.strategy == strategy
    assert d["strategy"] == strategy and d["compact"] is None and d["memory_budget"] == 512 << 20
    if strategy == "direct":
        assert d["workers"] == {"scan": 2, "partition": 0, "build": 2} and d["windows"] >= 3
        assert d["spill_runs"] == 0
    else:
        assert d["workers"] == {"scan": 0, "partition": 2, "build": 2} and d["windows"] is None
        assert d["spill_runs"] == run.spill_runs == 2 and d["strategy_reason"] == "strategy spill"


def test_cli_json_is_the_report(tmp_path):
    uri = f"rocksdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=500", uri, shards=2, batch_records=100)
    r = run_cli("finalize", uri, "--dims", "i0:10,i1:50", "--json", "--workers", "1")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert list(d) == REPORT_KEYS and d["compact"]["batches_before"] == 5 and d["cells"] == 500
    r = run_cli("finalize", uri, "--dims", "i0:10,i1:50", "--workers", "1", "--force")
    assert r.returncode == 0 and r.stdout.startswith(f"finalized 500 records into array 'grid' of {uri} in ")
    assert r.stdout.rstrip().endswith(
        "500 cells in 10 chunks [i0 chunk 10, i1 chunk 50; i0 0..9, i1 0..499], policy error"
    )
