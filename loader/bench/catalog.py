"""The ``catalog`` section (issue 29's targets): what a dataset's metadata costs from 1,000 to
1,000,000 batch rows, and the 20M load with 100-record batches beside the default load,
through the public API and the CLI. The method and targets: docs/design/bench.md."""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import time
from pathlib import Path

from .figures import Figure
from .loads import load_once
from .processes import disk_bytes, rm, run_child, run_sampled, tail
from .records import LAYOUT
from .runner import Bench, Row
from .targets import Target

GROUP = "catalog"  # the per-size figures
LOADS = "catalog-load"  # the n-record loads (item 3)
#: the operations measured per size: op (figure id catalog-OP-bN) -> (title, the sample key of its seconds)
OPS = {
    "append": ("append one 1,000-record batch in-process (loader.load)", "append_s"),
    "open": ("loader.open + read_records of 10 records + close", "open_read_s"),
    "commit": ("commit alone: Manifest.save of one appended run", "commit_s"),
    "info": ("bulkload info, wall time of the command", "wall_s"),
    "verify": ("bulkload verify, peak RSS of its process tree", "wall_s"),
}
TARGET_MS = {"append": 50.0, "open": 20.0, "info": 300.0}
FLAT = 1.5  # the issue's flatness band, smallest size to largest
RSS_FLAT = 1.25  # the suite's bound for "memory flat" (targets.rss_targets)
ISSUE_RECORDS = 20_000_000
BEFORE_S_20M = 10.0  # the issue: the 20M load with --batch-records 100 takes ~10 s before
SPEEDUP = 3.0
NOISE = 0.9  # the default load within 10 % of the baseline's


