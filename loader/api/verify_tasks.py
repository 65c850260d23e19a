"""`verify` on an executor other than the local process (Dask): one task per shard.

The coordinator opens the dataset (a pinned snapshot: the data it names stays on disk
while the tasks read it) and hands each shard's task its slice of that snapshot's
manifest - the shard's batches, the arrays. `check_shard` (on a worker) reads that
snapshot unpinned (a Dataset of the given manifest, not the one on disk now) and runs
the checks of a local verify on its shard - `Dataset.verify_part` (read/dataset.py):
every batch of the shard, each read once, and the shard's part of each array (its
pieces, and the order-independent sums of its cells and flat records). The coordinator
puts the batch problems back in manifest order and makes the report from the array
parts in shard order (`Dataset.verify_report`), so it is exactly the one a local verify
gives. A dataset that moved on while it was checked (replaced, or data collected) is
verified again as it is now, by `Dataset.verify`'s own retries.

Reads only; a task that dies is rerun by the executor (it has nothing to resume).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import BulkloadError, StoreError, WorkerError
from ..infra import executors
from ..model import manifest as mf
from ..read.dataset import Dataset
from ..read.dataset import open as open_dataset
from ..read.snapshots import manifest_ident
from ..read.verifying import VerifyReport
from ..stores.spec import parse_dataset_uri


@dataclass(frozen=True)
class ShardCheck:
    uri: str
    shard: int
    manifest: mf.Manifest  # the coordinator's snapshot: this shard's batches, every array


def verify_on_executor(dataset: str) -> VerifyReport:
    """`verify` with one task per shard on the executor in effect (see the module docstring)."""
    with open_dataset(dataset) as ds:
        report: VerifyReport = ds.verify(_verify_snapshot)
    return report


def check_shard(task: ShardCheck, outbox: Any) -> tuple[list[dict[str, Any]], dict[str, Any] | StoreError]:
    """(problems of the shard's batches, in manifest order; its parts of the arrays, or the
    StoreError that stopped them) - `Dataset.verify_part`."""
    now = manifest_ident(parse_dataset_uri(task.uri).root)  # the manifest file it is now (moved_on)
    with Dataset(task.uri, pin=False, snapshot=(task.manifest, now, None)) as ds:  # the coordinator's snapshot
        found: tuple[list[dict[str, Any]], dict[str, Any] | StoreError] = ds.verify_part([task.shard])
    return found


def _verify_snapshot(ds: Dataset) -> VerifyReport:
    m = ds.manifest
    slim = replace(m, runs=[], files={}, garbage=[])
    rows: list[list[mf.BatchEntry]] = [[] for _ in range(m.shards)]
    position: dict[int, int] = {}
    first_of_shard: dict[int, int] = {}
    for i, b in enumerate(m.batches):  # one pass over the catalog's rows
        rows[b.shard].append(b)
        position[b.seq] = i
        first_of_shard.setdefault(b.shard, i)
    tasks = [ShardCheck(ds.uri, s, replace(slim, batches=rows[s])) for s in range(m.shards)]
    try:
        results = executors.run(check_shard, tasks)
    except WorkerError as e:
        raise e.raised(BulkloadError) or e from None  # the worker's own error, as a local verify raises it
    problems = sorted(
        (p for batches, _ in results for p in batches),
        key=lambda p: first_of_shard[p["shard"]] if p["batch"] is None else position[p["batch"]],
    )
    return ds.verify_report(problems, [parts for _, parts in results])
