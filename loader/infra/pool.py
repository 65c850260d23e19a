"""The worker pool: start workers, relay their messages, collect receipts, fail fast.

No business logic lives here. Workers are started with ``forkserver`` (never ``fork``:
LMDB and RocksDB handles break across it) and receive only picklable tasks. They never
import or run the caller's ``__main__`` (mainless.py): a script without an
``if __name__ == "__main__":`` guard, ``python -c`` and a script on stdin load once.

Plumbing: each worker sends to the coordinator over its own one-way pipe
(``multiprocessing.Pipe(duplex=False)``, guarded by a lock in the worker: ``Outbox``);
the coordinator waits on every pipe and every worker's sentinel at once
(``multiprocessing.connection.wait``). No ``multiprocessing.Queue`` or ``Lock``: under
forkserver each creates a named POSIX semaphore (``/dev/shm/sem.mp-*``) that a SIGKILLed
process leaks. A worker sends progress (a `Progress`, or a plain int: records) and
messages (any other object, for ``on_message``), then exactly one ``Result``.

Failure: a worker that raises sends the error (``WorkerError("worker N failed: ...")``);
one that exits without its result, or whose pipe breaks mid-message (EOFError,
UnpicklingError), died (``WorkerError("worker N (pid P) was killed by signal S ...")``,
``died=True``; "... while running X" when it died inside a `running("X")` block: a
user's generator that called os._exit, crashed or aborted). The pool claims nothing about commits: only its caller knows what it
committed (it sets the error's ``outcome``).

Stopping: on any error, and on KeyboardInterrupt / ``Interrupted`` (Ctrl-C, or SIGTERM /
SIGHUP under the CLI), every worker is SIGKILLed and reaped before the exception
propagates (workers ignore the stop signals, see proc.start_worker; a kill leaves the
stores as a crash does, and runs resume from their checkpoints). A pool never returns or
raises with a worker of its own still running.
"""

from __future__ import annotations

import contextlib
import numbers
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import Interrupted, WorkerError
from . import interrupts

_CTX = None
#: a worker killed at the same moment as the coordinator was probably killed by the same
#: group-wide signal: give the coordinator's own signal this long to arrive first
DEATH_GRACE_S = 0.1


def context():
    global _CTX
    if _CTX is None:
        from . import mainless  # start-up: a small load runs in-process and starts no pool

        _CTX = mainless.context()  # workers never import or run the caller's __main__
        _CTX.set_forkserver_preload(
            [
                "loader.infra.orphans",
                "loader.loading.worker",
                "loader.arrays.build",
                "loader.arrays.partition",
                "loader.arrays.scan",
                "loader.maintain.merge",
            ]
        )
    return _CTX


def prewarm() -> None:
    """Start the forkserver in a background thread (a pool started later waits for it, not
    for a second one): its start-up overlaps the caller's work until then."""
    import threading

    from . import mainless

    def start() -> None:
        try:
            mainless.ensure_forkserver()
        except Exception:  # the pool's own start tries again and says what is wrong
            pass

    context()
    threading.Thread(target=start, name="bulkload-prewarm", daemon=True).start()


@dataclass(frozen=True, slots=True)
class Progress:
    """Progress a worker reports: ``records`` more done, ``nbytes`` their size when records
    vary (documents: bytes of text; None: records x record size)."""

    records: int
    nbytes: int | None = None


@dataclass(frozen=True, slots=True)
class Running:
    """What a worker runs from now on that may end its process (a user's generator for a
    record range; "": nothing of the kind): a death until the next one is named by it."""

    what: str


@dataclass(frozen=True)
class Result:
    """A worker's last message: its receipt, or the error it raised (the exception object
    when it pickles - every BulkloadError does -, and its message and traceback text)."""

    receipt: object = None
    failed: bool = False
    error: BaseException | None = None
    message: str = ""
    traceback: str = ""


class Outbox:
    """A worker's end of its pipe; ``put`` may be called from any thread of the worker."""

    def __init__(self, conn):
        self.conn = conn
        self.lock = threading.Lock()

    def put(self, msg) -> None:
        with self.lock:
            self.conn.send(msg)


def picklable(e: BaseException) -> BaseException | None:
    """``e`` if it survives a trip through a pipe (a library's error may not), else None."""
    import pickle  # start-up: only a worker's failure needs it (multiprocessing has it loaded)

    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return None


#: this worker process's outbox (None: not a pool worker)
_OUTBOX: Outbox | None = None


@contextlib.contextmanager
def running(what: str):
    """Tell the coordinator that the block runs ``what`` (e.g. "generator URI for records
    [a, b)"): if this worker process dies inside it (os._exit, a segfault, abort), its
    death names it. Outside a pool worker (in-process, a Dask worker's thread) nothing."""
    out = _OUTBOX
    if out is None:
        yield
        return
    out.put(Running(what))
    try:
        yield
    finally:
        out.put(Running(""))


def _entry(fn: Callable, task, conn, extra: tuple) -> None:
    global _OUTBOX
    out = _OUTBOX = Outbox(conn)
    try:
        result = Result(receipt=fn(task, out, *extra))
    except BaseException as e:  # report everything, including SystemExit
        result = Result(None, True, picklable(e), str(e) or type(e).__name__, traceback.format_exc())
    try:
        out.put(result)
    except OSError:
        pass  # the coordinator is gone: nobody to tell
    finally:
        conn.close()


