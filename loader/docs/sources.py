"""The documents' sources: ``gen://docs`` and directories of ``<id>.json`` files.

- ``gen://docs?n=N&seed=S&start=A``: documents A..A+N-1 of the deterministic document
  stream S (id = the record index), generated in the workers by record range (gen.py).
- ``DIR`` (with ``--layout docs``, or into a docs dataset): a directory of ``<id>.json``
  files. The coordinator lists it (sorted by id: `JsonDirSource.plan`) and writes the
  listing as the run's *plan* file in the dataset directory (``ROOT/.plans/RUN.plan``);
  workers read and parse their batches' files (json_dir.py).

Both yield ``read_docs(offset, count) -> (DocBatch, [FileError])``. Registered with the
core's source registry by loader/docs/__init__.py.

Crash behaviour: a plan file is written atomically (a temporary file, fsynced, renamed,
the directory fsynced): a resumed run finds the whole plan or none; it is removed once
the run is committed (`committed`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import xxhash

from ..errors import UsageError
from ..infra.fsatomic import fsync_dir, mkdir_inside
from ..infra.regular import read_regular
from ..infra.uri import query_options
from ..sources.base import DirectorySource, Source, SourcePlan, parse_count
from ..sources.generated import parse_range
from .gen import generate_docs
from .json_dir import DirListing, parse_json_files, scan_json_dir

PLANS_DIR = ".plans"


@dataclass(frozen=True)
class GenDocsSource(Source):
    """``gen://docs?n=N&seed=S&start=A``: documents A..A+N-1 (ids A..A+N-1)."""

    n: int
    start: int = 0
    seed: int = 0
    layout: str = "docs"

    @property
    def uri(self) -> str:
        return f"gen://docs?n={self.n}&start={self.start}&seed={self.seed}"

    @property
    def layout_name(self) -> str:
        return self.layout

    def count(self, layout=None) -> int:
        return self.n

    def fingerprint(self, layout=None) -> str:
        return self.uri

    def id_span(self) -> tuple[int, int] | None:
        """(lowest, highest) id this source yields, or None when empty."""
        return (self.start, self.start + self.n - 1) if self.n else None

    def ids(self) -> np.ndarray:
        return np.arange(self.start, self.start + self.n, dtype=np.uint64)

    def id_at(self, offset: int) -> int:
        return self.start + offset

    def read_docs(self, offset: int, count: int):
        return generate_docs(self.seed, self.start + offset, count), []


@dataclass(frozen=True)
class JsonDirSource(Source):
    """A directory of ``<id>.json`` documents (``bulkload load DIR --layout docs``).

    The coordinator lists the directory once (`listing`); the plan (ids in order, and the
    names of the few files not named ``<id>.json``) is saved in ``plan_path`` (set by the
    coordinator, inside the dataset) so that a worker reads only its batches' entries and
    a resumed run reuses the plan.
    """

    path: str
    on_bad_file: str = "fail"
    plan_path: str = ""

    @property
    def uri(self) -> str:
        return self.path

    def listing(self):
        """(DirListing: (id, path) sorted by id, [FileError] for badly named or duplicate files)."""
        return scan_json_dir(self.path, self.on_bad_file)

    def plan(self, layout=None) -> SourcePlan:
        """List the directory (a badly named file fails here, before any write)."""
        entries, errors = self.listing()
        return SourcePlan(self, len(entries), listing_fingerprint(entries), entries, tuple(e.to_dict() for e in errors))

    def for_run(self, root: str, run_id: str, entries) -> JsonDirSource:
        """This source for run ``run_id``: its listing saved as the run's plan file in the
        dataset (a resumed run reuses it; `remove_plan` once the run is committed)."""
        src = replace(self, plan_path=os.path.join(root, PLANS_DIR, f"{run_id}.plan"))
        if entries is not None:
            save_plan(src.plan_path, entries)
        return src

    def committed(self) -> None:
        """The run is committed: its plan file is not needed any more."""
        try:
            os.unlink(self.plan_path)
        except OSError:
            pass

    def id_at(self, offset: int) -> int:
        return int(_load_plan(self.plan_path)[0][offset])

    def read_docs(self, offset: int, count: int):
        """The documents of plan entries offset..offset+count: the ids go straight to the C
        reader (`DirListing` slice), no path string is made per file."""
        ids, odd_pos, odd_names = _load_plan(self.plan_path)
        a, z = np.searchsorted(odd_pos, np.array([offset, offset + count], np.uint64)).tolist()
        odd = {int(p) - offset: nm for p, nm in zip(odd_pos[a:z].tolist(), odd_names[a:z])}
        return parse_json_files(DirListing(self.path, ids[offset : offset + count], odd), self.on_bad_file)


