"""Loading: a run from a planned source to one atomic commit (`load`, `ingest`, `--replace`).

The coordinator resolves the options (options.py, job.py), matches the source against the
dataset's runs (run.py, file_runs.py: already loaded / resume / new), plans the batches
(plan.py), runs one worker process per group of shards (execute.py, worker.py, task.py;
a stream is fed through shared memory: feeder.py, stream.py), records their checkpoints
and commits unit by unit (commit.py), then reports (report.py); `--replace` builds a
sibling dataset and swaps it in (replace.py); `ingest` loads the new files of a directory
(ingest.py, ingest_scan.py, ingest_plan.py). What differs between record kinds is asked of
the kind (kinds/). May import: maintain, kinds, sources, serializers, stores, model,
infra, errors - never arrays, read, docs or anything above them.
"""