def failure(w: int, res: Result) -> WorkerError:
    """The error that worker ``w``'s failed ``res`` raises in the coordinator."""
    err = WorkerError(f"worker {w} failed: {res.message}")
    err.error, err.worker_traceback = res.error, res.traceback
    return err


class Pool:
    """Run ``fn(task, outbox, *extra)`` for each task in its own process."""

    def __init__(
        self,
        fn: Callable,
        tasks: list,
        extras: list[tuple] | None = None,
        on_progress: Callable[..., None] | None = None,
        on_message: Callable[[object], None] | None = None,
    ):
        self.ctx = context()
        self.fn = fn
        self.tasks = tasks
        self.extras = extras or [() for _ in tasks]
        # (records, nbytes=None): e.g. infra.progress.Progress.advance
        self.on_progress = on_progress or (lambda records, nbytes=None: None)
        # the other messages a worker sends (e.g. load checkpoints), in order
        self.on_message = on_message or (lambda msg: None)
        self.procs: list = []
        self.conns: list = []  # the coordinator's (reading) end of each worker's pipe
        self.results: dict[int, Result] = {}
        self.running: dict[int, str] = {}  # worker -> what it runs now (`running`)
        self.failure: BaseException | None = None  # set by a coordinator thread (a stream feeder)

    def fail(self, exc: BaseException) -> None:
        """Called from another thread of the coordinator (e.g. a stream feeder)."""
        self.failure = exc

    def run(self) -> list:
        from multiprocessing.connection import wait  # start-up: only a pool waits (see context)

        try:
            self._start()
            while len(self.results) < len(self.procs):
                if self.failure is not None:
                    raise self.failure
                open_conns = [c for w, c in enumerate(self.conns) if w not in self.results and not c.closed]
                sentinels = {p.sentinel: w for w, p in enumerate(self.procs) if w not in self.results}
                ready = wait(open_conns + list(sentinels), timeout=0.2)
                for obj in ready:
                    if obj in sentinels:
                        self._finished(sentinels[obj])
                    else:
                        self._drain(self.conns.index(obj))
            if self.failure is not None:
                raise self.failure
            return [self.results[w].receipt for w in range(len(self.procs))]
        except KeyboardInterrupt as e:
            self.stop()
            raise Interrupted.of(e) from None
        except BaseException:
            self.stop()
            raise
        finally:
            self._reap()

    def _start(self) -> None:
        for w, (task, extra) in enumerate(zip(self.tasks, self.extras)):
            r, s = self.ctx.Pipe(duplex=False)
            p = self.ctx.Process(
                target=_entry, name=f"bulkload-worker-{w}", args=(self.fn, task, s, extra), daemon=True
            )
            try:
                with interrupts.held(str):  # a worker started half-way would have no handle to stop it
                    p.start()
            except (EOFError, OSError) as e:  # e.g. the forkserver was killed
                r.close()
                raise WorkerError(f"worker {w} could not be started: {e or type(e).__name__}") from None
            except BaseException:
                r.close()
                raise
            finally:
                s.close()  # the worker holds the only writing end: its death is EOF here
            self.procs.append(p)
            self.conns.append(r)

    def _drain(self, w: int) -> None:
        """Handle every message waiting on worker w's pipe; a broken pipe is its death."""
        import pickle  # start-up: only a pool reads pipes (multiprocessing has it loaded)

        conn = self.conns[w]
        while w not in self.results and conn.poll():
            try:
                msg = conn.recv()
            except (EOFError, OSError, pickle.UnpicklingError):
                conn.close()  # died, or died mid-message: its sentinel tells how
                return
            if isinstance(msg, Result):
                self.results[w] = msg
                if msg.failed:
                    raise self._error(w, msg)
            elif isinstance(msg, Progress):
                self.on_progress(msg.records, msg.nbytes)
            elif isinstance(msg, Running):
                self.running[w] = msg.what
            elif isinstance(msg, numbers.Integral):  # arrays/ and docs/compact.py workers send records as an int
                self.on_progress(msg)
            else:
                self.on_message(msg)  # may raise (e.g. a manifest write failed): the run stops

    def _finished(self, w: int) -> None:
        """Worker w's process ended: what it sent before is all in its pipe."""
        if not self.conns[w].closed:
            self._drain(w)
        if w not in self.results:
            time.sleep(DEATH_GRACE_S)
            p = self.procs[w]
            p.join(timeout=1)
            code = p.exitcode
            how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
            doing = self.running.get(w)
            err = WorkerError(
                f"worker {w} (pid {p.pid}) {how} " + (f"while running {doing}" if doing else "before it finished")
            )
            err.died = True
            raise err

    @staticmethod
    def _error(w: int, res: Result) -> WorkerError:
        return failure(w, res)

    def stop(self) -> None:
        """Kill every worker still running (they ignore SIGTERM: the coordinator decides)."""
        for p in self.procs:
            if p.exitcode is None:
                p.kill()

    def _reap(self) -> None:
        deadline = time.monotonic() + 5
        for p in self.procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:  # still running after its result: never leave it behind
                p.kill()
                p.join(timeout=2)
        for c in self.conns:
            c.close()
