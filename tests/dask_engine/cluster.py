"""A real Dask LocalCluster for the tests of this folder (worker processes, one thread each)."""

import contextlib

import loader


@contextlib.contextmanager
def local_cluster(n_workers: int = 2):
    """(client, cluster) of ``n_workers`` worker processes, closed on the way out."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            Client(c) as client:
        yield client, c


def dataset_state(uri: str, arrays: bool = True):
    """What must be byte-identical between two runs: the batch rows (seq, shard, first,
    count, nbytes, checksum), every record, and each array's whole box - after verify."""
    with loader.open(uri) as ds:
        rep = ds.verify()
        assert rep.ok, rep.problems
        rows = [(b.seq, b.shard, b.first, b.count, b.nbytes, b.checksum) for b in ds.manifest.batches]
        boxes = {a: ds.read_box(a) for a in sorted(ds.manifest.arrays)} if arrays else {}
        return rows, ds.read_records().tobytes(), boxes


def same_state(a, b) -> None:
    assert a[0] == b[0]
    assert a[1] == b[1]
    assert sorted(a[2]) == sorted(b[2])
    for name in a[2]:
        assert a[2][name].equals(b[2][name]), name
