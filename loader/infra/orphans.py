"""Workers whose coordinator died exit silently: imported by the forkserver only.

pool.context() names this module first in the forkserver's preload list, so it is
imported once, in the forkserver process (whose parent is the coordinator), and every
worker forked from it inherits what it sets. A worker whose coordinator was SIGKILLed
while starting it reads half of its start-up data (multiprocessing's preparation data and
process object) and fails in multiprocessing's own code - UnpicklingError, EOFError - before
any of bulkload's runs; multiprocessing then prints the traceback on the job's stderr
(``sys.excepthook``), long after the job was reported killed. The hooks set here print
nothing for an error of a process whose coordinator is gone (they give a dying coordinator
up to `GRACE_S` to be seen dead: its pipes close before it becomes a zombie), and leave
every other error to the default hook. Threads too (``threading.excepthook``: a worker's
thread writing to a coordinator that is gone).

Crash behaviour: only what is printed changes; the process exits as before (the forkserver
child with code 1 - nobody waits for it -, a worker at its coordinator watch, proc.py).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from . import proc

#: the coordinator: the forkserver's parent, when the forkserver imports this module
COORDINATOR = os.getppid()
#: seconds a process with an error waits for its dying coordinator to be seen dead
GRACE_S = 2.0


def orphaned(grace_s: float = GRACE_S) -> bool:
    """Whether this process's coordinator is gone (waiting up to ``grace_s`` for a dying one)."""
    deadline = time.monotonic() + grace_s
    while proc.parent_alive(COORDINATOR):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _quiet_excepthook(kind, value, tb, default=sys.excepthook) -> None:
    if not orphaned():
        default(kind, value, tb)


def _quiet_thread_excepthook(args, default=threading.excepthook) -> None:
    if not orphaned():
        default(args)


sys.excepthook = _quiet_excepthook
threading.excepthook = _quiet_thread_excepthook
