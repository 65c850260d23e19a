"""The worker pool: start workers, relay progress, collect receipts, fail fast.

No business logic lives here. Workers are started with ``forkserver`` (never ``fork``:
LMDB and RocksDB handles break across it) and receive only picklable tasks. If a
worker raises or dies, or the user presses Ctrl-C, every worker is stopped within
seconds and the error is raised here; the caller commits nothing.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback
from typing import Callable

from .errors import Interrupted, WorkerError

_CTX = None


def context():
    global _CTX
    if _CTX is None:
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["loader.workers", "loader.finalize_workers"])
    return _CTX


def _entry(fn: Callable, task, w: int, result_q, progress_q, extra: tuple) -> None:
    try:
        receipt = fn(task, progress_q, *extra)
        result_q.put(("ok", w, receipt))
    except BaseException as e:  # report everything, including SystemExit
        msg = str(e) or type(e).__name__
        result_q.put(("err", w, type(e).__name__, msg, traceback.format_exc()))


class Pool:
    """Run ``fn(task, progress_q, *extra)`` for each task in its own process."""

    def __init__(self, fn: Callable, tasks: list, extras: list[tuple] | None = None,
                 on_progress: Callable[[int], None] | None = None,
                 on_message: Callable[[tuple], None] | None = None):
        self.ctx = context()
        self.fn = fn
        self.tasks = tasks
        self.extras = extras or [() for _ in tasks]
        self.on_progress = on_progress or (lambda n: None)
        # tuples a worker puts on its progress queue (e.g. load checkpoints), in order
        self.on_message = on_message or (lambda msg: None)
        self.result_q = self.ctx.Queue()
        self.progress_q = self.ctx.Queue()
        self.procs: list = []
        self.failure: BaseException | None = None  # set by a feeder thread

    def fail(self, exc: BaseException) -> None:
        """Called from another thread of the coordinator (e.g. the stdin feeder)."""
        self.failure = exc

    def run(self, poll: Callable[[], None] | None = None) -> list:
        receipts: dict[int, dict] = {}
        try:
            for w, (task, extra) in enumerate(zip(self.tasks, self.extras)):
                p = self.ctx.Process(target=_entry, name=f"bulkload-worker-{w}",
                                     args=(self.fn, task, w, self.result_q, self.progress_q, extra),
                                     daemon=True)
                p.start()
                self.procs.append(p)
            dead_since: dict[int, float] = {}
            while len(receipts) < len(self.procs):
                self._drain_progress()
                if self.failure is not None:
                    raise self.failure
                if poll:
                    poll()
                try:
                    msg = self.result_q.get(timeout=0.05)
                except queue.Empty:
                    msg = None
                if msg is not None:
                    if msg[0] == "ok":
                        receipts[msg[1]] = msg[2]
                    else:
                        _, w, etype, text, tb = msg
                        err = WorkerError(f"worker {w} failed: {text}")
                        err.worker_traceback = tb
                        err.worker_type = etype
                        raise err
                    continue
                for w, p in enumerate(self.procs):
                    if w not in receipts and p.exitcode is not None:
                        # give its last message a moment to arrive through the queue
                        t = dead_since.setdefault(w, time.monotonic())
                        if time.monotonic() - t > 1.0:
                            code = p.exitcode
                            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                            raise WorkerError(f"worker {w} (pid {p.pid}) {how} without finishing; "
                                              "nothing from this run was committed")
            self._drain_progress()
            if self.failure is not None:
                raise self.failure
            return [receipts[w] for w in range(len(self.procs))]
        except KeyboardInterrupt:
            self.stop()
            raise Interrupted("interrupted; nothing from this run was committed") from None
        except BaseException:
            self.stop()
            raise
        finally:
            for p in self.procs:
                p.join(timeout=5)
            self.result_q.close()
            self.progress_q.close()

    def _drain_progress(self) -> None:
        while True:
            try:
                n = self.progress_q.get_nowait()
            except queue.Empty:
                return
            if isinstance(n, tuple):
                self.on_message(n)
            else:
                self.on_progress(n)

    def stop(self) -> None:
        for p in self.procs:
            if p.exitcode is None:
                p.terminate()
        deadline = time.monotonic() + 3
        for p in self.procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:
                os.kill(p.pid, signal.SIGKILL)
                p.join(timeout=2)


def in_thread(target: Callable, pool: Pool, *args) -> threading.Thread:
    """Run a coordinator-side stage (e.g. reading stdin) in a thread; errors fail the pool."""

    def run():
        try:
            target(*args)
        except BaseException as e:
            pool.fail(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t
