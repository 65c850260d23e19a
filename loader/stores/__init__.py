"""The stores stage: sharded ordered key-value stores behind one interface.

A dataset's records live in K shards, each an LMDB environment (``lmdb://``, and
``mem://`` on /dev/shm) or a RocksDB database (``rocksdb://``), with named tables; this
package opens, writes, reads, checks and compacts them: `base.ShardStore` (the
interface), `spec` (dataset URIs, `StoreSpec`), `options` (what each backend takes),
`registry` (scheme -> backend, imported lazily; `open_writer`), the backends
(`lmdb_*`, `rocksdb_store`), `values` (zero-copy reads) and `health` (shard and batch
checks). It may import `loader.model`, `loader.infra` and `loader.errors` (today it
needs only the last two; health.py reads manifests through protocols), never a stage
above it, nor its siblings `loader.sources` and `loader.serializers`; nothing is
re-exported here.
"""
