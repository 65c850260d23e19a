"""`to_dask_dataframe()` / `to_dask_array()` computed on a real LocalCluster (two worker
processes): the tasks are pickled to other processes, open their own read-only handles
and pin the snapshot themselves; the results equal the non-Dask readers on lmdb and
rocksdb, capnp and arrow, and a commit between building and computing still reads the
snapshot the collection was built from. (The threaded scheduler, edges and errors:
tests/read/test_dask_frames.py.)"""

import os

import numpy as np
import pandas as pd
import pytest

import loader

from .cluster import local_cluster


@pytest.fixture(scope="module")
def client():
    with local_cluster(2) as (c, _):
        yield c


def frame(recs):
    return pd.DataFrame(recs, index=pd.Index(np.arange(len(recs)), name="record"))


def dense(recs, attr, fill, shape):
    out = np.full(shape, fill, recs.dtype[attr])
    out[recs["i0"], recs["i1"]] = recs[attr]
    return out


@pytest.mark.parametrize("store, fmt", [("lmdb", "capnp"), ("rocksdb", "arrow")])
def test_collections_computed_on_a_local_cluster_read_the_snapshot_they_were_built_from(tmp_path, client, store, fmt):
    uri = f"{store}://{tmp_path}/ds"
    loader.load("gen://scidb96?n=4000", uri, shards=2, workers=1, batch_records=500, format=fmt)
    loader.finalize(uri, dims="i0:5,i1:1000", workers=1, compact=False)
    with loader.open(uri) as ds:
        recs = ds.read_records()
        df = ds.to_dask_dataframe(partition_bytes=1000 * 96)
        x = ds.to_dask_array("grid", attr="i3", fill=-7, chunks=(5, 2000))
    assert df.npartitions == 4 and x.numblocks == (2, 2)
    loader.load("gen://scidb96?n=600&start=4000", uri)  # commits between build and compute
    loader.compact(uri, target_batch_records=2000, force=True, workers=1)  # the old batches: garbage
    pd.testing.assert_frame_equal(client.compute(df, sync=True), frame(recs), check_index_type=False)
    np.testing.assert_array_equal(client.compute(x, sync=True), dense(recs, "i3", -7, (10, 4000)))
    workers_pids = set(client.run(os.getpid).values())
    assert os.getpid() not in workers_pids and len(workers_pids) == 2  # computed in other processes
