"""The state of one benchmark run and its figure bookkeeping, shared by the sections
(limits, loads, finalize, peers): declaring a figure (`Bench.fig`), measuring it
``repeats`` times (`Bench.repeat`) or round-robin with others (`Bench.interleave`: a sample
of each row per round, so a ratio between rows is not one busy moment against a quiet one),
skipping it with a reason, logging each result line, and naming the datasets a section
writes.

Invariants: every figure a section declares is in ``figures``, in the order declared, even
when it is not selected (status "skipped", reason "not selected"); a figure whose
measurement raises is "failed" with the exception as its reason and the suite goes on; a
sample's floats are rounded to 6 digits and it records the 1-minute load average.

Crash behaviour: the work directory (created by `open_work`) and the ``mem://`` datasets
named here are removed by `close_work`, which the suite calls in a ``finally``; a killed
run leaves ``.bench-work-*`` in the work parent and ``/dev/shm/bulkload/bench-PID-*``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .figures import Figure
from .plan import Plan
from .processes import find_bulkload_gen, rm, run_child, tool

MEM_ROOT = Path("/dev/shm/bulkload")


def each_round(fn: Callable[..., dict], *args: Any, **kw: Any) -> Callable[[int], dict]:
    """``fn(*args, **kw)`` as a measurement ``one(i)``, the same in every round i (its
    arguments taken now, not when it runs: a loop's current values)."""
    return lambda i: fn(*args, **kw)


@dataclass
class Row:
    """One row of an interleaved measurement (`Bench.interleave`): ``one(i)`` measures round
    i once and returns a dict of timings; each figure of ``outputs`` takes its "seconds"
    from its key (one child feeds several figures: ArcticDB's write and read)."""

    one: Callable[[int], dict]
    outputs: list[tuple[Figure | None, str]] = field(default_factory=list)

    def active(self) -> bool:
        return any(f is not None and f.status == "ok" for f, _ in self.outputs)

    def fail(self, reason: str) -> None:
        for f, _ in self.outputs:
            if f is not None and f.status == "ok":
                f.status, f.reason = "failed", reason


class Bench:
    def __init__(self, plan: Plan, log: Callable[[str], None] | None = None):
        self.plan = plan
        self.p = plan.params
        self.cores = os.cpu_count() or 1
        self.log = log or (lambda s: None)
        self.figures: dict[str, Figure] = {}
        self.gen = find_bulkload_gen()
        self.bulkload = tool("bulkload")
        self.mem_names: list[str] = []
        self._work: Path | None = None  # the run's work directory: open_work

    # --- the work directory -------------------------------------------------------------
    def open_work(self) -> Path:
        # absolute: the commands timed run in another directory (processes.neutral_dir)
        self._work = Path(tempfile.mkdtemp(prefix=".bench-work-", dir=self.plan.work_parent)).resolve()
        return self._work

    @property
    def work(self) -> Path:
        """The run's work directory (`open_work` makes it)."""
        if self._work is None:
            raise RuntimeError("the bench work directory is not open: call open_work first")
        return self._work

    def close_work(self) -> None:
        if self._work is not None:
            rm(self._work)
        for name in self.mem_names:
            rm(MEM_ROOT / name)

    def dataset(self, scheme: str, name: str) -> str:
        """The URI of a dataset named ``name`` in the work directory (or in /dev/shm for mem)."""
        if scheme == "mem":
            mname = f"bench-{os.getpid()}-{name}"
            if mname not in self.mem_names:
                self.mem_names.append(mname)
            return f"mem://{mname}"
        return f"{scheme}://{self.work / name}"

    @staticmethod
    def ds_root(uri: str) -> Path:
        scheme, rest = uri.split("://", 1)
        rest = rest.split("?", 1)[0]
        return MEM_ROOT / rest if scheme == "mem" else Path(rest)

    # --- figure bookkeeping -------------------------------------------------------------
    def fig(self, id: str, group: str, title: str, records: int, **kw) -> Figure | None:
        """Declare a figure; None when it is not selected (it is still reported as skipped)."""
        f = Figure(id, group, title, records, **kw)
        self.figures[id] = f
        only = self.plan.only
        if only is not None and id not in only and group not in only:
            f.status, f.reason = "skipped", "not selected"
            return None
        return f

    def selected(self, id: str, group: str) -> bool:
        only = self.plan.only
        return only is None or id in only or group in only

    def measured(self, id: str) -> bool:
        """Whether an earlier section declared (and so measured, or tried) figure ``id``."""
        return id in self.figures and self.figures[id].reason != "not selected"

    def repeat(
        self,
        f: Figure | None,
        one: Callable[[int], dict],
        setup: Callable[[int], object] | None = None,  # its result is not used
        teardown: Callable[[], None] | None = None,
    ) -> None:
        """Run ``one(i)`` ``repeats`` times; it returns a sample dict with "seconds"."""
        if f is None or f.status != "ok":
            return
        try:
            for i in range(self.p.repeats):
                if setup:
                    setup(i)
                self.add_sample(f, one(i))
        except Exception as e:  # a failing figure is reported, the suite goes on
            f.status, f.reason = "failed", f"{type(e).__name__}: {e}"
        finally:
            if teardown:
                try:
                    teardown()
                except Exception:
                    pass
        self.report(f)

    @staticmethod
    def add_sample(f: Figure, s: dict) -> None:
        s["loadavg_1m"] = round(os.getloadavg()[0], 2)  # the machine is shared: show it
        f.samples.append({k: (round(v, 6) if isinstance(v, float) else v) for k, v in s.items()})

    def interleave(self, rows: Sequence[Row], between: Callable[[str], None] | None = None) -> None:
        """Round-robin: in round r (1..repeats) one sample of each row in turn, so that every
        row sees the same machine; ``between(phase)`` runs before each round ("round r")
        and after the last ("after"). A row whose sample raises fails all its figures and
        is left out of the later rounds; the others go on."""
        live = [r for r in rows if r.active()]
        for i in range(self.p.repeats):
            if between:
                between(f"round {i + 1}")
            for row in list(live):
                try:
                    raw = row.one(i)
                except Exception as e:  # a failing row is reported, the others go on
                    row.fail(f"{type(e).__name__}: {e}")
                    live.remove(row)
                    continue
                for f, key in row.outputs:
                    if f is not None and f.status == "ok":
                        self.add_sample(f, {**raw, "seconds": raw[key], "round": i + 1})
        if between:
            between("after")
        for row in rows:
            for f, _ in row.outputs:
                if f is not None:
                    self.report(f)

    def skip(self, f: Figure | None, reason: str) -> None:
        if f is not None:
            f.status, f.reason = "skipped", reason
            self.report(f)

    def report(self, f: Figure) -> None:
        """One progress line for a measured (or skipped, or failed) figure."""
        d = f.to_dict(self.figures)
        if f.status != "ok":
            self.log(f"{f.id:<28} {f.status}: {f.reason}")
        elif f.kind == "latency":
            st = d["latency_ms"]
            self.log(f"{f.id:<28} {st['median']:9.3f} ms   ({st['min']:.3f} - {st['max']:.3f})")
        elif f.kind == "memory" and d["peak_tree_anon_bytes"]:
            st, mem = d["seconds"], d["peak_tree_anon_bytes"]
            self.log(f"{f.id:<28} {st['median']:9.3f} s    peak private RSS {mem['max'] / 2**20:,.1f} MiB")
        elif d.get("mb_s"):
            st = d["mb_s"]
            r = d["ratio_to_limit"]
            extra = f"  {r['median']:.2f}x {f.limit}" if r else ""
            self.log(f"{f.id:<28} {st['median']:9,.0f} MB/s ({st['min']:,.0f} - {st['max']:,.0f}){extra}")

    def child_sample(self, kind: str, **args) -> dict:
        """A child benchmark's result as a sample, with its wall time and peak RSS."""
        res, p = run_child(kind, **args)
        res.setdefault("wall_s", p.wall_s)
        res["peak_tree_rss_bytes"] = p.peak_tree_rss_bytes
        res["peak_tree_anon_bytes"] = p.peak_tree_anon_bytes
        return res
