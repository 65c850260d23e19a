"""Progress for long work: a rich bar on a terminal, plain log lines otherwise.

``mode``: "auto" (bar when stderr is a terminal, else a log line every
``BULKLOAD_PROGRESS_SECONDS``, default 2), "bar", "log", or "none" (``--quiet``).
Everything goes to stderr so that stdout stays clean for ``--json`` and piped data. With
no known total (a stream: stdin, a FIFO) the bar shows the records counted so far where
it would show a percentage; both show records/s and MB/s of the input consumed.

The bar is redrawn every ``REFRESH_S`` by a `threads.TaskThread` of its own, not by rich's
refresh thread: rich stops that one through an Event, and a stop signal landing there
(its Condition's lock just taken) can leave the lock held, and the join then waits
forever (tests/loading/test_stop_anywhere.py found that thread outliving the bar).
The thread ends when the bar stops, or when the Progress object is dropped (a stop that
landed on the first step of ``__exit__``).
"""

from __future__ import annotations

import sys
import time
import weakref
from typing import TYPE_CHECKING

from . import env, logs
from .threads import TaskThread

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

#: seconds between redraws of the bar (rich's default rate)
REFRESH_S = 0.1


class Progress:
    def __init__(
        self, label: str, total_records: int | None, record_size: int, mode: str = "auto", interval: float | None = None
    ):
        if mode == "auto":  # a bar is not a JSON line: --log-format json logs progress as lines
            mode = "bar" if sys.stderr.isatty() and logs.FORMAT != "json" else "log"
        self.mode = mode
        self.label = label
        self.total = total_records
        self.record_size = record_size
        self.records = 0
        self.bytes = 0
        self.interval = env.progress_seconds() if interval is None else interval
        self.t0 = time.perf_counter()
        self._last_log = self.t0
        self._bar: RichProgress | None = None
        self._redrawing = False
        self._redraws: TaskThread | None = None

    def __enter__(self):
        if self.mode == "bar":
            try:
                self._start_bar()
            except BaseException:  # a stop while starting: no redraw thread may be left running
                self.__exit__(*sys.exc_info())
                raise
        return self

    def _start_bar(self) -> None:
        # start-up: rich only when a progress bar is drawn (a terminal, not --quiet)
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self._bar = bar = RichProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[done]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
            auto_refresh=False,
        )
        bar.start()
        self._task = bar.add_task(self.label, total=self.total, rate="", done=self._done())
        self._redrawing = True
        self._redraws = TaskThread(_redraw, weakref.ref(self))
        self._redraws.start()

    def rates(self) -> tuple[float, float]:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        return self.records / dt, self.bytes / dt / 1e6

    def _done(self) -> str:
        """What the bar shows of the work done: a percentage, or records when the total is unknown."""
        if self.total is None:
            return f"{self.records:,} records"
        return f"{100 * self.records / self.total if self.total else 100:>5.1f}%"

    def advance(self, records: int, nbytes: int | None = None) -> None:
        """``records`` more done; ``nbytes`` their size when records vary (documents:
        bytes of text), else records x record_size."""
        self.records += records
        self.bytes += records * self.record_size if nbytes is None else nbytes
        now = time.perf_counter()
        if self.mode == "bar" and self._bar is not None:
            rps, mbs = self.rates()
            self._bar.update(self._task, completed=self.records, done=self._done(), rate=_rates(rps, mbs, "  "))
        elif self.mode == "log" and now - self._last_log >= self.interval:
            self._last_log = now
            self._log()

    def _log(self) -> None:
        rps, mbs = self.rates()
        of = f"/{self.total:,}" if self.total is not None else ""
        logs.event(
            f"{self.label}: {self.records:,}{of} records, {_rates(rps, mbs, ', ')}",
            stage=self.label,
            records=self.records,
            total=self.total,
            records_per_s=round(rps),
            mb_per_s=round(mbs, 1),
        )

    def __exit__(self, *exc):
        if self._bar is not None:
            try:
                self._redrawing = False
                if self._redraws is not None:
                    self._redraws.ended(1.0)
            finally:
                self._bar.stop()
        elif self.mode == "log" and exc[0] is None:
            self._log()


def _rates(rps: float, mbs: float, sep: str) -> str:
    """Records/s and MB/s, readable for a slow stream too (3,000 rec/s, 0.3 MB/s)."""
    records = f"{rps / 1e6:.2f} M rec/s" if rps >= 1e6 else f"{rps:,.0f} rec/s"
    return f"{records}{sep}{mbs:,.0f} MB/s" if mbs >= 10 else f"{records}{sep}{mbs:.1f} MB/s"


def _redraw(owner: weakref.ref) -> None:
    """The redraw thread's body: until the bar is stopped - or dropped: a stop that landed
    on the first step of ``__exit__`` skipped it, and a Python caller that handles the
    interrupt drops the Progress with the exception."""
    while True:
        time.sleep(REFRESH_S)
        p = owner()
        if p is None or not p._redrawing:
            return
        p._bar.refresh()
        del p
