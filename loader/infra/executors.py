"""The executor seam: where a run's tasks execute - the local pool (default), in-process, or Dask.

Every run hands its tasks to `run(fn, tasks, ...)`, which gives them to the executor in
effect (`current`): the local forkserver `pool.Pool` unless a caller chose another with
``with using(executor):`` (the API does, from ``client=`` / ``engine=``; api/engine.py).
Either executor runs ``fn(task, outbox, *extra)`` once per task, relays progress and
messages in order, returns the receipts in task order, and fails fast (the first error
stops every other task before it propagates). None holds business logic.

`InProcessExecutor` runs the same tasks one after another in the calling thread, with no
process started: for a run too small to pay for the forkserver and its workers (a caller
decides: loading/execute.py). A worker function sees ``task.main_pid == os.getpid()`` and
leaves the signals and the process's life to its host (proc.start_worker). Its errors are
the pool's: an exception becomes ``WorkerError("worker N failed: ...")`` (``error``: the
exception itself), a stop signal (KeyboardInterrupt / ``Interrupted``) propagates as
``Interrupted`` from wherever the task was, its stores closed by the task's own ``finally``
- what a kill of a worker leaves, which every writer tolerates. A fault point in such a
task (infra/faults.py) kills the one process: coordinator and task die together, as in a
power cut.

`ThreadExecutor` runs them at once, one thread per task, in the calling process: for a
small run whose work mostly releases the GIL (numpy, the stores' I/O, encoders; a caller
decides: arrays/finalize.py, loading/execute.py for compressed records). As in-process, plus: the task threads share one outbox (one
message at a time); the first task that fails stops the run - every other task raises at
its next message and ends through its ``finally`` - and its error is raised once every
thread has ended; a stop signal (delivered to the calling thread, which waits in short
slices for it) stops the tasks the same way and propagates as ``Interrupted``. No thread
of a run outlives its ``run`` call, wherever the stop lands: the threads are
`threads.TaskThread`s, which starting and joining take no Python-level lock for.

``on_retry(task, messages) -> task`` is the caller's answer to a task that is started
again after its first attempt died (only Dask does that: the local pool fails the run and
the user resumes it): given the messages the earlier attempts delivered, the task the new
attempt runs (e.g. a load worker resumes after its checkpointed batches). Without it, a
retry after messages were delivered fails the run (nothing is committed twice).

Crash behaviour: the executor commits nothing; see pool.py and dask_exec.py for how
each stops its workers.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from ..errors import Interrupted, UsageError
from . import faults
from .pool import Pool, Progress, Result, failure
from .threads import TaskThread


class LocalExecutor:
    """The local process pool (infra/pool.py): one forkserver process per task."""

    engine = "local"
    scheduler = ""
    local = True

    def __init__(self) -> None:
        self.retried = 0  # the local pool never retries
        self.workers: set = set()

    def run(
        self,
        fn: Callable,
        tasks: list,
        extras: list[tuple] | None = None,
        on_progress: Callable[..., None] | None = None,
        on_message: Callable[[object], None] | None = None,
        on_retry: Callable | None = None,
    ) -> list:
        return Pool(fn, tasks, extras=extras, on_progress=on_progress, on_message=on_message).run()


class InProcessExecutor(LocalExecutor):
    """The tasks run one after another in the calling thread (see the module docstring)."""

    def run(
        self,
        fn: Callable,
        tasks: list,
        extras: list[tuple] | None = None,
        on_progress: Callable[..., None] | None = None,
        on_message: Callable[[object], None] | None = None,
        on_retry: Callable | None = None,
    ) -> list:
        outbox = _Inbox(on_progress, on_message)
        return [
            _run_task(w, fn, task, outbox, extra)
            for w, (task, extra) in enumerate(zip(tasks, extras or [() for _ in tasks]))
        ]


class _Inbox:
    """What a task's ``outbox.put`` reaches in-process: the caller's callbacks, at once, in
    the order the pool delivers them (Progress / an int: progress; anything else: a message)."""

    def __init__(self, on_progress, on_message):
        self.on_progress = on_progress or (lambda records, nbytes=None: None)
        self.on_message = on_message or (lambda msg: None)

    def put(self, msg) -> None:
        if isinstance(msg, Progress):
            self.on_progress(msg.records, msg.nbytes)
        elif isinstance(msg, int):
            self.on_progress(msg)
        else:
            self.on_message(msg)  # may raise (e.g. a manifest write failed): the run stops


class ThreadExecutor(LocalExecutor):
    """The tasks run at once, one thread each, in the calling process (module docstring)."""

    #: seconds between the calling thread's looks for a stop signal while its tasks run
    POLL_S = 0.05

    def run(
        self,
        fn: Callable,
        tasks: list,
        extras: list[tuple] | None = None,
        on_progress: Callable[..., None] | None = None,
        on_message: Callable[[object], None] | None = None,
        on_retry: Callable | None = None,
    ) -> list:
        outbox = _SharedInbox(on_progress, on_message, _barriers(extras))
        threads = [
            TaskThread(outbox.run_task, w, fn, task, extra)
            for w, (task, extra) in enumerate(zip(tasks, extras or [() for _ in tasks]))
        ]
        try:
            for t in threads:
                t.start()
            _join(threads, self.POLL_S)
        except KeyboardInterrupt as e:  # a stop signal (only this thread gets them)
            outbox.stop()
            _join(threads, self.POLL_S, stopping=True)
            raise Interrupted.of(e) from None
        return outbox.receipts(len(tasks))


class _SharedInbox(_Inbox):
    """The `_Inbox` of a ThreadExecutor's tasks: one message at a time; the receipt or
    error of each task; once the run stops (a task failed, or a stop signal) every other
    task's next message raises `_Stopped`, so that it ends through its own ``finally``, and
    ``barriers`` (where tasks wait for each other) are aborted: a task that failed, or was
    never started, will not arrive there."""

    #: its tasks are threads of one process, run at once (a task may look: loading/worker.py)
    shared_process = True

    def __init__(self, on_progress, on_message, barriers: list[threading.Barrier]):
        super().__init__(on_progress, on_message)
        self.barriers = barriers
        self.lock = threading.Lock()
        self.stopped = False
        self.results: dict[int, object] = {}
        self.first_error: BaseException | None = None

    def put(self, msg) -> None:
        with self.lock:
            if self.stopped:
                raise _Stopped("the run stopped")
            super().put(msg)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
        for b in self.barriers:
            b.abort()

    def run_task(self, w: int, fn: Callable, task, extra: tuple) -> None:
        """Thread body: task ``w``'s receipt, or its error (the first one stops the run)."""
        try:
            self.results[w] = _run_task(w, fn, task, self, extra)
        except BaseException as e:
            with self.lock:
                if not self.stopped:
                    self.stopped, self.first_error = True, e
            self.stop()

    def receipts(self, ntasks: int) -> list:
        if self.first_error is not None:
            raise self.first_error
        return [self.results[w] for w in range(ntasks)]


