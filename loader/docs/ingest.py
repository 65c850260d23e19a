"""`ingest` for documents (layout ``docs``): load the new ``<id>.json`` files of a directory.

    bulkload ingest DATASET --from DIR [--layout docs] [--on-bad-file fail|skip]

Made to run again and again (cron) over a directory where new files keep arriving and old
ones stay. One run, with the dataset locked:

1. lists DIR (as ``bulkload load DIR --layout docs``: every ``<id>.json``, dotfiles
   excluded - write a file under a dotted name and rename it when complete) and stats
   every file;
2. a file whose id is in the *ledger* (below) with the same size and mtime is already
   ingested: it is not read;
3. of the other files, those whose id is stored in the dataset (ingested before and
   touched since, or loaded by ``bulkload load``) are read and compared with the stored
   document (`Dataset.get_many`): equal (created_at and text) -> already ingested;
   different -> a bad file ("already ingested, but its content changed": documents are
   immutable once stored, give the new version a new id), handled per --on-bad-file
   like a bad file of ``load``: ``fail`` loads nothing, ``skip`` reports it;
4. the rest (ids not stored) are loaded by the load machinery (loading.run.load_locked in
   mode ``ingest``: the keyed record kind, plan file, workers, resume, one commit); a
   bad new file is handled there as by ``load`` (fail: nothing is loaded; skip: left out
   and reported). A file the last run skipped is parsed first: still bad, it is
   reported without starting a run.

A run with nothing new writes nothing. A killed run is resumed by the next one (same new
files: same fingerprint), keeping its durable batches: the dataset ends byte-identical.

**The ledger** records what ingest stored, so that a repeated run costs one listing and one
stat per file. Per committing run, ``ROOT/.ingest/<hash>.ledger`` (`write_ledger`): the
ids, sizes and mtimes (ns) of the run's planned files (stat'ed before they were read),
then of the files found equal to their stored documents (their new stat). It is written
and fsynced before the run starts; the manifest commit that stores the run's documents
also adds the file to ``ingest_ledgers`` in the manifest, with the plan positions of
batches that stored fewer documents than planned (files skipped as bad): those are not
ingested. A file no manifest entry names (a failed or superseded run's) is ignored and
deleted by the next committing run; a resumed run reuses its stats (older stats are safe:
a file whose stat differs is only compared again). After ``LEDGER_MERGE`` runs, the
committing run writes one merged ledger instead. The ledger only saves reading: a file
not in it is compared with the store.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ..loading.report import log
from ..model import manifest as mf
from ..model import runs

LEDGER_DIR = ".ingest"
LEDGER_KEY = "ingest_ledgers"  # in the manifest: [{file, run, files, plan, exclude}]
LEDGER_MERGE = 16  # merge the ledgers when a commit would make more than this many
_MAGIC = b"BLDOCLG1"
_COMPARE_CHUNK = 4096  # files read and compared at once

CHANGED_HINT = ("documents are immutable once stored - give the new version a new id (a new <id>.json "
                "file), or restore the stored content")


@dataclass
class DocsIngestReport:
    dataset: str
    directory: str
    run_id: str | None
    status: str  # done | nothing-to-do (bad files raise, as for load)
    layout: str = "docs"
    files: int = 0  # files ingested by this run (one document each)
    records: int = 0  # documents stored by this run (with those kept from an interrupted attempt)
    batches: int = 0
    bytes: int = 0  # bytes of text
    already: int = 0  # files present that were ingested (or loaded) before
    skipped: list[dict] = field(default_factory=list)  # bad files: name, path, reason
    deferred: list[dict] = field(default_factory=list)  # kept for the report's shape: always empty
    resumed_records: int = 0
    seconds: float = 0.0
    mb_per_s: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


# --- the ledger ------------------------------------------------------------------------------

@dataclass
class Ledger:
    """Files ingested before, by id (sorted, unique): size and mtime (ns) when ingested."""

    ids: np.ndarray
    sizes: np.ndarray
    mtimes: np.ndarray

    @classmethod
    def empty(cls) -> "Ledger":
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64))

    @classmethod
    def latest(cls, parts: list["Ledger"]) -> "Ledger":
        """One ledger of ``parts`` (oldest first); for an id in several, the newest entry."""
        if not parts:
            return cls.empty()
        ids = np.concatenate([p.ids for p in parts])[::-1]
        _, first = np.unique(ids, return_index=True)  # sorted ids; first = newest
        idx = len(ids) - 1 - first
        return cls(np.concatenate([p.ids for p in parts])[idx], np.concatenate([p.sizes for p in parts])[idx],
                   np.concatenate([p.mtimes for p in parts])[idx])

    def unchanged(self, ids: np.ndarray, sizes: np.ndarray, mtimes: np.ndarray) -> np.ndarray:
        """Per file: is its id in the ledger with this size and mtime."""
        if not len(self.ids) or not len(ids):
            return np.zeros(len(ids), bool)
        at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        return (self.ids[at] == ids) & (self.sizes[at] == sizes) & (self.mtimes[at] == mtimes)


def write_ledger(path: str, ids, sizes, mtimes, n_plan: int) -> None:
    """Write a ledger file atomically and durably: magic, n, n_plan (u64), ids (u64), sizes,
    mtimes (i64; little-endian, n each), then an xxh3-64 of all that."""
    import xxhash

    from ..infra.fsatomic import fsync_dir

    n = len(ids)
    body = b"".join([_MAGIC, n.to_bytes(8, "little"), int(n_plan).to_bytes(8, "little"),
                     np.asarray(ids, "<u8").tobytes(), np.asarray(sizes, "<i8").tobytes(),
                     np.asarray(mtimes, "<i8").tobytes()])
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(body + xxhash.xxh3_64_intdigest(body).to_bytes(8, "little"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def read_ledger(path: str) -> tuple[Ledger, int] | None:
    """(the ledger in file order, n_plan), or None if the file is missing or damaged."""
    import xxhash

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
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


# --- the run -----------------------------------------------------------------------------------

def ingest_docs(spec, directory: str, *, settings, on_bad_file: str) -> DocsIngestReport:
    """The documents part of `loader.ingest.ingest` (options already resolved)."""
    from ..infra.lock import DatasetLock
    from ..loading import replace as replace_mod
    from ..loading.job import LoadJob
    from ..loading.options import check_compatible, prepare_root
    from ..loading.run import load_locked
    from ..maintain.garbage import start_writing
    from ..sources import SourcePlan
    from ..stores.health import require_shards
    from .sources import JsonDirSource, listing_fingerprint

    progress, t_start = settings.progress, settings.t_start
    src = JsonDirSource(directory, on_bad_file)
    listing, errors = src.listing()  # badly named files: fail raises here, before any write
    report = DocsIngestReport(spec.uri, directory, None, "nothing-to-do")
    skipped = [e.to_dict() for e in errors]

    prepare_root(spec)
    with DatasetLock(spec.root) as lock:
        lock.set_job(f"ingest {directory}")
        m = mf.load_manifest(spec.root) if mf.exists(spec.root) else None
        start_writing(spec, m)
        sib = replace_mod.sibling_spec(spec)
        if os.path.isdir(sib.root):
            log(progress, f"discarding an unfinished --replace of {spec.uri} ({sib.root})")
            replace_mod.discard(sib.root)
        if m is not None:
            check_compatible(m, spec, settings)
        require_shards(spec, m)

        # --- what is new -------------------------------------------------------------
        entries, sizes, mtimes = listing.stat()  # the files still there
        ledger = load_ledger(spec.root, m)
        ids = entries.ids
        known = ledger.unchanged(ids, sizes, mtimes)
        report.already = int(known.sum())
        rest = np.flatnonzero(~known)
        stat_of = _StatOf(ids, sizes, mtimes)
        verified: list[int] = []  # stored ids whose file equals the stored document
        new = entries.take(rest)
        if m is not None and m.batches and new:
            from .access import stored_duplicates

            compare = _Comparer(spec.uri, verified)
            try:
                new, skipped = stored_duplicates(spec, m, src, new, skipped, on_bad_file, compare=compare)
            finally:
                compare.close()
        report.already += len(verified)
        new, skipped = _still_bad(m, directory, new, skipped, on_bad_file)
        report.skipped = [_named(f) for f in skipped]
        if not new:
            report.seconds = round(time.perf_counter() - t_start, 4)
            log(progress, f"ingest {directory}: nothing new ({report.already} already ingested)",
                event="nothing-to-do", already=report.already, skipped=len(report.skipped))
            return report

        # --- load the new files: the load machinery, in mode ingest ------------------------
        fp = listing_fingerprint(new)
        plan_ids = new.ids
        led_name, plan_sizes, plan_mtimes = _plan_ledger(spec.root, m, fp, plan_ids, stat_of)
        v_ids = np.array(sorted(verified), np.uint64)
        v_sizes, v_mtimes = stat_of(v_ids)
        mine = Ledger(np.concatenate([plan_ids, v_ids]), np.concatenate([plan_sizes, v_sizes]),
                      np.concatenate([plan_mtimes, v_mtimes]))
        write_ledger(os.path.join(spec.root, LEDGER_DIR, led_name), mine.ids, mine.sizes, mine.mtimes,
                     len(plan_ids))

        def on_commit(m2: mf.Manifest, unit, run) -> None:
            _commit_ledger(spec.root, m2, unit, run, led_name, (mine, len(plan_ids)), ledger)

        planned = SourcePlan(src, len(new), fp, new, tuple(skipped))
        rep = load_locked(spec, m, LoadJob(settings, planned, mode="ingest", on_commit=on_commit))
    report.run_id = rep.run_id
    report.status = "done"
    report.files = report.records = rep.records
    report.batches, report.bytes, report.resumed_records = rep.batches, rep.bytes, rep.resumed_records
    report.skipped = [_named(f) for f in rep.skipped]
    report.seconds = round(time.perf_counter() - t_start, 4)
    report.mb_per_s = round(report.bytes / report.seconds / 1e6, 2) if report.seconds > 0 else 0.0
    return report


def _named(f: dict) -> dict:
    return {"name": os.path.basename(f["path"]), "path": f["path"], "reason": f["reason"]}


def _still_bad(m: mf.Manifest | None, directory: str, new, skipped: list, on_bad_file: str):
    """The new files the last ingest run (or `load DIR`) of this directory skipped as bad
    are parsed here first: still bad -> skipped (or, fail, BadFileError) before anything is
    written, so that a bad file left in the directory does not make every run commit an
    empty run."""
    last = None
    for r in reversed(runs.current(m)) if m is not None else ():
        if r.kind in ("ingest", "load") and r.source == directory and r.status == "done":
            last = r
            break
    was_bad = {f["path"] for f in last.skipped or []} if last is not None else set()
    if not was_bad:
        return new, skipped
    retry = [e for e in new if e[1] in was_bad]
    if not retry:
        return new, skipped
    from .json_dir import parse_json_files

    _, bad = parse_json_files(retry, on_bad_file)  # fail: raises BadFileError at the first
    if not bad:
        return new, skipped
    gone = {f.path for f in bad}
    return (new.take([j for j, (_i, p) in enumerate(new) if p not in gone]),
            sorted(skipped + [f.to_dict() for f in bad], key=lambda f: f["path"]))


class _StatOf:
    """Sizes and mtimes of the listed files (ids ascending), looked up by id arrays."""

    def __init__(self, ids: np.ndarray, sizes: np.ndarray, mtimes: np.ndarray):
        self.ids, self.sizes, self.mtimes = ids, sizes, mtimes

    def __call__(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos = np.searchsorted(self.ids, np.asarray(ids, np.uint64))
        return self.sizes[pos], self.mtimes[pos]


def _plan_ledger(root: str, m: mf.Manifest | None, fp: str, plan_ids: np.ndarray,
                 stat_of: _StatOf) -> tuple[str, np.ndarray, np.ndarray]:
    """The ledger file name of this plan and its files' stats: those of an earlier attempt
    at the same plan if its file is still there (older stats are safe; a resumed run keeps
    documents read then), else now's. Deletes the files no manifest entry names."""
    import xxhash

    name = f"{xxhash.xxh3_64_hexdigest(fp.encode())}.ledger"
    d = os.path.join(root, LEDGER_DIR)
    os.makedirs(d, exist_ok=True)
    named = {r["file"] for r in (m.extra.get(LEDGER_KEY) or [])} if m is not None else set()
    for other in os.listdir(d):
        if other not in named and other != name:
            try:
                os.unlink(os.path.join(d, other))
            except OSError:
                pass
    if name in named:  # cannot be (a committed plan's ids are stored, not new): never overwrite it
        import uuid

        name = f"{name[:-7]}-{uuid.uuid4().hex[:8]}.ledger"
    got = read_ledger(os.path.join(d, name))
    if got is not None and got[1] == len(plan_ids) and np.array_equal(got[0].ids[:got[1]], plan_ids):
        return name, got[0].sizes[:got[1]].copy(), got[0].mtimes[:got[1]].copy()
    return (name, *stat_of(plan_ids))


