"""The task a load worker receives: which batches it writes, where and how.

One `LoadTask` per worker; the `Plan` (plan.py) and the `WriteSettings` are the same
objects for every worker of a run. A worker owns the shards ``shard mod W == worker``
(model/placement.py) and writes, per owned shard, the plan's batches from that shard's
resume seq on (``resume``: per shard; below it the batches are durable and kept).

A task is small, frozen and picklable: paths and settings, never an open handle (the
worker opens its own stores). The attributes a record kind's writer reads (kinds/:
``store``, ``nshards``, ``table``, ``keep_tables``, ``clear_from``, ``resume``,
``resume_seq``, ``planned_batches``) are properties of the task.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.placement import owned_shards
from ..stores.spec import StoreSpec
from .job import Checkpoints
from .plan import Plan


@dataclass(frozen=True)
class RunTable:
    """Keyed records (documents): the table a run writes, the tables of committed batches
    (any other is a leftover) and, for a fresh run sharing a table, the first id it clears."""

    name: str = "batches"
    keep: tuple = ()
    clear_from: int = -1  # -1: nothing to clear


@dataclass(frozen=True)
class WriteSettings:
    """How every worker of a run writes."""

    store: StoreSpec
    layout: dict  # Layout.to_dict()
    format: str
    compression: str
    checkpoints: Checkpoints
    table: RunTable = RunTable()
    store_options: tuple = ()  # (name, value) pairs the record kind wants
    shard_bytes_hint: int = 0  # bytes a shard will grow by (LMDB map size)
    must_exist: tuple = ()  # shards holding committed batches: never created afresh (stores/health.py)


@dataclass(frozen=True)
class LoadTask:
    worker: int
    workers: int
    plan: Plan
    write: WriteSettings
    resume: tuple = ()  # per shard: first seq to write (its batches below are kept); () = plan.first_seq
    main_pid: int = 0
    fault: str = ""  # BULKLOAD_FAULT of the job (see infra/faults.py)

    @property
    def store(self) -> StoreSpec:
        return self.write.store

    @property
    def nshards(self) -> int:
        return self.plan.nshards

    @property
    def table(self) -> str:
        return self.write.table.name

    @property
    def keep_tables(self) -> tuple:
        return self.write.table.keep

    @property
    def clear_from(self) -> int:
        return self.write.table.clear_from

    def owned_shards(self) -> list[int]:
        return owned_shards(self.plan.nshards, self.workers, self.worker)

    def resume_seq(self, shard: int) -> int:
        return self.plan.resume_seq(self.resume, shard)

    def planned_batches(self):
        """(seq, first_record, count, source, source_offset) of this worker's batches still
        to write, in seq order (a stream's plan has none: they arrive on the inbox)."""
        return self.plan.batches_of(self.owned_shards(), self.resume)
