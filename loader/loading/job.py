"""What a load or ingest run is given, as frozen objects that travel whole.

- `Request`: the options as the caller gave them (None: not given), with when the job
  started and its fault points (infra/faults.py);
- `RunSettings`: the same options resolved against the dataset (options.py): layout,
  format, compression, shards, workers, batch size, checkpoint interval, progress mode;
- `Checkpoints`: how often a worker syncs and reports its durable batches (commit.py);
- `LoadJob`: what one load run takes (`run.load_locked`): the settings, the planned
  source, and how the run relates to the dataset (a new run, a --replace build, an
  ingest of documents by the documents plug-in).

Invariants: plain data, nothing here reads or writes a dataset; a `RunSettings` holds
values already checked (counts within bounds, a format the record kind can store).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..kinds import kind_for
from ..model.layouts import Layout
from ..sources import SourcePlan


@dataclass(frozen=True)
class Checkpoints:
    """A worker syncs its shards and reports the batches now durable after ``nbytes``
    bytes written or ``seconds`` seconds, whichever comes first."""

    seconds: float
    nbytes: int


@dataclass(frozen=True)
class Request:
    """A load's or an ingest's options as the caller gave them (None: not given)."""

    format: str | None = None
    compression: str | None = None
    shards: int | None = None
    workers: int | None = None
    batch_records: int | None = None
    progress: str = "none"
    checkpoint_seconds: float | None = None
    checkpoint_bytes: int | None = None
    fault: str = ""  # BULKLOAD_FAULT of the job (infra/faults.py)
    t_start: float = 0.0  # time.perf_counter() when the job started: its report's seconds


@dataclass(frozen=True)
class RunSettings:
    """A run's options, resolved (explicit > URI > existing dataset > defaults, options.py)."""

    layout: Layout
    format: str
    compression: str
    shards: int
    workers: int  # requested: a run uses at most one per shard (`nworkers`)
    batch_records: int
    batch_records_given: bool = False  # by the caller (a resumed run keeps its own size)
    workers_given: bool = False  # by the caller: the run starts that many processes (execute.py)
    progress: str = "none"
    checkpoints: Checkpoints | None = None  # None: the environment's (options.checkpoint_settings)
    fault: str = ""
    t_start: float = 0.0

    @property
    def nworkers(self) -> int:
        """Workers a run starts: one writer per shard at most."""
        return max(1, min(self.workers, self.shards))

    def kind(self):
        """The record kind of these settings (kinds/)."""
        return kind_for(self.layout, self.format, self.compression)

    def run_options(self) -> dict:
        """The options a run records, which a resumed run must have had (runs.options_match)."""
        return dict(format=self.format, compression=self.compression, layout=self.layout.name, shards=self.shards)


@dataclass(frozen=True)
class LoadJob:
    """One load run's input (`run.load_locked`).

    ``mode="ingest"`` (documents, loader/docs/ingest.py): the run is an ``ingest`` run; the
    caller has already left out the ids stored in the dataset (same lock) and passes only
    new ones; a finished run with the same fingerprint does not mean "already loaded".
    ``replace``: the run builds a --replace sibling (replace.py) of the dataset whose id is
    ``replaces`` (None: there was none). ``on_commit(m, unit, run)`` is called when the run
    is committed, just before the manifest write that commits it."""

    settings: RunSettings
    planned: SourcePlan
    new_run: bool = False
    stdin: object = None  # the stream a ``-`` source reads (None: sys.stdin)
    mode: Literal["load", "ingest"] = "load"
    replace: bool = False
    replaces: str | None = None
    on_commit: Callable | None = None

    def __post_init__(self) -> None:
        if self.replace and self.mode != "load":  # the run record of an ingest has no `replace`
            raise ValueError(f"internal error: a --replace build is a load job, not {self.mode}")
