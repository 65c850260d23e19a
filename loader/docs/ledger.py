"""The ledger of the documents' ingest: which files ingest stored, by id, with their stat.

It lets a repeated ``bulkload ingest`` run cost one listing and one stat per file: a file
whose id is in the ledger with the same size and mtime is already ingested and not read
(ingest.py). Per committing run, ``ROOT/.ingest/<hash>.ledger`` (`write_ledger`): the
ids, sizes and mtimes (ns) of the run's planned files (stat'ed before they were read),
then of the files found equal to their stored documents (their new stat). It is written
and fsynced before the run starts (`write_run_ledger`); the manifest commit that stores
the run's documents also adds the file to ``ingest_ledgers`` in the manifest
(`commit_ledger`), with the plan positions of batches that stored fewer documents than
planned (files skipped as bad): those are not ingested. After ``LEDGER_MERGE`` runs, the
committing run writes one merged ledger instead.

Crash behaviour: a ledger file no manifest entry names (a failed or superseded run's) is
ignored, and deleted by the next committing run; a resumed run reuses its stats (older
stats are safe: a file whose stat differs is only compared again). A damaged file
(checksum) counts as empty. The ledger only saves reading: a file not in it is compared
with the store, so losing it costs time, never correctness.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import numpy as np
import xxhash

from ..infra.fsatomic import fsync_dir, mkdir_inside
from ..infra.regular import read_regular
from ..model import manifest as mf
from ..model.runs import Run

LEDGER_DIR = ".ingest"
LEDGER_KEY = "ingest_ledgers"  # in the manifest: [{file, run, files, plan, exclude}]
LEDGER_MERGE = 16  # merge the ledgers when a commit would make more than this many
_MAGIC = b"BLDOCLG1"


@dataclass
class Ledger:
    """Files ingested before, by id (sorted, unique): size and mtime (ns) when ingested."""

    ids: np.ndarray
    sizes: np.ndarray
    mtimes: np.ndarray

    @classmethod
    def empty(cls) -> Ledger:
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64))

    @classmethod
    def latest(cls, parts: list[Ledger]) -> Ledger:
        """One ledger of ``parts`` (oldest first); for an id in several, the newest entry."""
        if not parts:
            return cls.empty()
        ids = np.concatenate([p.ids for p in parts])[::-1]
        _, first = np.unique(ids, return_index=True)  # sorted ids; first = newest
        idx = len(ids) - 1 - first
        return cls(
            np.concatenate([p.ids for p in parts])[idx],
            np.concatenate([p.sizes for p in parts])[idx],
            np.concatenate([p.mtimes for p in parts])[idx],
        )

    def unchanged(self, ids: np.ndarray, sizes: np.ndarray, mtimes: np.ndarray) -> np.ndarray:
        """Per file: is its id in the ledger with this size and mtime."""
        if not len(self.ids) or not len(ids):
            return np.zeros(len(ids), bool)
        at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        return (self.ids[at] == ids) & (self.sizes[at] == sizes) & (self.mtimes[at] == mtimes)


class StatOf:
    """Sizes and mtimes of the listed files (ids ascending), looked up by id arrays."""

    def __init__(self, ids: np.ndarray, sizes: np.ndarray, mtimes: np.ndarray):
        self.ids, self.sizes, self.mtimes = ids, sizes, mtimes

    def __call__(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos = np.searchsorted(self.ids, np.asarray(ids, np.uint64))
        return self.sizes[pos], self.mtimes[pos]


# --- files -------------------------------------------------------------------------------------


def write_ledger(path: str, ids, sizes, mtimes, n_plan: int) -> None:
    """Write a ledger file atomically and durably: magic, n, n_plan (u64), ids (u64), sizes,
    mtimes (i64; little-endian, n each), then an xxh3-64 of all that."""
    n = len(ids)
    body = b"".join(
        [
            _MAGIC,
            n.to_bytes(8, "little"),
            int(n_plan).to_bytes(8, "little"),
            np.asarray(ids, "<u8").tobytes(),
            np.asarray(sizes, "<i8").tobytes(),
            np.asarray(mtimes, "<i8").tobytes(),
        ]
    )
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(body + xxhash.xxh3_64_intdigest(body).to_bytes(8, "little"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def read_ledger(path: str) -> tuple[Ledger, int] | None:
    """(the ledger in file order, n_plan), or None if the file is missing or damaged."""
    try:
        data = read_regular(path, None)
    except (OSError, ValueError):  # DamagedDatasetError: a FIFO, a device (infra/regular.py)
        return None
    if len(data) < 32 or data[:8] != _MAGIC:
        return None
    n, n_plan = int.from_bytes(data[8:16], "little"), int.from_bytes(data[16:24], "little")
    if len(data) != 24 + 24 * n + 8 or n_plan > n:
        return None
    if xxhash.xxh3_64_intdigest(data[:-8]) != int.from_bytes(data[-8:], "little"):
        return None
    arrays = [np.frombuffer(data, dt, n, 24 + 8 * n * k) for k, dt in enumerate(("<u8", "<i8", "<i8"))]
    return Ledger(arrays[0].astype(np.uint64), arrays[1].astype(np.int64), arrays[2].astype(np.int64)), n_plan


def _effective(ref: dict, got: tuple[Ledger, int]) -> Ledger:
    """A ledger file's entries minus the plan positions its manifest entry excludes."""
    led, _ = got
    keep = np.ones(len(led.ids), bool)
    for a, z in ref.get("exclude") or []:
        keep[a:z] = False
    return Ledger(led.ids[keep], led.sizes[keep], led.mtimes[keep])


