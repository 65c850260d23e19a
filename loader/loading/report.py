"""What a load run tells: its report (`LoadReport`) and its log lines (`log`).

A report is built from the run record and what the run wrote (`RunOutput`: the workers'
receipts and the batches kept from an interrupted attempt); ``to_dict()`` is what
``bulkload load --json`` prints. Pure: nothing here writes a dataset.
"""

from __future__ import annotations

import functools
import os
import resource
import time
from dataclasses import asdict, dataclass, field

from ..infra import logs
from ..model.engine_keys import EngineKeys
from ..model.manifest import BatchEntry
from ..model.runs import SourceRun
from ..stores.spec import StoreSpec
from .job import RunSettings
from .messages import LoadReceipt, stage_figures


@dataclass
class LoadReport(EngineKeys):
    dataset: str
    source: str
    run_id: str
    records: int
    bytes: int
    stored_bytes: int
    batches: int
    shards: int
    workers: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    format: str
    compression: str
    layout: str
    stages: dict = field(default_factory=dict)
    peak_rss_bytes: int = 0
    # loaded | resumed (an interrupted run finished) | already-loaded | appended (a file grew
    # since it was loaded: only its new records were, see file_runs.py)
    status: str = "loaded"
    written_records: int = 0  # written by this job (resumed: without the kept batches)
    resumed_records: int = 0  # kept from the interrupted run's durable batches
    map_grows: int = 0  # LMDB map growths during the run
    # documents (layout docs): `records` counts documents and `bytes` their text; bad
    # files left out by --on-bad-file skip, with the reason: [{"path", "reason"}]
    skipped: list = field(default_factory=list)
    in_process: bool = False  # its workers' tasks ran in this process, no worker started (execute.py)

    def to_dict(self) -> dict:
        return asdict(self) | self.engine


@dataclass(frozen=True)
class RunOutput:
    """What a run wrote: its workers' receipts and the batches it kept from an
    interrupted attempt (none of either: a run that had nothing to do)."""

    receipts: tuple[LoadReceipt, ...] = ()
    keep: tuple[BatchEntry, ...] = ()
    nworkers: int = 0

    @functools.cached_property
    def written(self) -> list[BatchEntry]:
        """Every batch the receipts list (made once: 200,000 of them at --batch-records 100)."""
        return [e for rc in self.receipts for e in rc.batches]

    @property
    def skipped(self) -> list[dict]:
        """Files the workers left out (documents, --on-bad-file skip)."""
        return [f for rc in self.receipts for f in rc.skipped]

    @property
    def map_grows(self) -> int:
        return sum(rc.map_grows for rc in self.receipts)

    @property
    def in_process(self) -> bool:
        """Did every receipt come from a task run in this process (no worker started)?"""
        return bool(self.receipts) and all(rc.pid == os.getpid() for rc in self.receipts)

    def peak_rss(self) -> int:
        """The coordinator's peak resident set plus every worker process's."""
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 + sum(
            rc.max_rss for rc in self.receipts if rc.pid != os.getpid()
        )


def records_of(entries) -> int:
    """Records (documents) stored by these batches."""
    return sum(e.count if e.docs is None else e.docs for e in entries)  # (e.records, without its call)


def text_bytes_of(entries) -> int:
    """Bytes of text of these batches (documents; 0 for fixed-size records)."""
    return sum(e.text_bytes or 0 for e in entries)


def make_report(
    spec: StoreSpec,
    settings: RunSettings,
    run: SourceRun,
    output: RunOutput,
    *,
    source: str,
    status: str = "loaded",
    records: int | None = None,
) -> LoadReport:
    """The report of ``run``; ``records``: the run's own figure (a run that had nothing to
    do reports what its earlier attempt committed), else counted from ``output``."""
    seconds = time.perf_counter() - settings.t_start
    written, keep = output.written, output.keep
    nwritten = records_of(written)
    nrec = nwritten + records_of(keep) if records is None else records
    if settings.layout.variable_length:  # bytes of text
        wbytes = text_bytes_of(written)
        nbytes = wbytes + text_bytes_of(keep)
        if records is not None:
            nbytes = run.text_bytes if run.text_bytes is not None else nbytes  # present: never null
    else:
        rs = settings.layout.record_size
        wbytes, nbytes = nwritten * rs, nrec * rs
    return LoadReport(
        dataset=spec.uri,
        source=source,
        run_id=run.id,
        records=nrec,
        bytes=nbytes,
        stored_bytes=sum(e.nbytes for e in written) + sum(e.nbytes for e in keep),
        batches=len(written) + len(keep) if status != "already-loaded" else 0,
        shards=settings.shards,
        workers=output.nworkers,
        seconds=round(seconds, 4),
        records_per_s=round(nwritten / seconds, 1) if seconds > 0 else 0.0,
        mb_per_s=round(wbytes / seconds / 1e6, 2) if seconds > 0 else 0.0,
        format=settings.format,
        compression=settings.compression,
        layout=settings.layout.name,
        stages=stage_figures(output.receipts),
        peak_rss_bytes=output.peak_rss(),
        status=status,
        written_records=nwritten,
        resumed_records=records_of(keep),
        map_grows=output.map_grows,
        in_process=output.in_process,
    )


def log(progress: str, message: str, **fields) -> None:
    """A log line (text or JSON, see infra/logs.py); a quiet job (``progress`` none) logs only
    its warnings and errors."""
    logs.note(progress == "none", message, **fields)
