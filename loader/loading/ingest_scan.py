"""`ingest`, step 1 and 2: list the directory and sort its files (files of fixed-size records).

A file is identified by its name (relative to DIR), size and content hash (xxh3-128 of
the whole file); ``manifest.files`` lists every file ingested so far. `list_dir` lists
the names matching the pattern (dotfiles excluded: write a file under a temporary dotted
name and rename it when complete), in name order; `classify` sorts them:

- ingested before and unchanged (size and mtime equal, or else the content hash equal):
  *already* ingested; changed since: a bad file ("refused", `changed`);
- new: hashed - a file whose size or mtime changes meanwhile is still being written and
  is *deferred* to the next run; a file whose size is not a whole number of records,
  that cannot be read, or that vanishes is a *bad* file; the others are *new*.

Reads files, never writes: nothing here changes a dataset.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

from ..errors import (
    ChangedInputError,
    InputError,
    MissingPathError,
    PartialRecordError,
    SourceVanishedError,
    UnreadableInputError,
)
from ..infra import faults
from ..model import manifest as mf
from ..model.runs import PlanFile
from ..sources import hash_file


@dataclass
class Candidate:
    """A file of the directory, as listed (``xxh3``: once hashed)."""

    name: str
    path: str
    size: int
    mtime_ns: int
    xxh3: str | None = None


@dataclass
class Scan:
    """The directory's files, sorted (see the module docstring)."""

    new: list[Candidate] = field(default_factory=list)
    bad: list[tuple[Candidate, InputError]] = field(default_factory=list)
    deferred: list[dict] = field(default_factory=list)  # still being written: name, reason
    already: int = 0


def file_stat(path: str) -> tuple[int, int] | None:
    """(size, mtime in ns) of a file, None if it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def list_dir(directory: str, pattern: str) -> list[Candidate]:
    out = []
    try:
        names = os.listdir(directory)
    except PermissionError:
        raise MissingPathError(f"directory {directory} is not readable (permission denied)") from None
    for name in sorted(names):
        if name.startswith(".") or not fnmatch.fnmatchcase(name, pattern):
            continue
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        st = file_stat(path)
        if st is not None:
            out.append(Candidate(name, path, *st))
    return out


def classify(listing: list[Candidate], m: mf.Manifest | None, planned: set[str], record_size: int) -> Scan:
    """Sort the files of ``listing`` not in ``planned`` (the names a resumed run's plan
    already holds) against the dataset's ingested files."""
    scan = Scan()
    for c in listing:
        if c.name in planned:
            continue
        done = m.files.get(c.name) if m is not None else None
        if done is not None:
            err = changed(c, done)
            if err is None:
                scan.already += 1
            else:
                scan.bad.append((c, err))
            continue
        _sort_new(scan, c, record_size)
    return scan


def _sort_new(scan: Scan, c: Candidate, record_size: int) -> None:
    """Hash a file never ingested and put it where it belongs: new, deferred or bad."""
    try:
        c.xxh3, nread = hash_file(c.path)
    except (SourceVanishedError, UnreadableInputError) as e:
        scan.bad.append((c, e))
        return
    faults.hit("hashed")
    now = file_stat(c.path)
    if now is None:
        scan.bad.append(
            (c, SourceVanishedError(f"{c.path}: the file vanished while being read; nothing from it was committed"))
        )
    elif now != (c.size, c.mtime_ns) or nread != c.size:
        scan.deferred.append(
            {
                "name": c.name,
                "reason": f"still being written (size {c.size} -> "
                f"{now[0]} bytes during this run); left for the next run",
            }
        )
    elif c.size % record_size:
        scan.bad.append(
            (c, PartialRecordError(c.path, c.size - c.size % record_size, record_size, c.size % record_size))
        )
    else:
        scan.new.append(c)


def changed(c: Candidate, done: dict) -> ChangedInputError | None:
    """None if the file is the one ingested before; else the error refusing it."""
    if c.size == done["size"]:
        if c.mtime_ns == done.get("mtime_ns"):
            return None
        try:
            h, _ = hash_file(c.path)
        except InputError:
            return None  # it vanished or became unreadable: it was ingested, nothing to do
        if h == done["xxh3"]:
            return None
        what = "its content changed (same size, other xxh3)"
    else:
        what = f"its size changed ({done['size']} -> {c.size} bytes)"
    return ChangedInputError(
        f"{c.path}: this file was already ingested (run {done.get('run')}) but {what}; an ingested file "
        "must not change - write new data to a new file name, or move this one away"
    )


def listing_for(plan: list[PlanFile], directory: str, committed: set[str], excluded: set[str]) -> list[Candidate]:
    """The plan's files not yet committed, as candidates for a new plan (same identity)."""
    return [
        Candidate(e.name, os.path.join(directory, e.name), e.size, e.mtime_ns, e.xxh3)
        for e in plan
        if e.name not in committed and e.name not in excluded
    ]
