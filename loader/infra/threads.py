"""Threads that a stop signal cannot wedge: `TaskThread`.

A stop signal (SIGTERM, SIGINT, SIGHUP) is raised as ``Interrupted`` in the main thread at
its next check point (interrupts.py): on entering a function, after a call returns, at a
loop's backward jump. ``threading.Thread.start`` waits for the new thread on an Event, a
Python-level Condition: raised right after that Condition took its lock, the stop leaves
the lock held, and the new thread, which sets the Event before running anything, waits
for it forever - a thread that never ends and a caller that joins it forever.

A `TaskThread` is started with ``_thread.start_new_thread`` and reports its end through a
C lock and a flag, so starting and waiting for it take no Python-level lock. Whatever
check point a stop lands on, `ended` afterwards tells the truth: a thread that was never
started has "ended"; one that ran to its end has, also when the stop landed between the
caller's taking of the end lock and its release.

An exception that escapes ``fn`` is kept in ``error``, never printed as a traceback: the
bodies that must report theirs catch everything and hand it over themselves
(executors.ThreadExecutor, loading/worker._Producer, the stream feeders).
"""

from __future__ import annotations

import _thread
from collections.abc import Callable


class TaskThread:
    """``fn(*args)`` in a thread of its own, once `start` is called."""

    __slots__ = ("args", "error", "finished", "fn", "running", "started")

    def __init__(self, fn: Callable, *args):
        self.fn, self.args = fn, args
        self.started = self.finished = False
        self.error: BaseException | None = None
        self.running = _thread.allocate_lock()  # held from the start until fn has returned

    def start(self) -> None:
        """Start the thread (RuntimeError: no thread could be started).

        A stop that lands before the thread is started leaves ``started`` False (there is
        no check point between setting it and ``start_new_thread``); one that lands after
        leaves a running thread, which `ended` waits for."""
        self.running.acquire()
        self.started = True
        try:
            _thread.start_new_thread(self._run, ())
        except RuntimeError:
            self.started = False
            self.running.release()
            raise

    def _run(self) -> None:
        try:
            self.fn(*self.args)
        except BaseException as e:
            self.error = e
        finally:
            self.finished = True  # before the release: a waiter that got the lock sees it
            self.running.release()

    def ended(self, timeout: float | None) -> bool:
        """Whether the thread has ended (or was never started), waiting up to ``timeout`` s
        (None: until it has; a stop signal still interrupts the wait)."""
        if not self.started or self.finished:
            return True
        if self.running.acquire(timeout=-1 if timeout is None else timeout):
            self.running.release()
        return self.finished
