"""Runs of a file source: which records of the file a `load FILE` run loads.

A file may keep growing (a producer appends records) or be replaced. A load run of a
file records the *extent* it planned - ``source_offset`` (its first record in the file)
and ``total`` (its record count) - and the fingerprint of the file's *prefix* up to that
extent's end (`FileSource.fingerprint(layout, end)`: size plus sampled xxh3; a run of an
earlier version, which fingerprinted the whole file, is a run whose extent ends at the
file's end then). On a re-run of the same path (`plan_file_run`):

- the path's last run is unfinished and the file's prefix up to its planned end still
  has its fingerprint: **resume** it (same extent, durable batches kept);
- its last finished run ended at END and the file's first END records still have that
  run's fingerprint: the file has exactly END records -> **already loaded** (nothing to
  do); more -> **appended**: a new run loads records [END, size) only;
- the prefix differs (the file was rewritten or truncated): refused, ChangedInputError
  (exit 1, nothing written) - ``--new-run`` loads all of it again as new records,
  ``--replace`` starts the dataset over with it.

A run loads exactly the records it planned (workers read [offset, offset + count) only;
an append during the load is left for the next run), and the coordinator recomputes the
prefix fingerprint before it commits (`changed_while_loading`): if the loaded bytes
changed meanwhile, nothing is committed. Pure planning: nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ChangedInputError
from ..model import runs
from ..model.runs import LoadRun, Run


@dataclass(frozen=True)
class FilePlan:
    status: str  # new | resume | appended | already-loaded
    offset: int  # first record of the file the run loads
    count: int  # records it loads
    fingerprint: str  # of the file's first offset + count records
    prev: LoadRun | None  # the run resumed, or the finished run this one continues (or repeats)

    @property
    def end(self) -> int:
        return self.offset + self.count


def extent_end(run: LoadRun) -> int:
    """The record of the file just after the extent a run planned."""
    return int(run.source_offset or 0) + int(run.total or 0)


def plan_file_run(
    m, src, layout, *, new_run: bool, considered: Callable[[Run], bool], resumable: Callable[[Run], bool]
) -> FilePlan:
    """The extent of a `load FILE` run into a dataset with manifest ``m`` (None: new).

    ``considered(run)``: which of the dataset's current runs describe it (a `--replace`
    build looks at its own runs only); ``resumable(run)``: can an unfinished run of this
    file be taken up again (runs.load_resumable). Raises ChangedInputError when the file
    changed since the last run that loaded it."""
    n = src.count(layout)  # whole records (a partial trailing record fails here)
    mine = source_runs(m, src.uri, considered) if m is not None else []
    if new_run or not mine:
        return FilePlan("new", 0, n, src.fingerprint(layout, n), None)
    done = next((r for r in reversed(mine) if r.status == "done"), None)
    last = mine[-1]
    if last is not done and last.status in runs.UNFINISHED and resumable(last):
        end, fp = extent_end(last), last.fingerprint
        if end <= n and fp is not None and src.fingerprint(layout, end) == fp:
            return FilePlan("resume", int(last.source_offset or 0), int(last.total or 0), fp, last)
    if done is None:  # only runs that never committed: the file is new to the dataset
        return FilePlan("new", 0, n, src.fingerprint(layout, n), None)
    end, fp = extent_end(done), done.fingerprint
    if end > n or fp is None or src.fingerprint(layout, end) != fp:
        raise ChangedInputError(changed_message(src.uri, done, end, n, layout.record_size))
    if n == end:
        return FilePlan("already-loaded", end, 0, fp, done)
    return FilePlan("appended", end, n - end, src.fingerprint(layout, n), done)


def source_runs(m, uri: str, considered: Callable[[Run], bool] = lambda r: True) -> list[LoadRun]:
    """The load runs of the dataset's current content that loaded source ``uri``, oldest
    first (and ``considered``): a run of that source alone as it is; each committed input
    of a run of several inputs (``run.inputs``, loading/inputs.py) as a finished run
    of its own (a copy: its id, source, fingerprint and extent)."""
    found: list[LoadRun] = []
    for r in m.runs.of_source(uri):  # the catalog's index: not every run (runs.current)
        if not isinstance(r, LoadRun) or not considered(r):
            continue
        if r.inputs is None:
            if r.source == uri:
                found.append(r)
            continue
        found.extend(
            LoadRun(
                id=r.id,
                kind="load",
                status="done",
                source=uri,
                fingerprint=e["fingerprint"],
                source_offset=e["source_offset"],
                total=e["total"],
                records=e["total"],
            )
            for e in r.inputs
            if e["source"] == uri and e.get("committed")
        )
    return found


def last_loaded(
    m, uri: str, fingerprint: str | None, considered: Callable[[Run], bool] = lambda r: True
) -> LoadRun | None:
    """The last run of the dataset's current content that loaded source ``uri`` with this
    fingerprint, alone or as one of several inputs (None: none, or no fingerprint)."""
    if fingerprint is None:
        return None
    return next((r for r in reversed(source_runs(m, uri, considered)) if r.fingerprint == fingerprint), None)


def changed_message(path: str, done: LoadRun, end: int, n: int, rs: int) -> str:
    what = (
        f"it now holds {n:,} records, fewer than the {end:,} loaded"
        if end > n
        else f"its first {end:,} records ({end * rs:,} bytes) are not the ones loaded"
    )
    return (
        f"{path} changed since run {done.id} loaded it ({what}); nothing was loaded - use --new-run to "
        "load all of it again as new records, or --replace to start the dataset over with it"
    )


def changed_while_loading(src, layout, plan_fp: str, end: int) -> str | None:
    """Why a run's file may not be committed (its loaded prefix changed), or None (the
    caller adds what of its run was committed)."""
    try:
        now = src.fingerprint(layout, end)
    except Exception as e:
        now = f"unreadable ({e})"
    if now == plan_fp:
        return None
    return (
        f"{src.uri} changed while it was being loaded (its first {end:,} records are not the ones the run started with)"
    )