def _plan_parts(entries) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Of a directory listing (a DirListing or [(id, path)]): ids (uint64, in order), and
    the positions (uint64) and names of the files not named ``<id>.json``."""
    if isinstance(entries, DirListing):
        pos = sorted(entries.odd)
        return (np.asarray(entries.ids, np.uint64), np.array(pos, np.uint64), [entries.odd[p] for p in pos])
    ids = np.fromiter((i for i, _ in entries), np.uint64, len(entries))
    pos, names = [], []
    for k, (i, p) in enumerate(entries):
        name = os.path.basename(p)
        if name != f"{i}.json":
            pos.append(k)
            names.append(name)
    return ids, np.array(pos, np.uint64), names


def listing_fingerprint(entries) -> str:
    """Of a directory listing [(id, path)]: the count and an xxh3 of the names in id order.

    The names are ``<id>.json`` but for a few (e.g. ``007.json``), so what is hashed is
    the ids (8 bytes each, little-endian), then for each other name its position (8
    bytes) and the name, NUL-terminated: one pass over a buffer, no loop over the files.
    """
    ids, pos, names = _plan_parts(entries)
    h = xxhash.xxh3_64()
    h.update(ids.astype("<u8").tobytes())
    for p, name in zip(pos.tolist(), names):
        h.update(p.to_bytes(8, "little") + os.fsencode(name) + b"\0")
    return f"files={len(ids)};names={h.hexdigest()}"


def save_plan(path: str, entries) -> None:
    """Write a directory plan atomically: n, the n ids (u64 little-endian, in id order),
    m, the positions (u64) of the m files not named ``<id>.json``, their names
    (os.fsencode'd, each NUL-terminated)."""
    mkdir_inside(os.path.dirname(path))
    tmp = f"{path}.tmp-{os.getpid()}"
    ids, pos, names = _plan_parts(entries)
    with open(tmp, "wb") as f:
        f.write(len(ids).to_bytes(8, "little"))
        f.write(ids.astype("<u8").tobytes())
        f.write(len(pos).to_bytes(8, "little"))
        f.write(pos.astype("<u8").tobytes())
        f.write(b"".join(os.fsencode(nm) + b"\0" for nm in names))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


_PLANS: dict[str, tuple] = {}


def _load_plan(path: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(ids, positions of the files not named <id>.json, their names) of a saved plan."""
    got = _PLANS.get(path)
    if got is None:
        data = read_regular(path, None)
        n = int.from_bytes(data[:8], "little")
        ids = np.frombuffer(data, "<u8", n, 8).astype(np.uint64, copy=False)
        at = 8 + 8 * n
        m = int.from_bytes(data[at : at + 8], "little")
        pos = np.frombuffer(data, "<u8", m, at + 8).astype(np.uint64, copy=False)
        names = [os.fsdecode(b) for b in data[at + 8 + 8 * m :].split(b"\0")[:m]]
        got = _PLANS[path] = (ids, pos, names)
    return got


def parse_gen_docs(ref: str, query: str, layout=None) -> GenDocsSource:
    """``gen://docs?n=N&seed=S&start=A``."""
    q = query_options(query, f"source {ref!r}", "parameter")
    unknown = set(q) - {"n", "start", "seed"}
    if unknown:
        raise UsageError(
            f"source {ref!r}: unknown parameter(s) {', '.join(sorted(unknown))}; gen://docs takes n, seed and start"
        )
    n, start = parse_range(ref, q, "gen://docs?n=1000000&seed=1")
    return GenDocsSource(n, start, parse_count(q.get("seed", "0"), "seed", maximum=2**63 - 1))


#: a directory of <id>.json files is the documents' source; streams and files are not
DIRECTORY = DirectorySource(
    factory=lambda path, on_bad_file: JsonDirSource(path, on_bad_file),
    stream_refusal=lambda what: (
        f"layout docs cannot be read from {what}; load gen://docs?n=N or a directory of <id>.json files"
    ),
    file_refusal=lambda ref: (
        f"source {ref} is a file; layout docs loads gen://docs?n=N or a directory of <id>.json files"
    ),
)