def sizes(batches: tuple[int, ...], max_batches: int | None) -> tuple[int, ...]:
    """The batch counts measured: the suite's up to ``max_batches``, which is the largest;
    at least two when it is 20 or more (a tenth of it first), so that the flatness figures
    compare something."""
    if max_batches is None:
        return tuple(sorted(batches))
    out = sorted({b for b in batches if b < max_batches} | {max_batches})
    if len(out) == 1 and max_batches >= 20:
        out.insert(0, max_batches // 10)
    return tuple(out)


def runs_for(batches: int) -> int:
    """Runs in a dataset of ``batches`` rows: one per 10 (100,000 at 1,000,000)."""
    return max(1, batches // 10)


def section_catalog(b: Bench) -> None:
    """Build the datasets, measure every size round by round, then the n-record loads."""
    p = b.p
    bs = sizes(p.catalog_batches, p.max_batches)
    figs = {
        (op, n): b.fig(
            f"catalog-{op}-b{n}",
            GROUP,
            f"{title}, {n:,} batches",
            n * p.catalog_batch_records,
            kind="memory" if op == "verify" else "latency",
            params={"op": op, "batches": n, "runs": runs_for(n)},
        )
        for n in bs
        for op, (title, _) in OPS.items()
    }
    builds = {
        n: b.fig(
            f"catalog-build-b{n}",
            GROUP,
            f"build: {n:,} batch rows + {runs_for(n):,} runs",
            n * p.catalog_batch_records,
            kind="build",
            params={"op": "build", "batches": n, "runs": runs_for(n)},
        )
        for n in bs
    }
    loads = _load_figures(b)
    if any(f is not None for f in [*figs.values(), *builds.values()]):
        _measure_sizes(b, bs, figs, builds)
    if any(f is not None for f in loads.values()):
        b.interleave([Row(lambda i, k=k: _load(b, k), [(f, "seconds")]) for k, f in loads.items()])


def _measure_sizes(b: Bench, bs: tuple[int, ...], figs: dict, builds: dict) -> None:
    warm = b.dataset("lmdb", "catalog-warm")
    try:
        _cli(b, ["load", f"gen://{LAYOUT}?n=1000", warm, "--batch-records", "10", "--quiet"])
        for args in (["info", warm], ["verify", warm, "--json"]):  # not counted: bytecode, the page cache
            _cli(b, args)
    except Exception as e:  # nothing of the section can be measured
        for f in [*figs.values(), *builds.values()]:
            _fail(f, f"could not make the warm-up dataset: {type(e).__name__}: {e}")
        return
    uris = {}
    for n in bs:
        uri = b.dataset("lmdb", f"catalog-b{n}")
        try:
            _build(b, n, uri, builds[n])
        except Exception as e:  # this size cannot be measured; the others go on
            for f in [builds[n], *(figs[op, n] for op in OPS)]:
                _fail(f, f"could not build the dataset: {type(e).__name__}: {e}")
            continue
        uris[n] = uri
    rows = []
    for n, uri in uris.items():
        rows += [
            Row(
                lambda i, uri=uri, n=n: _ops(b, uri, warm, figs["commit", n]),
                [(figs[op, n], OPS[op][1]) for op in ("append", "open", "commit")],
            ),
            Row(lambda i, uri=uri: _timed_cli(b, ["info", uri]), [(figs["info", n], "wall_s")]),
            Row(lambda i, uri=uri: _timed_cli(b, ["verify", uri, "--json"]), [(figs["verify", n], "wall_s")]),
        ]
    b.interleave(rows)
    for uri in [warm, *uris.values()]:
        rm(b.ds_root(uri))


def _build(b: Bench, n: int, uri: str, f: Figure | None) -> None:
    """The dataset of ``n`` batch rows and ``runs_for(n)`` runs (see the module's docstring)."""
    p = b.p
    t = time.perf_counter()
    rep = json.loads(
        _cli(
            b,
            [
                "load",
                f"gen://{LAYOUT}?n={n * p.catalog_batch_records}",
                uri,
                "--batch-records",
                str(p.catalog_batch_records),
                "--json",
                "--quiet",
            ],
        )
    )
    load_s = time.perf_counter() - t
    if rep["batches"] != n:
        raise RuntimeError(f"the load made {rep['batches']} batches, expected {n}")
    runs = runs_for(n)
    per = p.runs_per_commit or -(-runs // 100)
    res, _ = run_child("catalog_runs", root=str(b.ds_root(uri)), runs=runs, per_commit=per)
    root = b.ds_root(uri)
    sample = {
        "seconds": load_s + res["seconds"],
        "load_s": load_s,
        "load_report_s": rep["seconds"],
        "runs_s": res["seconds"],
        "runs": runs,
        "runs_per_commit": per,
        "commits": res["commits"],
        "batches": n,
        "shards": rep["shards"],
        "metadata_bytes": _metadata_bytes(root),
        "disk_bytes": disk_bytes(root),
    }
    b.log(
        f"catalog: built {n:,} batches + {runs:,} runs in {sample['seconds']:.1f} s "
        f"(metadata {sample['metadata_bytes'] / 1e3:,.1f} kB)"
    )
    if f is not None:
        b.add_sample(f, sample)


def _metadata_bytes(root: Path) -> int:
    """Bytes of the dataset's metadata: its files and directories but the shards and arrays."""
    total = 0
    for e in os.scandir(root):
        if e.name.startswith(("shard-", ".")) or e.name == "arrays":
            continue
        total += disk_bytes(e.path) if e.is_dir(follow_symlinks=False) else e.stat(follow_symlinks=False).st_size
    return total


def _cli(b: Bench, args: list[str]) -> str:
    """Run ``bulkload ARGS``; its stdout (a failure is a RuntimeError with its stderr)."""
    p = subprocess.run([b.bulkload, *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"bulkload {args[0]} exited with {p.returncode}: {tail(p.stderr)}")
    return p.stdout


def _timed_cli(b: Bench, args: list[str]) -> dict:
    """`bulkload ARGS` in a sampled process tree: wall time and peak RSS (output discarded)."""
    os.sync()
    p = run_sampled([b.bulkload, *args], stdout=subprocess.DEVNULL)
    if p.rc != 0:
        raise RuntimeError(f"bulkload {args[0]} exited with {p.rc}: {tail(p.err)}")
    return {
        "wall_s": p.wall_s,
        "peak_tree_rss_bytes": p.peak_tree_rss_bytes,
        "peak_tree_anon_bytes": p.peak_tree_anon_bytes,
    }


def _fail(f: Figure | None, reason: str) -> None:
    if f is not None and f.status == "ok":
        f.status, f.reason = "failed", reason


def _ops(b: Bench, uri: str, warm: str, commit: Figure | None) -> dict:
    """One sample of the child's operations; a commit the code cannot do alone (no
    load_manifest / Manifest.save) fails the commit figure only."""
    os.sync()
    res = b.child_sample("catalog_ops", uri=uri, warm=warm, root=str(b.ds_root(uri)), append=b.p.catalog_append_records)
    if res.get("commit_error"):
        _fail(commit, res["commit_error"])
    return res


def _load_figures(b: Bench) -> dict[str, Figure | None]:
    """The n-record loads: 100-record batches and the default options; with ``before``
    (the command of the code before), the same two run by it, interleaved with these."""
    n = b.p.n
    out = {
        "br100": b.fig(
            "catalog-load-br100",
            LOADS,
            "bulkload load --batch-records 100",
            n,
            limit=None,
            params={"batch_records": 100, "batches": -(-n // 100)},
            note="the issue's target 3: 3 x faster than before",
        ),
        "default": b.fig(
            "catalog-load-default",
            LOADS,
            "bulkload load, default options",
            n,
            limit=None,
            params={"batch_records": None},
            note="within noise of before",
        ),
    }
    if b.p.before:
        for key in ("br100", "default"):
            f = out[key]
            out[f"{key}-before"] = b.fig(
                f"catalog-load-{key}-before",
                LOADS,
                f"{f.title if f else key} (before: {b.p.before})",
                n,
                limit=None,
                params={**(f.params if f else {}), "bulkload": b.p.before},
            )
    return out


def _load(b: Bench, key: str) -> dict:
    uri = b.dataset("lmdb", f"catalog-load-{key}")
    try:
        return load_once(
            b,
            b.p.n,
            uri,
            workers=None,
            format=None,
            compression=None,
            batch_records=100 if key.startswith("br100") else None,
            bulkload=shlex.split(b.p.before) if key.endswith("-before") else None,
        )
    finally:
        rm(b.ds_root(uri))


# ============================================================================================
# targets
# ============================================================================================


def catalog_targets(figs: dict[str, Figure], baseline: dict | None = None) -> list[Target]:
    """The issue's targets from the catalog figures of a run (none when there are none)."""
    ops = {}
    for f in figs.values():
        if f.group == GROUP and f.params.get("op") in OPS:
            ops[f.params["op"], f.params["batches"]] = f
    if not ops and not any(f.group == LOADS for f in figs.values()):
        return []
    bs = sorted({n for _, n in ops})
    out = []
    if bs:
        top = bs[-1]
        for op, ms in TARGET_MS.items():
            out.append(
                _under(
                    f"catalog-{op}-{ms:g}ms",
                    f"{OPS[op][0]} at {top:,} batches",
                    ops.get((op, top)),
                    ms,
                    unit="s" if op == "info" else "ms",
                )
            )
        for op in ("append", "commit", "open"):
            out.append(
                _flat(
                    f"catalog-{op}-flat",
                    f"{OPS[op][0]}: largest median over {bs[0]:,} .. {bs[-1]:,} batches / the median at {bs[0]:,}",
                    [ops.get((op, n)) for n in bs],
                    FLAT,
                    lambda f: _median(f, "seconds"),
                    "ms",
                )
            )
        out.append(
            _flat(
                "catalog-verify-rss-flat",
                f"bulkload verify peak private RSS at {top:,} batches / at {bs[0]:,}",
                [ops.get(("verify", n)) for n in (bs[0], top)],
                RSS_FLAT,
                lambda f: max(s["peak_tree_anon_bytes"] for s in f.samples),
                "bytes",
            )
        )
    out += _load_targets(figs, baseline)
    return out


def _ok(f: Figure | None) -> bool:
    return f is not None and f.status == "ok" and bool(f.samples)


def _median(f: Figure, key: str) -> float:
    return statistics.median(s[key] for s in f.samples)


def _missing(
    tid: str,
    what: str,
    target: float,
    figs: list[Figure | None],
    at_most: bool = False,
    unit: str | None = None,
    why: str = "",
) -> Target:
    bad = [f.id for f in figs if f is not None and f.status != "ok"]
    return Target(
        tid, what, target, "not measured" + (f" ({', '.join(bad)})" if bad else why), at_most=at_most, unit=unit
    )


def _under(tid: str, what: str, f: Figure | None, limit_ms: float, unit: str) -> Target:
    """The figure's median time under ``limit_ms``: ratio = limit / median >= 1."""
    what = f"{what} <= {limit_ms:g} ms" if unit == "ms" else f"{what} <= {limit_ms / 1e3:g} s"
    if not _ok(f):
        return _missing(tid, what, 1.0, [f], unit=unit)
    ms = _median(f, "seconds") * 1e3
    scale = 1e3 if unit == "s" else 1.0
    return Target.measured(
        tid,
        f"{what}: limit / median",
        round(ms / scale, 6),
        limit_ms / scale,
        round(limit_ms / ms, 3),
        1.0,
        ms <= limit_ms,
        unit=unit,
    )


def _flat(tid: str, what: str, fs: list[Figure | None], bound: float, value, unit: str) -> Target:
    """The largest value over ``fs`` (the last sizes) over the first's, at most ``bound``."""
    what = f"{what} <= {bound:g}"
    if len(fs) < 2 or not all(_ok(f) for f in fs):
        return _missing(tid, what, bound, fs, at_most=True, unit=unit, why="" if len(fs) >= 2 else " (one size only)")
    vals = [value(f) for f in fs]
    scale = 1e3 if unit == "ms" else 1
    top, base = max(vals[1:]), vals[0]
    r = top / base
    return Target.measured(
        tid,
        what,
        round(top * scale, 6),
        round(base * scale, 6),
        round(r, 3),
        bound,
        r <= bound,
        at_most=True,
        unit=unit,
    )


def _load_targets(figs: dict[str, Figure], baseline: dict | None) -> list[Target]:
    """Target 3: the 100-record-batch load 3 x faster than before, the default load within
    noise of before. Before: the ``--before`` code's loads interleaved in this run, else a
    baseline result, else (100-record batches at 20M only) the issue's figure."""
    br, default = figs.get("catalog-load-br100"), figs.get("catalog-load-default")
    note = ""
    if _ok(br) and _ok(default):
        note = f"; in this run {_median(br, 'seconds') / _median(default, 'seconds'):.2f} x the default load's time"
    return [
        _faster(
            "catalog-load-br100-3x",
            "bulkload load --batch-records 100: before / now",
            br,
            SPEEDUP,
            _before(figs, baseline, "br100", br),
            note,
        ),
        _faster(
            "catalog-load-default-noise",
            "bulkload load, default options: before / now (within noise)",
            default,
            NOISE,
            _before(figs, baseline, "default", default),
            "",
        ),
    ]


def _before(figs: dict[str, Figure], baseline: dict | None, key: str, now: Figure | None) -> tuple[float | None, str]:
    """The "before" seconds of load ``key`` and where they come from (see `_load_targets`)."""
    same_run = figs.get(f"catalog-load-{key}-before")
    if _ok(same_run):
        return _median(same_run, "seconds"), f"{same_run.params.get('bulkload')}, interleaved in this run"
    records = now.records if now is not None else 0
    before, source = _baseline_seconds(baseline, f"catalog-load-{key}", records)
    if before is None and key == "br100" and records == ISSUE_RECORDS:
        return BEFORE_S_20M, "the issue's ~10 s (20M records, this machine)"
    return before, source


def _faster(
    tid: str, what: str, now: Figure | None, needed: float, before: tuple[float | None, str], note: str
) -> Target:
    what = f"{what} >= {needed:g}"
    seconds, source = before
    if not _ok(now) or seconds is None:
        return _missing(
            tid,
            what,
            needed,
            [now],
            unit="s",
            why="" if seconds is not None else " (no before: give --before or a --baseline result of the same n)",
        )
    t = _median(now, "seconds")
    return Target.measured(
        tid,
        what,
        round(t, 6),
        round(seconds, 6),
        round(seconds / t, 3),
        needed,
        seconds / t >= needed,
        note=f"before: {source}{note}",
        unit="s",
    )


def _baseline_seconds(baseline: dict | None, fid: str, records: int) -> tuple[float | None, str]:
    """The median seconds of figure ``fid`` in a baseline result, if it measured the same records."""
    f = (baseline or {}).get("figures", {}).get(fid)
    if not f or f.get("status") != "ok" or f.get("records") != records or not f.get("seconds"):
        return None, ""
    return f["seconds"]["median"], f"baseline git {((baseline.get('git') or {}).get('commit') or '?')[:12]}"


# ============================================================================================
# child benchmark processes
# ============================================================================================


def _lock(root: str):
    from ..infra.lock import DatasetLock  # only in the child that commits

    return DatasetLock(root).acquire()


def _append_runs(m, count: int, tag: str) -> None:
    """Append ``count`` finished load runs of 0 records, each with its own source, shaped as
    the dataset's last run (the cron case: many small runs; these ones load nothing)."""
    import uuid

    last = next(reversed(m.runs))  # the runs need not be a list (only iterable both ways)
    base = last.to_dict()
    now = time.time()
    first_seq, first_record = m.next_seq, m.next_record
    for i in range(count):
        src = f"gen://{LAYOUT}?n=0&start={first_record}&bench={tag}-{i}"
        d = {
            **base,
            "id": uuid.uuid4().hex[:12],
            "status": "done",
            "started": now,
            "ended": now,
            "pid": os.getpid(),
            "source": src,
            "fingerprint": src,
            "first_seq": first_seq,
            "first_record": first_record,
            "total": 0,
            "records": 0,
            "batches": 0,
            "seconds": 0.0,
            "written_records": 0,
            "kept_records": 0,
        }
        m.runs.append(type(last).from_dict(d))


def child_catalog_runs(root: str, runs: int, per_commit: int) -> dict:
    """Commit ``runs`` small runs into the dataset at ``root``, ``per_commit`` per commit."""
    from ..model.manifest import load_manifest  # the manifest's own commit (see the module's docstring)

    t = time.perf_counter()
    lock = _lock(root)
    commits = 0
    try:
        m = load_manifest(root)
        done = 0
        while done < runs:
            k = min(per_commit, runs - done)
            _append_runs(m, k, f"r{done}")
            m.save(root)
            done += k
            commits += 1
    finally:
        lock.release()
    return {"seconds": time.perf_counter() - t, "commits": commits}


def child_catalog_ops(uri: str, warm: str, root: str, append: int = 1000, read: int = 10) -> dict:
    """One sample of the per-size operations, in this fresh process warmed up on ``warm``."""
    import loader  # the public API

    def append_to(target: str, start: int) -> dict:
        src = f"gen://{LAYOUT}?n={append}&start={start}"
        return loader.load(src, target, batch_records=append).to_dict()

    with loader.open(warm) as ds:  # warm-up: imports and first opens, on another dataset
        ds.read_records(0, read)
        end = ds.records
    append_to(warm, end)
    t0 = time.perf_counter()
    with loader.open(uri) as ds:
        end = ds.records
        got = ds.read_records(end // 2, end // 2 + read)
    t1 = time.perf_counter()
    rep = append_to(uri, end)
    t2 = time.perf_counter()
    if len(got) != read or rep["records"] != append:
        raise RuntimeError(f"read {len(got)} records (expected {read}), appended {rep['records']} ({append})")
    out = {
        "open_read_s": t1 - t0,
        "append_s": t2 - t1,
        "records_before": end,
        "append_in_process": rep.get("in_process"),
        "append_batches": rep.get("batches"),
    }
    try:
        from ..model.manifest import load_manifest  # the commit alone: the manifest's own commit
    except ImportError as e:
        return out | {"commit_s": None, "commit_error": f"the commit cannot be timed alone: {e}"}
    lock = _lock(root)
    try:
        t3 = time.perf_counter()
        m = load_manifest(root)
        t4 = time.perf_counter()
        _append_runs(m, 1, f"commit-{os.getpid()}")
        m.save(root)
        t5 = time.perf_counter()
    finally:
        lock.release()
    return out | {"commit_open_s": t4 - t3, "commit_s": t5 - t4}