def load_ledger(root: str, m: mf.Manifest | None) -> Ledger:
    """What the manifest's ledgers say was ingested (a damaged file counts as empty)."""
    parts = []
    for ref in (m.extra.get(LEDGER_KEY) or []) if m is not None else []:
        got = read_ledger(os.path.join(root, LEDGER_DIR, ref["file"]))
        if got is not None:
            parts.append(_effective(ref, got))
    return Ledger.latest(parts)


# --- a run's ledger ------------------------------------------------------------------------------


def _plan_ledger(
    root: str, m: mf.Manifest | None, fp: str, plan_ids: np.ndarray, stat_of: StatOf
) -> tuple[str, np.ndarray, np.ndarray]:
    """The ledger file name of this plan and its files' stats: those of an earlier attempt
    at the same plan if its file is still there (older stats are safe; a resumed run keeps
    documents read then), else now's. Deletes the files no manifest entry names."""
    name = f"{xxhash.xxh3_64_hexdigest(fp.encode())}.ledger"
    d = os.path.join(root, LEDGER_DIR)
    mkdir_inside(d)
    named = {r["file"] for r in (m.extra.get(LEDGER_KEY) or [])} if m is not None else set()
    for other in os.listdir(d):
        if other not in named and other != name:
            try:
                os.unlink(os.path.join(d, other))
            except OSError:
                pass
    if name in named:  # cannot be (a committed plan's ids are stored, not new): never overwrite it
        name = f"{name[:-7]}-{uuid.uuid4().hex[:8]}.ledger"
    got = read_ledger(os.path.join(d, name))
    if got is not None and got[1] == len(plan_ids) and np.array_equal(got[0].ids[: got[1]], plan_ids):
        return name, got[0].sizes[: got[1]].copy(), got[0].mtimes[: got[1]].copy()
    return (name, *stat_of(plan_ids))


def write_run_ledger(
    root: str, m: mf.Manifest | None, fp: str, plan_ids: np.ndarray, verified: list[int], stat_of: StatOf
) -> tuple[str, Ledger]:
    """Write, before the run starts, the ledger of a run whose plan (fingerprint ``fp``)
    holds ``plan_ids``: their stats, then those of the ``verified`` files (found equal to
    their stored documents). Returns (its file name, the ledger)."""
    name, plan_sizes, plan_mtimes = _plan_ledger(root, m, fp, plan_ids, stat_of)
    v_ids = np.array(sorted(verified), np.uint64)
    v_sizes, v_mtimes = stat_of(v_ids)
    mine = Ledger(
        np.concatenate([plan_ids, v_ids]),
        np.concatenate([plan_sizes, v_sizes]),
        np.concatenate([plan_mtimes, v_mtimes]),
    )
    write_ledger(os.path.join(root, LEDGER_DIR, name), mine.ids, mine.sizes, mine.mtimes, len(plan_ids))
    return name, mine


def commit_ledger(
    root: str, m: mf.Manifest, unit, run: Run, name: str, mine: tuple[Ledger, int], before: Ledger
) -> None:
    """Name this run's ledger file (``mine``: written and fsynced before the run) in the
    manifest being committed; plan positions of batches that stored fewer documents than
    planned (bad files skipped) are excluded. Past LEDGER_MERGE files, write one merged
    ledger instead (if that fails, just add ours)."""
    rows = [e for e in m.batches if unit.first_seq <= e.seq < unit.first_seq + unit.nbatches]
    exclude = [
        [e.first - unit.first_record, e.first - unit.first_record + e.count] for e in rows if e.records < e.count
    ]
    refs = list(m.extra.get(LEDGER_KEY) or [])
    ref = {"file": name, "run": run.id, "files": len(mine[0].ids), "plan": mine[1], "exclude": exclude}
    if len(refs) + 1 > LEDGER_MERGE:
        merged = Ledger.latest([before, _effective(ref, mine)])
        mname = f"merged-{run.id}.ledger"
        try:
            write_ledger(os.path.join(root, LEDGER_DIR, mname), merged.ids, merged.sizes, merged.mtimes, 0)
        except OSError:
            pass
        else:
            refs, ref = [], {"file": mname, "run": run.id, "files": len(merged.ids), "plan": 0, "exclude": []}
    m.extra[LEDGER_KEY] = [*refs, ref]
