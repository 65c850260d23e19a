"""Small planned batches are produced and encoded in the writing thread, into one buffer per
batch size reused from batch to batch when the stored value is new bytes (loading/worker.py
`_inline`, kinds/fixed.py `FixedWriter.produce`): every batch must still store its own
records, whatever the compression, the pool or in-process, and a last batch of another size."""

import json

import numpy as np
import pytest
from helpers import run_cli

import loader
from loader.sources.generators import generate

N = 2_350  # 23 batches of 100 and one of 50


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
@pytest.mark.parametrize("workers", [None, 2])
def test_small_batches_store_each_batchs_own_records(tmp_path, compression, workers):
    uri = f"lmdb://{tmp_path}/ds"
    args = ["load", f"gen://scidb96?n={N}", uri, "--batch-records", 100, "--shards", 2, "--compression", compression]
    if workers:
        args += ["--workers", workers]
    p = run_cli(*args, "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["batches"] == 24
    with loader.open(uri) as ds:
        got = ds.read_records(0, N)
    want = generate("scidb96", 0, N)
    assert np.array_equal(got.view(np.uint8), np.asarray(want).view(np.uint8))
    assert run_cli("verify", uri).returncode == 0
