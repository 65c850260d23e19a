"""Helpers shared by the store tests: keys, values, opening shard 0, child processes.

Child processes are started with ``spawn`` (no handle ever crosses a fork); the functions
they run live here so that the child can import them by name.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import uuid

from loader.infra import pagecache
from loader.stores.registry import backend_for
from loader.stores.spec import StoreSpec, parse_dataset_uri

#: (scheme, URI query) of every backend configuration the suites run: LMDB's non-default
#: write path (a writable map) counts as one
BACKENDS = {
    "lmdb": ("lmdb", ""),
    "lmdb-writemap": ("lmdb", "?writemap=1"),
    "rocksdb": ("rocksdb", ""),
    "mem": ("mem", ""),
}


def make_spec(backend: str, tmp_path) -> StoreSpec:
    scheme, query = BACKENDS[backend]
    if scheme == "mem":
        return parse_dataset_uri(f"mem://test-{uuid.uuid4().hex[:12]}{query}")
    return parse_dataset_uri(f"{scheme}://{tmp_path / 'ds'}{query}")


def k(i: int) -> bytes:
    return i.to_bytes(8, "big")


def v(i: int, tag: bytes = b"v") -> bytes:
    return tag + str(i).encode()


def writer(spec: StoreSpec, **options):
    return spec.backend.open(spec.shard_path(0), write=True, options={**dict(spec.options), **options})


def reader(spec: StoreSpec, **options):
    return spec.backend.open(spec.shard_path(0), write=False, options={**dict(spec.options), **options})


def evict_shard(spec: StoreSpec, shard: int = 0) -> None:
    """Drop shard ``shard``'s data.mdb from the page cache: cold reads."""
    evict(os.path.join(spec.shard_path(shard), "data.mdb"))


def resident_pages(path: str, offset: int = 0, length: int = 0) -> int:
    """How many pages of bytes [offset, offset + length) of ``path`` (0: to its end) are in
    the page cache."""
    return pagecache.cached_pages(path, offset, length)[0]


def evict(path: str, offset: int = 0, length: int = 0) -> None:
    """Drop ``path`` from the page cache and check that bytes [offset, offset + length) left
    it: a test that needs cold pages gets them or fails here, saying so, never further on
    with a wrong figure. Pages mapped by a process stay: keep what the caller has open away
    from the range."""
    if pagecache.evict(path, offset, length) and os.geteuid() == 0:  # the last resort
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
    left = resident_pages(path, offset, length)
    assert left == 0, f"{path}: {left} pages of [{offset}, +{length or 'end'}) stay in the page cache"


def try_open_writer(scheme: str, path: str):
    try:
        store = backend_for(scheme).open(path, write=True)
    except Exception as e:  # report, never raise across the boundary
        return type(e).__name__, str(e)
    store.close()
    return "opened", ""


def read_all(scheme: str, path: str):
    store = backend_for(scheme).open(path, write=False)
    try:
        return [(bytes(a), bytes(b)) for a, b in store.range()]
    finally:
        store.close()


def in_child(fn, *args, timeout=60):
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply_async(fn, args).get(timeout=timeout)
