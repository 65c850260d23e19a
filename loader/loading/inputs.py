"""Runs of several inputs (``bulkload load a.bin b.bin c.bin DATASET``, a glob): which of
them a run loads, numbered how, committed how.

A run of several inputs that can be read again (files, .npy / Arrow / Parquet files,
``gen://`` ranges: sources/many.py) loads them as one plan - one segment per input, in
the order given, with consecutive batch seqs and record numbers - and commits each input
as soon as all its batches are durable (one commit unit each, commit.py): an input is
in the dataset whole or not at all. The run record lists its inputs (``run.inputs``:
``source``, ``fingerprint``, ``source_offset``, ``total``, ``first_seq``,
``first_record``, ``committed``), and file_runs.py sees each committed one as a finished
run of that source: so a later run of one of them alone, or among others, finds it.

`match_inputs` matches each input against the dataset's runs as a run of it alone
would: a file by extent (file_runs.py: already loaded, grown - its new records -, or
changed - refused, nothing written); any other source by URI and fingerprint (already
loaded, else loaded). The inputs left make the run. It resumes the dataset's last
interrupted run of several inputs when the inputs that run still had to load come first,
unchanged and in the same order, and nothing was committed since (its durable batches
are kept; any further inputs are appended to its plan); otherwise it is a new run (the
interrupted one is superseded).

Pure planning: nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..model import manifest as mf
from ..model import runs
from ..model.runs import LoadRun, Run
from ..sources import SourcePlan
from .file_runs import last_loaded, plan_file_run

#: what identifies an input of a run (its extent and content)
IDENTITY = ("source", "fingerprint", "source_offset", "total")


@dataclass(frozen=True)
class InputsMatch:
    """The inputs a run loads: ``todo`` (``run.inputs`` entries, not yet numbered -
    except those of the run it resumes, ``resume``); the others were loaded by the runs
    ``loaded_by`` (``loaded_records`` records)."""

    todo: list[dict]
    resume: LoadRun | None = None
    loaded_by: list[str] = field(default_factory=list)
    loaded_records: int = 0

    @property
    def total(self) -> int:
        return sum(e["total"] for e in self.todo)


def match_inputs(
    m: mf.Manifest | None,
    planned: SourcePlan,
    layout,
    *,
    new_run: bool,
    considered: Callable[[Run], bool],
    resumable: Callable[[Run], bool],
) -> InputsMatch:
    """Which of ``planned.parts`` a run loads (ChangedInputError: a file changed since
    it was loaded). ``considered(run)``: the runs that describe the dataset (a --replace
    build: its own); ``resumable(run)``: can an interrupted run be taken up again."""
    todo, loaded_by, loaded = [], [], 0
    for part in planned.parts:
        got = _match_one(m, part, layout, new_run, considered)
        if isinstance(got, LoadRun):
            loaded_by.append(got.id)
            loaded += int(got.total or 0)
        else:
            todo.append(got)
    resume = None if new_run or m is None else _interrupted(m, todo, considered, resumable)
    if resume is not None:
        rest = unloaded(resume)
        todo = rest + todo[len(rest) :]  # the resumed run's own entries, with their numbers
    return InputsMatch(todo, resume, loaded_by, loaded)


def _match_one(m, part: SourcePlan, layout, new_run: bool, considered) -> dict | LoadRun:
    """The entry of ``part`` to load, or the run that already loaded it."""
    src = part.source
    if m is None or new_run:
        return entry(src.uri, part.fingerprint, 0, part.total)
    if src.by_extent:
        fplan = plan_file_run(m, src, layout, new_run=False, considered=considered, resumable=lambda r: False)
        if fplan.status == "already-loaded":
            assert fplan.prev is not None  # the finished run that loaded it (file_runs.py)
            return fplan.prev
        return entry(src.uri, fplan.fingerprint, fplan.offset, fplan.count)
    prev = last_loaded(m, src.uri, part.fingerprint, considered)
    if prev is not None and prev.status == "done":
        return prev
    return entry(src.uri, part.fingerprint, 0, part.total)


def entry(source: str, fingerprint: str | None, offset: int, total: int | None) -> dict:
    """An input of a run (``run.inputs``), before it is numbered."""
    return {"source": source, "fingerprint": fingerprint, "source_offset": offset, "total": total}


def _interrupted(m: mf.Manifest, todo: list[dict], considered, resumable) -> LoadRun | None:
    """The dataset's last run of several inputs, if it is interrupted, resumable, the
    dataset ends where its uncommitted inputs begin, and they are the first of ``todo``."""
    last = next((r for r in runs.recent(m) if isinstance(r, LoadRun) and considered(r)), None)
    if last is None or last.inputs is None or not resumable(last):
        return None
    rest = unloaded(last)
    if not rest or (rest[0]["first_seq"], rest[0]["first_record"]) != (m.next_seq, m.next_record):
        return None
    same = len(todo) >= len(rest) and all(_identity(a) == _identity(b) for a, b in zip(rest, todo))
    return last if same else None


def _identity(e: dict) -> tuple:
    return tuple(e[k] for k in IDENTITY)


def unloaded(run: LoadRun) -> list[dict]:
    """The inputs of a run of several that are not committed yet (the run's own entries)."""
    return [e for e in run.inputs or [] if not e.get("committed")]


def number(entries: list[dict], seq: int, first: int, b: int) -> None:
    """Give ``entries`` consecutive batch seqs and record numbers from (seq, first)."""
    for e in entries:
        e.update(first_seq=seq, first_record=first, committed=False)
        seq += -(-e["total"] // b)
        first += e["total"]


def start(run: LoadRun, match: InputsMatch, b: int) -> None:
    """Record the inputs of ``run`` (a new run: numbered from its first seq; the resumed
    one: its own, then any further inputs numbered after them)."""
    mine = unloaded(run) if match.resume is run else []
    more = [dict(e) for e in match.todo[len(mine) :]]
    if mine:
        last = mine[-1]
        number(more, last["first_seq"] + -(-last["total"] // b), last["first_record"] + last["total"], b)
    else:
        number(more, runs.need(run, "first_seq", run.first_seq), runs.need(run, "first_record", run.first_record), b)
    run.inputs = (run.inputs or []) + more
    run.total = sum(e["total"] for e in run.inputs)


def outcome(units_committed: int, units: int, rest: str = "load the rest") -> str:
    """What of a stopped run of several inputs was committed, and what to do (``rest``:
    what re-running does then)."""
    if not units_committed:
        return f"none of its {units} inputs was committed; re-run the same command to resume it"
    return f"{units_committed} of its {units} inputs were committed; re-run the same command to {rest}"
