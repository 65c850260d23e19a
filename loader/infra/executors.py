"""The executor seam: where a run's tasks execute - the local pool (default) or Dask.

Every run hands its tasks to `run(fn, tasks, ...)`, which gives them to the executor in
effect (`current`): the local forkserver `pool.Pool` unless a caller chose another with
``with using(executor):`` (the API does, from ``client=`` / ``engine=``; api/engine.py).
Either executor runs ``fn(task, outbox, *extra)`` once per task, relays progress and
messages in order, returns the receipts in task order, and fails fast (the first error
stops every other task before it propagates). Neither holds business logic.

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
from contextvars import ContextVar
from typing import Callable

from ..errors import UsageError
from .pool import Pool


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
