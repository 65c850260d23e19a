"""The arrays stage: redimension a dataset's flat records into 2-D chunked, indexed arrays
(``finalize``), answer box queries on them (``query``) and verify them (``verify``).

The run (finalize.py) plans on the coordinator and works in pool workers: scan.py,
partition.py and build.py (with build_sources.py, build_emit.py) are the worker steps;
spec.py, chunks.py, hashes.py, direct.py and records.py are pure functions they share;
job.py and values.py read the flat batches zero-copy; report.py condenses the result.
It may import maintain (compaction before a build, garbage), model (manifest, chunk
index file, layouts, placement, options), serializers, stores, infra and errors - never
loading (a sibling layer), read, docs, api, cli or bench.
"""
