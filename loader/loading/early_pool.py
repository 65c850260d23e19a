"""Which runs run in-process, and starting the pool's forkserver before a run is planned.

A run of at most `in_process_limit` bytes of records runs in the coordinator's own process
(execute.py; the limits and the measurements behind them: docs/design/loading.md). Any
other run of the local engine forks its workers from a forkserver whose start-up (a Python
process importing the workers' modules) takes ~0.2 s. execute.prewarm starts it once the
run is planned; `prewarm_early` starts it as the ``load`` command begins, for a run that
will surely need it, so that its start-up overlaps the coordinator's own imports (~0.2 s)
instead of following them (20M records, default options: ~0.15 s of ~0.55 s). This module
imports nothing heavy: the command calls it before the loading modules are imported.
"""

from __future__ import annotations

import os
from urllib.parse import parse_qs, urlsplit

#: a run with at most this many bytes of records to write runs in-process (module docstring)
IN_PROCESS_BYTES = 256 << 20
IN_PROCESS_COMPRESSED_BYTES = 1 << 30
IN_PROCESS_KEYED_BYTES = 16 << 20


def in_process_limit(compression: str, keyed: bool = False) -> int:
    """Most bytes of records a run of this compression (and kind) runs in-process."""
    if keyed:
        return IN_PROCESS_KEYED_BYTES
    return IN_PROCESS_BYTES if compression == "none" else IN_PROCESS_COMPRESSED_BYTES


def prewarm_early(
    dataset: object, source: object, workers: int | None, engine: str | None, scheduler: str | None
) -> None:
    """Start the local pool's forkserver in the background when a load of ``source`` (a
    SOURCE string or a list of them) into ``dataset`` will surely use it: the local engine,
    a dataset on disk, no stream, and ``workers`` given or more bytes than any run takes
    in-process (gen:// sources and regular files are sized; with any other source nothing
    starts here). Never raises: the run decides again (execute.prewarm)."""
    sources = [source] if isinstance(source, str) else source if isinstance(source, list) else []
    if scheduler or not isinstance(dataset, str) or dataset.startswith("mem://"):
        return
    if not sources or not all(isinstance(s, str) and s != "-" for s in sources):
        return
    try:  # (in this thread: a small load starts no thread here)
        if not _local_engine(engine):
            return
        big = bool(workers) or sum_bytes(sources) > max(IN_PROCESS_BYTES, IN_PROCESS_COMPRESSED_BYTES)
    except Exception:  # a bad BULKLOAD_ENGINE, unknown sizes, a layout not found: the run decides
        return
    if big:
        from ..infra import pool

        pool.prewarm()  # (a thread of its own starts the forkserver)


def _local_engine(engine: str | None) -> bool:
    """Whether a run goes to the local pool, the engine picked as api/engine.engine_for picks
    it: ``engine`` if given, else a caller's executor (`executors.using`), else
    ``$BULKLOAD_ENGINE`` (a bad value raises)."""
    from ..infra import env, executors

    name, chosen = (engine or "").strip().lower(), executors.current_or_none()
    if not name and chosen is not None:
        return bool(chosen.local)
    return (name or env.engine()) == "local"


def sum_bytes(sources: list[str]) -> int:
    """Bytes of records of ``sources``: gen:// ones by their ``n`` and layout, regular files
    by their size; 0 for any other source (or when a size is not known)."""
    total = 0
    for s in sources:
        if s.startswith("gen://"):
            parts = urlsplit(s)
            n = parse_qs(parts.query).get("n")
            if not n:
                return 0
            from ..model.layouts import get_layout  # (numpy: imported by the run next anyway)

            # (sources.parse_count's forms, not it: importing loader.sources costs ~40 ms, which
            # the forkserver's start would wait for)
            count = n[0].replace("_", "")
            records = int(float(count)) if any(c in count for c in "eE.") else int(count)
            total += records * get_layout(parts.netloc).record_size
        elif "://" in s or not os.path.isfile(s):
            return 0
        else:
            total += os.path.getsize(s)
    return total