def _barriers(extras: list[tuple] | None) -> list[threading.Barrier]:
    """The ``threading.Barrier``s among the tasks' extras (each once)."""
    found = {id(x): x for extra in extras or () for x in extra if isinstance(x, threading.Barrier)}
    return list(found.values())


class _Stopped(Exception):
    """Raised in a task thread at its next message once its run stopped."""


def _join(threads: list[TaskThread], poll_s: float, stopping: bool = False) -> None:
    """Wait for every thread, waking every ``poll_s`` s so that a stop signal is raised
    here; once ``stopping``, a further one is ignored (the tasks are ending already)."""
    for t in threads:
        while True:
            try:
                if t.ended(poll_s):
                    break
            except KeyboardInterrupt:
                if not stopping:
                    raise


def _run_task(w: int, fn: Callable, task, outbox: _Inbox, extra: tuple):
    """Task ``w``'s receipt; its error as the pool reports a worker's."""
    with faults.role_kept():  # the task takes the role wN. (proc.start_worker) for its fault points
        try:
            return fn(task, outbox, *extra)
        except KeyboardInterrupt as e:  # a stop signal: Interrupted, as from the pool
            raise Interrupted.of(e) from None
        except Exception as e:
            raise failure(w, Result(None, True, e, str(e) or type(e).__name__, traceback.format_exc())) from None


def require_local(what: str) -> None:
    """Refuse ``what`` on an executor other than the local pool (a usage error)."""
    ex = current()
    if not ex.local:
        raise UsageError(
            f"{what} cannot run on the {ex.engine} engine: its records cannot be split across "
            "machines; use --engine local, or save it to a file first"
        )


_current: ContextVar = ContextVar("bulkload_executor", default=None)


def current() -> Any:
    """The executor in effect (a fresh local one by default)."""
    return _current.get() or LocalExecutor()


def current_or_none() -> Any:
    """The executor a caller chose with `using`, or None."""
    return _current.get()


@contextlib.contextmanager
def using(executor):
    """Run the runs started inside the block on ``executor``."""
    token = _current.set(executor)
    try:
        yield executor
    finally:
        _current.reset(token)


def run(
    fn: Callable,
    tasks: list,
    extras: list[tuple] | None = None,
    on_progress: Callable[..., None] | None = None,
    on_message: Callable[[object], None] | None = None,
    on_retry: Callable | None = None,
) -> list:
    """Run ``fn`` over ``tasks`` on the executor in effect; the receipts in task order."""
    return current().run(fn, tasks, extras=extras, on_progress=on_progress, on_message=on_message, on_retry=on_retry)