def _commit_ledger(root: str, m: mf.Manifest, unit, run, name: str, mine: tuple["Ledger", int],
                   before: Ledger) -> None:
    """Name this run's ledger file (``mine``: written and fsynced before the run) in the
    manifest being committed; plan positions of batches that stored fewer documents than
    planned (bad files skipped) are excluded. Past LEDGER_MERGE files, write one merged
    ledger instead (if that fails, just add ours)."""
    rows = [e for e in m.batches if unit.first_seq <= e.seq < unit.first_seq + unit.nbatches]
    exclude = [[e.first - unit.first_record, e.first - unit.first_record + e.count]
               for e in rows if e.records < e.count]
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
    m.extra[LEDGER_KEY] = refs + [ref]


class _Comparer:
    """``stored_duplicates``' compare: reads the files of stored ids and compares them with
    the stored documents; returns the changed ones as FileErrors, records the equal ones."""

    def __init__(self, uri: str, equal: list[int]):
        self.uri, self.equal, self.ds = uri, equal, None

    def __call__(self, found: list[tuple[int, str]]) -> list:
        from ..read.dataset import Dataset
        from .json_dir import FileError, parse_json_files

        if self.ds is None:
            self.ds = Dataset(self.uri)
        errors = []
        for a in range(0, len(found), _COMPARE_CHUNK):
            chunk = found[a:a + _COMPARE_CHUNK]
            batch, bad = parse_json_files(chunk, "skip")
            errors.extend(FileError(e.path, f"already ingested, but its content changed: {e.reason}; "
                                    + CHANGED_HINT) for e in bad)
            stored, missing = self.ds.get_many(batch.ids.tolist())
            if missing:  # cannot be: the ids were found stored under the same lock
                raise RuntimeError(f"internal error: stored ids {missing[:5]} could not be read back")
            path_of = dict(chunk)
            changed = _differences(batch, stored)
            for j, why in changed:
                errors.append(FileError(path_of[int(batch.ids[j])], f"already ingested, but its content changed "
                                        f"({why}); " + CHANGED_HINT))
            keep = np.ones(len(batch), bool)
            keep[[j for j, _ in changed]] = False
            self.equal.extend(batch.ids[keep].tolist())
        return errors

    def close(self) -> None:
        if self.ds is not None:
            self.ds.close()


def _differences(new, stored) -> list[tuple[int, str]]:
    """(position, what differs) of the documents of two DocBatches (same ids, same order)."""
    created = new.created_at != stored.created_at
    lengths = new.lengths != stored.lengths
    same_len = np.flatnonzero(~lengths)
    text = np.zeros(len(new), bool)
    if len(same_len):  # compare the texts of equal length at once
        a, z = new.take(same_len), stored.take(same_len)
        neq = np.concatenate([[0], np.cumsum(a.text != z.text)])
        text[same_len] = neq[a.offsets[1:]] != neq[a.offsets[:-1]]
    text |= lengths
    out = []
    for j in np.flatnonzero(created | text).tolist():
        what = []
        if created[j]:
            what.append(f"created_at {int(stored.created_at[j])} -> {int(new.created_at[j])}")
        if text[j]:
            what.append(f"text of {int(stored.lengths[j])} -> {int(new.lengths[j])} bytes differs"
                        if lengths[j] else "text differs")
        out.append((j, ", ".join(what)))
    return out
