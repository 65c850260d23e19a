"""Time travel: the dataset as it stood after an earlier commit (``as_of``).

Every commit leaves in the catalog (catalog.py) a ``commits`` row: its header (layout,
arrays, garbage, ...), the batch rows' ``next_seq`` and the number of runs after it. Batch
seqs only grow, and a compaction that replaces rows keeps the rows it removed in
``retired`` with the generation that removed them. So the rows of generation G are the
rows with seq < next_seq(G) that were in the table then: those still in ``batches`` and
the retired ones removed after G.

Their data lives while no garbage collection deleted it: a collection of data that
generation g stopped using (maintain/garbage.py) makes every generation below g
unreadable; the catalog keeps the highest such g (``readable_from``). An ``as_of`` below
it, or older than the catalog (a version-1 dataset has only its current generation, a
``--replace`` starts a new history), is SnapshotExpiredError naming the oldest readable
generation. A reader of generation G pins G (read/snapshots.py), so a collection that
starts after it keeps G's data; the check that G is still readable is made after the pin.

Reading an old generation reads its rows whole (O(n)); the current one stays O(1).
The runs of G are the runs created up to G, in their state now; the files, today's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import SnapshotExpiredError
from . import catalog as cg
from .catalog_rows import BatchRows, RunList

if TYPE_CHECKING:
    from .manifest import Manifest


def _snap(m: Manifest) -> cg.Snap | None:
    """The catalog snapshot of ``m`` (None: a version-1 manifest, which keeps no history)."""
    snap: cg.Snap | None = getattr(m, "_snap", None)
    return snap


def oldest_readable(m: Manifest) -> int:
    """The oldest generation of the catalog-backed manifest ``m`` that can be read."""
    snap = _snap(m)
    if snap is None:  # version 1: no history
        return m.generation
    raw = snap.get("meta", b"readable_from")
    first = next(snap.items("commits"), None)
    return max(_int(cg.decode(raw)) if raw else 0, cg.unkey(first[0]) if first else m.generation)


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError(f"{value!r} is not a generation")
    return value


def _commit(raw: bytes) -> dict[str, Any]:
    """A commit row of the catalog's ``commits`` table (a JSON object)."""
    row = cg.decode(raw)
    if not isinstance(row, dict):
        raise TypeError(f"a commit row is not a JSON object: {row!r}")
    return row


def readable_runs(m: Manifest) -> dict[str, int]:
    """Run id -> the generation of its last commit, for the commits that can still be read
    (`bulkload runs` shows it; a version-1 dataset keeps no history: none)."""
    snap = _snap(m)
    if snap is None:
        return {}
    out = {}
    for k, raw in snap.items("commits", cg.key(oldest_readable(m))):
        run = _commit(raw).get("run")
        if run is not None:
            out[run] = cg.unkey(k)
    return out


def generation_of(m: Manifest, as_of: int | str) -> int:
    """The generation ``as_of`` names: a generation number, or a run id (the last commit
    that run made). A run id is 12 hex digits, which may all be decimal ones: a string that
    is the id of a run in the catalog names that run, any other string of digits a generation."""
    snap = _snap(m)
    if isinstance(as_of, int):
        return as_of
    if as_of.isdigit() and (snap is None or snap.get("run_ids", as_of.encode()) is None):
        return int(as_of)
    if snap is not None:
        for k, raw in snap.items("commits", reverse=True):
            if _commit(raw).get("run") == as_of:
                return cg.unkey(k)
    raise SnapshotExpiredError(
        f"no commit of run {as_of!r} is in the catalog of this dataset (a run id of "
        "`bulkload runs` / `info`, or a generation number)"
    )


def manifest_at(m: Manifest, as_of: int | str, uri: str) -> Manifest:
    """The manifest of generation ``as_of`` of the dataset whose current manifest is ``m``."""
    from .manifest import BatchEntry, Manifest

    gen = generation_of(m, as_of)
    if gen == m.generation:
        return m
    snap = _snap(m)
    if snap is None:  # version 1: no history
        raise SnapshotExpiredError(
            f"generation {gen} of {uri} cannot be read: the dataset keeps no history before "
            f"its catalog; the oldest readable generation is {m.generation}"
        )
    oldest = oldest_readable(m)
    raw = snap.get("commits", cg.key(gen))
    if gen > m.generation or gen < oldest or raw is None:
        raise SnapshotExpiredError(
            f"generation {gen} of {uri} cannot be read: "
            + (
                f"the dataset is at generation {m.generation}"
                if gen > m.generation
                else "its data was garbage-collected (or predates the catalog)"
            )
            + f"; the oldest readable generation is {oldest} (`bulkload info --as-of {oldest}`)"
        )
    row = _commit(raw)
    end = row["next_seq"]
    rows = [BatchEntry(*cg.row_of(snap, v)) for k, v in snap.items("batches") if cg.unkey(k) < end]
    for k, v in snap.items("retired"):
        r = cg.row_of(snap, v)
        if cg.unkey(k) < end and r[-1] > gen:
            rows.append(BatchEntry(*r[:-1]))
    rows.sort(key=lambda b: b.seq)
    old = Manifest.from_header(row["header"])
    old.batches = BatchRows(rows)
    old.runs = RunList(list(m.runs)[: row["runs"]])
    old.files = m.files
    object.__setattr__(old, "_as_of", gen)
    return old
