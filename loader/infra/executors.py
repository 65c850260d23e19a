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
import traceback
from contextvars import ContextVar
from typing import Callable

from ..errors import Interrupted, UsageError
from . import faults
from .pool import Pool, Progress, Result, failure


class LocalExecutor:
    """The local process pool (infra/pool.py): one forkserver process per task."""

    engine = "local"
    scheduler = ""
    local = True

    def __init__(self):
        self.retried = 0  # the local pool never retries
        self.workers: set = set()

    def run(self, fn: Callable, tasks: list, extras: list[tuple] | None = None,
            on_progress: Callable[..., None] | None = None, on_message: Callable[[object], None] | None = None,
            on_retry: Callable | None = None) -> list:
        return Pool(fn, tasks, extras=extras, on_progress=on_progress, on_message=on_message).run()


class InProcessExecutor(LocalExecutor):
    """The tasks run one after another in the calling thread (see the module docstring)."""

    def run(self, fn: Callable, tasks: list, extras: list[tuple] | None = None,
            on_progress: Callable[..., None] | None = None, on_message: Callable[[object], None] | None = None,
            on_retry: Callable | None = None) -> list:
        outbox = _Inbox(on_progress, on_message)
        return [_run_task(w, fn, task, outbox, extra)
                for w, (task, extra) in enumerate(zip(tasks, extras or [() for _ in tasks]))]


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


def _run_task(w: int, fn: Callable, task, outbox: _Inbox, extra: tuple):
    """Task ``w``'s receipt; its error as the pool reports a worker's."""
    with faults.role_kept():  # the task takes the role wN. (proc.start_worker) for its fault points
        try:
            return fn(task, outbox, *extra)
        except KeyboardInterrupt as e:  # a stop signal: Interrupted, as from the pool
            raise Interrupted.of(e) from None
        except Exception as e:  # noqa: BLE001 - what the pool's worker would have sent
            raise failure(w, Result(None, True, e, str(e) or type(e).__name__, traceback.format_exc())) from None


def require_local(what: str) -> None:
    """Refuse ``what`` on an executor other than the local pool (a usage error)."""
    ex = current()
    if not ex.local:
        raise UsageError(f"{what} cannot run on the {ex.engine} engine: its records cannot be split across "
                         "machines; use --engine local, or save it to a file first")


_current: ContextVar = ContextVar("bulkload_executor", default=None)


def current():
    """The executor in effect (a fresh local one by default)."""
    return _current.get() or LocalExecutor()


def current_or_none():
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


def run(fn: Callable, tasks: list, extras: list[tuple] | None = None,
        on_progress: Callable[..., None] | None = None, on_message: Callable[[object], None] | None = None,
        on_retry: Callable | None = None) -> list:
    """Run ``fn`` over ``tasks`` on the executor in effect; the receipts in task order."""
    return current().run(fn, tasks, extras=extras, on_progress=on_progress, on_message=on_message,
                         on_retry=on_retry)
