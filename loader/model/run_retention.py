"""Listing run records and choosing which ones a dataset may forget (retention): `select`,
`plan_prune` and the `protected` runs (resume, exactly-once loads, --replace), explained in
docs/design/runs.md. Pure functions; the caller holds the writer lock and saves."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..errors import UsageError
from . import runs as run_rules
from .options import check_count
from .runs import IngestRun, LoadRun, Run, SourceRun
from .vocab import RUN_KINDS, SHOWN_STATUSES, RunKind, ShownStatus

if TYPE_CHECKING:
    from .manifest import Manifest

#: statuses a listing may filter on (as `info` shows them)
STATUSES: tuple[ShownStatus, ...] = SHOWN_STATUSES
KINDS: tuple[RunKind, ...] = RUN_KINDS
#: relative ages: 30d, 12h, 90m, 45s, 2w
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
MAX_KEEP = 10**9


def age_seconds(text: str) -> float | None:
    """``30d`` -> 2592000.0; None if ``text`` is no relative age."""
    m = _AGE.match(str(text))
    return float(m.group(1)) * AGE_UNITS[m.group(2)] if m else None


def instant(value: object, option: str, now: float | None = None) -> float | None:
    """The instant (epoch seconds) that ``value`` names: a relative age before ``now``
    (``30d``, ``12h``, ``90m``), an ISO-8601 instant (``2026-11-01``,
    ``2026-11-01T08:00:00+01:00``; without an offset: UTC), a datetime or epoch seconds.
    None stays None; anything else is a UsageError naming ``option`` and an example."""
    if value is None:
        return None
    now = time.time() if now is None else now
    if isinstance(value, datetime):
        return _epoch(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        age = age_seconds(value)
        if age is not None:
            return now - age
        try:
            return _epoch(datetime.fromisoformat(value.strip()))
        except ValueError:
            pass
    raise UsageError(
        f"{option} must be an age such as 30d, 12h or 90m, or an ISO-8601 instant such as "
        f"2026-11-01T08:00:00Z, not {value!r}"
    )


def _epoch(d: datetime) -> float:
    return (d if d.tzinfo is not None else d.replace(tzinfo=UTC)).timestamp()


def check_choice(option: str, value: str | None, choices: tuple[str, ...]) -> str | None:
    if value is not None and value not in choices:
        raise UsageError(f"{option} must be one of {', '.join(choices)}, not {value!r}")
    return value


def check_keep(option: str, keep: object) -> int | None:
    return check_count(option, keep, 0, MAX_KEEP)


# --- listing -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunFilter:
    """What `bulkload runs` lists (checked: `of`)."""

    status: str | None = None
    kind: str | None = None
    since: float | None = None  # epoch seconds: runs started at or after it
    limit: int | None = None

    @classmethod
    def of(
        cls,
        status: str | None = None,
        kind: str | None = None,
        since: object = None,
        limit: object = None,
        now: float | None = None,
    ) -> RunFilter:
        return cls(
            check_choice("--status", status, STATUSES),
            check_choice("--kind", kind, KINDS),
            instant(since, "--since", now),
            check_count("--limit", limit, 1, MAX_KEEP),
        )

    def select(self, shown: list[Run]) -> list[Run]:
        """The runs (as `as_seen` shows them) that match, newest first, at most ``limit``."""
        out = []
        for r in reversed(shown):
            if (
                (self.status is None or r.status == self.status)
                and (self.kind is None or r.kind == self.kind)
                and (self.since is None or (r.started or 0) >= self.since)
            ):
                out.append(r)
                if self.limit is not None and len(out) >= self.limit:
                    break
        return out


# --- retention ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrunePlan:
    """What a prune keeps and removes (both in creation order); ``protected``: the kept runs
    the policy alone would have removed, id -> why they stay."""

    kept: list[Run]
    removed: list[Run]
    protected: dict[str, str]


def plan_prune(m: Manifest, keep: int | None = None, older_than: float | None = None) -> PrunePlan:
    """Which runs of manifest ``m`` to drop: those outside the ``keep`` newest (None: no
    count limit) and, when ``older_than`` (epoch seconds) is given, that ended (or, never
    ended, started) before it - unless `protected`."""
    all_runs = list(m.runs)
    guard = protected(m)
    first_kept = len(all_runs) - keep if keep is not None else len(all_runs)
    kept: list[Run] = []
    removed: list[Run] = []
    why: dict[str, str] = {}
    for i, r in enumerate(all_runs):
        when = r.ended if r.ended is not None else r.started
        drop = i < first_kept and (older_than is None or when is None or when < older_than)
        if drop and r.id in guard:
            why[r.id] = guard[r.id]
            drop = False
        (removed if drop else kept).append(r)
    return PrunePlan(kept, removed, why)


def protected(m: Manifest) -> dict[str, str]:
    """The runs of ``m`` no prune may drop, id -> why (see the module docstring)."""
    all_runs = list(m.runs)
    why: dict[str, str] = {}
    resumable_at = None
    for i, r in enumerate(all_runs):
        if r.status == "running":
            why.setdefault(r.id, "running: its job may still be going")
        elif r.status in run_rules.UNFINISHED and isinstance(r, SourceRun) and (r.resumable or r.pending):
            why.setdefault(r.id, f"{r.status} and resumable: the same command resumes it")
            resumable_at = i if resumable_at is None else resumable_at
    if resumable_at is not None:
        for r in all_runs[resumable_at + 1 :]:
            if r.kind == "compact" and r.status == "done":
                why.setdefault(r.id, "a compaction after a resumable run: resume checks for it")
    current = run_rules.current(m)
    if len(current) < len(all_runs):
        why.setdefault(current[0].id, "the last --replace: the current content starts with it")
    for rid, reason in _source_runs(current).items():
        why.setdefault(rid, reason)
    return why


def _source_runs(current: list[Run]) -> dict[str, str]:
    """The runs that say which sources the current content already holds: for each key
    (a source; a source with a content fingerprint when it is matched by content), its
    newest run and its newest done run."""
    newest: dict[tuple[str, ...], str] = {}
    newest_done: dict[tuple[str, ...], str] = {}
    for r in current:
        for source, fingerprint, status, by_extent in _loaded(r):
            keys: list[tuple[str, ...]] = [("source", source)]
            if not by_extent and fingerprint is not None:
                keys.append(("content", source, fingerprint))
            for key in keys:
                newest[key] = r.id
                if status == "done":
                    newest_done[key] = r.id
    out: dict[str, str] = {}
    for key, rid in list(newest_done.items()) + list(newest.items()):
        out.setdefault(rid, f"the newest run of source {key[1]}: a re-run of it is recognised by it")
    return out


def _loaded(r: Run) -> list[tuple[str, str | None, str, bool]]:
    """(source, fingerprint, status, matched by extent) of what run ``r`` loaded: a run of
    one source; each committed input of a run of several (a finished run each, as
    loading/file_runs.py's `source_runs` sees them). Ingest runs: their source (the
    directory), for the documents' skipped files."""
    if isinstance(r, IngestRun) and r.source is not None:
        return [(r.source, None, r.status, True)]
    if not isinstance(r, LoadRun):
        return []
    if r.inputs is None:
        return [] if r.source is None else [(r.source, r.fingerprint, r.status, r.has("source_offset"))]
    return [
        (e["source"], e.get("fingerprint"), "done", "://" not in e["source"]) for e in r.inputs if e.get("committed")
    ]
