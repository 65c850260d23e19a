"""An array's chunk pieces have their own compression (finalize ``compression``), ``none``
by default whatever the flat batches use: the same cells either way, the manifest says
which, and every read path (box queries, verify, info) works on each combination."""

import pytest
from helpers import manifest_json, run_cli

import loader

N = 30_000
BOX = "i0=0:6,i1=1000:4000"


@pytest.mark.parametrize("flat", ["none", "lz4"])
@pytest.mark.parametrize("cells", [None, "lz4", "zstd"])
def test_the_array_keeps_its_own_compression(store_uri, tmp_path, flat, cells):
    loader.load(f"gen://scidb96?n={N}", store_uri, shards=2, batch_records=3000, compression=flat)
    rep = loader.finalize(store_uri, dims="i0:4,i1:5000", compression=cells).to_dict()
    assert rep["cells"] == N
    with loader.open(store_uri) as ds:
        assert ds.manifest.compression == flat
        assert ds.manifest.arrays["grid"]["compression"] == (cells or "none")
        assert ds.verify().ok
    plain = f"lmdb://{tmp_path}/plain"
    loader.load(f"gen://scidb96?n={N}", plain, shards=2, batch_records=3000, compression="none")
    loader.finalize(plain, dims="i0:4,i1:5000")
    assert loader.query(store_uri, BOX).equals(loader.query(plain, BOX))


def test_the_cli_and_pipeline_take_the_arrays_compression(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    assert run_cli("load", f"gen://scidb96?n={N}", uri).returncode == 0
    p = run_cli("finalize", uri, "--dims", "i0:4,i1:5000", "--compression", "zstd", "--json")
    assert p.returncode == 0, p.stderr
    assert manifest_json(tmp_path / "ds")["arrays"]["grid"]["compression"] == "zstd"
    p = run_cli("finalize", uri, "--dims", "i0:4,i1:5000", "--compression", "snappy")
    assert p.returncode == 2 and "snappy" in p.stderr and "Traceback" not in p.stderr, p.stderr
    job = tmp_path / "job.toml"
    job.write_text(
        f'dataset = "lmdb://{tmp_path}/job-ds"\n[load]\nsource = "gen://scidb96?n={N}"\n'
        '[finalize]\ndims = "i0:4,i1:5000"\ncompression = "lz4"\n'
    )
    p = run_cli("run", str(job))
    assert p.returncode == 0, p.stderr
    assert manifest_json(tmp_path / "job-ds")["arrays"]["grid"]["compression"] == "lz4"
