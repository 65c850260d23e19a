"""The backend registry (stores/registry.py): which class serves which scheme, backends
loaded only when used, and `open_writer`, which waits a moment for a shard that a stopped
job still holds - on real stores held by real processes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from loader.errors import DatasetBusyError, UnknownSchemeError
from loader.stores.options import LmdbOptions, RocksdbOptions
from loader.stores.registry import SCHEMES, backend_for, open_writer, options_for

from .store_helpers import k, make_spec, reader, writer


def test_each_scheme_has_its_backend_and_its_options():
    for scheme in SCHEMES:
        cls = backend_for(scheme)
        assert cls.scheme == ("lmdb" if scheme == "mem" else scheme)  # mem:// is LMDB on /dev/shm
        assert options_for(scheme) is (RocksdbOptions if scheme == "rocksdb" else LmdbOptions)
    for scheme in ("zarr", "", "LMDB"):
        with pytest.raises(UnknownSchemeError, match="unknown store scheme"):
            backend_for(scheme)
        with pytest.raises(UnknownSchemeError, match="unknown store scheme"):
            options_for(scheme)


IMPORTS = """
import json, sys
import loader
from loader.stores.spec import parse_dataset_uri
parse_dataset_uri("rocksdb://" + sys.argv[1] + "/r?compression=zstd-dict&block_size=16384")
parse_dataset_uri("lmdb://" + sys.argv[1] + "/l?map_size=1g")
seen = {"parse": sorted(m for m in ("lmdb", "rocksdict") if m in sys.modules)}
loader.load("gen://scidb96?n=2000", "lmdb://" + sys.argv[1] + "/l", shards=2, workers=1, progress="none")
with loader.open("lmdb://" + sys.argv[1] + "/l") as ds:
    assert ds.read_records(0, 2000).shape == (2000,)
seen["lmdb load"] = sorted(m for m in ("lmdb", "rocksdict") if m in sys.modules)
print(json.dumps(seen))
"""


def test_backends_are_imported_only_when_a_store_of_theirs_is_opened(tmp_path):
    """Checking URIs imports neither lmdb nor rocksdict; an lmdb load and read never
    imports rocksdict (the coordinating process)."""
    import json

    p = subprocess.run([sys.executable, "-c", IMPORTS, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout) == {"parse": [], "lmdb load": ["lmdb"]}


HOLD = """
import sys, time
from loader.stores.registry import backend_for
st = backend_for(sys.argv[1]).open(sys.argv[2], write=True)
print("ready", flush=True)
time.sleep(float(sys.argv[3]))
st.close()
"""


def _holder(spec, seconds: float) -> subprocess.Popen:
    """A process that holds shard 0's writer for ``seconds`` (once it says ready)."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, spec.scheme, spec.shard_path(0), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "ready"
    return p


@pytest.mark.parametrize("backend", ["lmdb", "rocksdb"])
def test_open_writer_waits_for_a_shard_its_holder_releases(backend, tmp_path):
    spec = make_spec(backend, tmp_path)
    with writer(spec) as w:
        w.put_sorted([(k(1), b"before")])
    holder = _holder(spec, 1.0)
    try:
        t = time.monotonic()
        st = open_writer(spec, 0, dict(spec.options), wait=30)
        waited = time.monotonic() - t
    finally:
        holder.wait(timeout=30)
    with st:
        st.put_sorted([(k(2), b"after")])
        st.sync()
    assert 0.3 < waited < 25, waited
    with reader(spec) as r:
        assert dict(r.range()) == {k(1): b"before", k(2): b"after"}


@pytest.mark.parametrize("backend", ["lmdb", "rocksdb"])
def test_open_writer_gives_up_after_its_wait_with_busy(backend, tmp_path):
    spec = make_spec(backend, tmp_path)
    holder = _holder(spec, 30)
    try:
        t = time.monotonic()
        with pytest.raises(DatasetBusyError, match="being written by another job"):
            open_writer(spec, 0, dict(spec.options), wait=0.5)
        assert 0.5 <= time.monotonic() - t < 10
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with open_writer(spec, 0, dict(spec.options), wait=10) as st:  # a killed holder leaves no lock
        st.put_sorted([(k(1), b"x")])
