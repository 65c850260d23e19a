"""`verify` on an executor other than the local process (Dask): one task per shard.

The coordinator opens the dataset (a pinned snapshot: the data it names stays on disk
while the tasks read it) and hands each shard's task its slice of that snapshot's
manifest - the shard's batches, the arrays. `check_shard` (on a worker) opens the
dataset unpinned, reads through the given manifest, not the one on disk now, and runs
the same checks as a local verify on it: every batch of the shard (read/dataset.py) and
the shard's part of each array (arrays/verify.py's `array_parts`: its pieces, and the
order-independent sums of its cells and flat records). The coordinator puts the batch
problems back in manifest order and combines the array parts in shard order, so the
report is exactly the one a local verify gives. A dataset that moved on while it was
checked (replaced, or data collected) is verified again as it is now, as locally.

Reads only; a task that dies is rerun by the executor (it has nothing to resume).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..arrays.verify import array_parts, combine_arrays
from ..errors import BulkloadError, DatasetReplacedError, StoreError, WorkerError
from ..infra import executors
from ..model import manifest as mf
from ..read.dataset import VERIFY_ATTEMPTS, VerifyReport
from ..read.dataset import open as open_dataset


@dataclass(frozen=True)
class ShardCheck:
    uri: str
    shard: int
    manifest: mf.Manifest  # the coordinator's snapshot: this shard's batches, every array


def verify_on_executor(dataset: str) -> VerifyReport:
    """`verify` with one task per shard on the executor in effect (see the module docstring)."""
    moved: BaseException | None = None
    for _ in range(VERIFY_ATTEMPTS):
        with open_dataset(dataset) as ds:
            try:
                report = _verify_snapshot(ds)
                moved = None if report.ok else ds.moved_on()
            except DatasetReplacedError as e:
                moved = e
            if moved is None:
                return report
    raise moved


def check_shard(task: ShardCheck, outbox) -> tuple[list[dict], dict]:
    """(problems of the shard's batches, in manifest order; its parts of the arrays)."""
    with open_dataset(task.uri, pin=False) as ds:
        ds.manifest = replace(task.manifest, arrays={})  # the coordinator's snapshot, arrays apart
        batches = ds._verify_snapshot().problems
        ds.manifest = task.manifest
        return batches, array_parts(ds, [task.shard])


def _verify_snapshot(ds) -> VerifyReport:
    m = ds.manifest
    slim = replace(m, runs=[], files={}, garbage=[])
    tasks = [ShardCheck(ds.uri, s, replace(slim, batches=[b for b in m.batches if b.shard == s]))
             for s in range(m.shards)]
    try:
        results = executors.run(check_shard, tasks)
    except WorkerError as e:
        raise e.raised(BulkloadError) or e from None  # the worker's own error, as a local verify raises it
    position = {b.seq: i for i, b in enumerate(m.batches)}
    first_of_shard = {b.shard: i for i, b in reversed(list(enumerate(m.batches)))}
    problems = sorted((p for batches, _ in results for p in batches),
                      key=lambda p: first_of_shard[p["shard"]] if p["batch"] is None else position[p["batch"]])
    if m.arrays:
        try:
            problems.extend(combine_arrays(m, [parts for _, parts in results]))
        except StoreError as e:
            problems.append({"shard": None, "batch": None, "first_record": None, "problem": f"arrays: {e}"})
    return VerifyReport(ds.uri, not problems, len(m.batches), m.records, problems)
