"""A forkserver context whose workers never import or run the caller's ``__main__``.

multiprocessing's spawn and forkserver start methods send each new process "preparation
data" naming the parent's main module (``init_main_from_path``: a script's file;
``init_main_from_name``: ``python -m MODULE``), and the child re-runs that module as
``__mp_main__`` before it unpickles its target. For a script without an
``if __name__ == "__main__":`` guard that re-runs the caller's whole program in every
worker - a second load, or a multiprocessing bootstrap error - and a script read from
stdin (``python - < script``) cannot be re-run at all. Bulkload's workers need only
bulkload's modules (the forkserver preloads them, pool.py) and, for a user generator, the
generator's own module, which they import by name (a generator defined in ``__main__``
comes by value instead, with cloudpickle: sources/user_gen.py). So `context()` is the forkserver
context with one change: the preparation data of every process it starts has no main
module in it. Everything else (sys.path, the working directory, argv, the authkey) is
sent as multiprocessing sends it.

The forkserver itself imports ``__main__`` only when ``'__main__'`` is in its preload
list; pool.py's list names bulkload's modules only.

The one function copied from CPython is ``popen_forkserver.Popen._launch`` (3.11-3.13,
unchanged there), with the main module's keys removed from its preparation data.
"""

from __future__ import annotations

import io
import os
import threading
from multiprocessing import context as mp_context
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util

#: the preparation-data keys that make a child import the parent's main module
MAIN_KEYS = ("init_main_from_path", "init_main_from_name")


def preparation_data(name: str) -> dict:
    """What multiprocessing sends a new process before its target, without the main module."""
    data = spawn.get_preparation_data(name)
    for key in MAIN_KEYS:
        data.pop(key, None)
    return data


class _Popen(popen_forkserver.Popen):
    _fds: list[int]  # set by popen_forkserver.Popen.__init__ (typeshed does not list it)

    def _launch(self, process_obj):  # CPython's, with preparation_data() (module docstring)
        prep_data = preparation_data(process_obj._name)
        buf = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            mp_context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        _parent_w = os.dup(w)
        # CPython's multiprocessing.util.close_fds (3.11-3.13), which typeshed does not list
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


_ENV_LOCK = threading.Lock()


def ensure_forkserver() -> None:
    """Start the forkserver, if it is not running, with ``PYTHONSAFEPATH=1`` (``-P``).

    It runs ``python -c ...``, which puts the current directory first on its ``sys.path``,
    and CPython 3.11 ignores the ``sys_path`` it is given: every module it preloads
    (bulkload's own, pool.py), and so every worker forked from it, was imported from the
    current directory when that held a package of the same name - a ``loader/`` directory
    of the user's, or another checkout of bulkload, whose workers then spoke another
    version's messages (seen: "worker 1 exited with code 0 before it finished"). The
    workers themselves get the coordinator's ``sys.path`` from their preparation data."""
    with _ENV_LOCK:
        old = os.environ.get("PYTHONSAFEPATH")
        os.environ["PYTHONSAFEPATH"] = "1"
        try:
            forkserver.ensure_running()
        finally:
            if old is None:
                del os.environ["PYTHONSAFEPATH"]
            else:
                os.environ["PYTHONSAFEPATH"] = old


class MainlessProcess(mp_context.ForkServerProcess):
    """A forkserver process that does not import the parent's ``__main__``."""

    @staticmethod
    def _Popen(process_obj):
        ensure_forkserver()
        return _Popen(process_obj)


class MainlessContext(mp_context.ForkServerContext):
    Process = MainlessProcess


def context() -> MainlessContext:
    """A new forkserver context whose processes skip the caller's main module."""
    return MainlessContext()
