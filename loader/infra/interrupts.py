"""Stop signals of the `bulkload` command: SIGINT, SIGTERM and SIGHUP all stop a job alike.

What cron, systemd, ``kill`` and a closed terminal send must not kill the coordinator by
signal (its run would stay ``running``): while ``stop_on_signals()`` is active (the CLI
wraps every command in it), the first of these signals raises ``Interrupted(signo)`` in
the main thread, exactly where Ctrl-C raises KeyboardInterrupt. The run that is stopped
stops its workers, records itself as ``interrupted`` and saves the manifest; the CLI prints
one line and exits 128 + signo (130, 143, 129).

Invariants:
- a signal that arrives inside ``held()`` (a commit: its manifest write happens whole, or
  not at all) is raised when the block ends, saying that the run had finished;
- after the first signal, the three are ignored until the process exits, so a second
  Ctrl-C or a systemd re-send cannot abort that cleanup half-way (it is bounded: workers
  are SIGKILLed and reaped within seconds, one manifest write) nor the report;
- once a command has ended, its outcome is decided: the CLI ignores the three while the
  process exits (a SIGTERM during the interpreter's teardown would report a finished job
  as killed by the signal);
- only the CLI installs handlers, and restores the previous ones when a command ends
  without a signal:
  ``import loader`` changes nothing, a Python caller keeps its own signal handling (Ctrl-C
  is a KeyboardInterrupt there, handled by the same cleanup code);
- workers ignore all three (proc.start_worker): only the coordinator decides, so a
  signal to the whole process group (systemd) is reported as an interruption, not as a
  worker killed by a signal.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from contextlib import contextmanager

from ..errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Held:
    """The nesting depth of held() blocks, and the signal that arrived inside them."""

    depth = 0
    signo: int | None = None


_held = _Held()


def ignore_stop_signals() -> None:
    """From now on the three are ignored (the cleanup after a signal; the CLI's exit)."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)


def _raise_once(signo: int, frame) -> None:
    if _swallowing(frame):  # raised there, it would be printed and lost: deliver it again
        threading.Timer(0.01, os.kill, (os.getpid(), signo)).start()
        return
    ignore_stop_signals()  # the cleanup that follows must run to its end
    if _held.depth:
        _held.signo = signo
        return
    raise Interrupted(signo)


def _swallowing(frame) -> bool:
    """Does ``frame`` run inside a callback whose exceptions Python prints as "Exception
    ignored" and drops? Import's module-lock weakref callback (``cb``, met at start-up), and
    any ``__del__`` up the stack (a catalog snapshot closed by the garbage collector while
    `bulkload info` starts: tests/cli/test_early_signals.py)."""
    code = frame.f_code if frame is not None else None
    if code is not None and code.co_name == "cb" and code.co_filename.startswith("<frozen importlib"):
        return True
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


@contextmanager
def held(outcome: Callable[[], str]):
    """Hold a stop signal that arrives inside the block until it ends, then raise it as
    ``Interrupted(signo, outcome())``; if the block raised (e.g. the forkserver died of the
    same signal), raise ``Interrupted(signo)`` from that error. (No effect without the CLI's
    handlers.)"""
    _held.depth += 1
    try:
        yield
    except BaseException as exc:
        signo = _release()
        if signo is None:
            raise
        raise Interrupted(signo) from exc
    signo = _release()
    if signo is not None:
        raise Interrupted(signo, outcome())


def _release() -> int | None:
    """Leave a held() block: the signal held by the outermost one, if any."""
    _held.depth -= 1
    if _held.depth:
        return None
    signo, _held.signo = _held.signo, None
    return signo


@contextmanager
def stop_on_signals():
    """While active (main thread only), SIGINT / SIGTERM / SIGHUP raise ``Interrupted``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    _held.depth, _held.signo = 0, None
    for s in STOP_SIGNALS:
        signal.signal(s, _raise_once)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is _raise_once:  # else a signal came: keep ignoring them
            for s, handler in previous.items():  # while the command reports it and exits
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)
