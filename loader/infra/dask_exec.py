"""The Dask executor: a run's tasks as Dask tasks on a ``distributed.Client``'s workers, with
leases that fence zombie attempts and revoke orphans. Messages, attempts, orphans, fail fast
and crash behaviour: docs/design/dask.md."""

from __future__ import annotations

import fcntl
import numbers
import os
import pickle
import re
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from distributed import Queue, Variable, get_worker
from distributed.client import FutureCancelledError

from ..errors import EngineError, Interrupted, WorkerError
from .fsatomic import mkdir_inside
from .pool import Progress, Result, failure, picklable
from .regular import read_regular

#: seconds an attempt waits for the lock of an earlier attempt, and for the coordinator's go
LEASE_WAIT_S = 120.0
#: seconds the coordinator waits, when stopping, for every attempt to let go of its lock
STOP_WAIT_S = 30.0
STOP = "stop"


class Superseded(Exception):
    """A newer attempt of this task started, or the coordinator stopped the run."""


@dataclass(frozen=True)
class Started:
    """Attempt ``attempt`` of a task holds its lease on the worker at ``address``."""

    address: str
    pid: int


@dataclass(frozen=True)
class Job:
    run_id: str
    lease_dir: str
    queue: str


def lease_base(job: Job, index: int) -> str:
    return os.path.join(job.lease_dir, f"{job.run_id}-{index}")


def _read(path: str) -> str:
    try:
        return read_regular(path, 1 << 20).decode()
    except FileNotFoundError:
        return ""


def write_text(path: str, text: str) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Lease:
    """An attempt's claim on its task: the token in ``.want`` and the flock on ``.lock``."""

    def __init__(self, job: Job, index: int):
        base = lease_base(job, index)
        self.want, self.lock = base + ".want", base + ".lock"
        self.token = uuid.uuid4().hex
        self.fd = -1

    def acquire(self, wanted: Callable[[], bool] = lambda: True) -> int:
        """Take the lease (the earlier attempt stops at its next message); the attempt number."""
        write_text(self.want, self.token)
        self.fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + LEASE_WAIT_S
        while True:
            self.check()
            _check_wanted(wanted)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise WorkerError(f"an earlier attempt still holds {self.lock} after {LEASE_WAIT_S:.0f} s")
                time.sleep(0.05)
        attempt = int(os.pread(self.fd, 32, 0) or b"0") + 1
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(attempt).encode(), 0)
        os.fsync(self.fd)
        return attempt

    def check(self) -> None:
        if _read(self.want) != self.token:
            raise Superseded("superseded by a newer attempt, or the run was stopped")

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # releases the flock
            self.fd = -1


class _Outbox:
    """A hosted task's outbox: each message is fenced by the lease and by Dask's word
    that the task is still wanted, then queued."""

    def __init__(self, queue: Queue, index: int, attempt: int, lease: Lease, wanted: Callable[[], bool]):
        self.queue, self.index, self.attempt, self.lease, self.wanted = queue, index, attempt, lease, wanted
        self.lock = threading.Lock()

    def put(self, msg) -> None:
        with self.lock:
            self.lease.check()
            _check_wanted(self.wanted)
            self.queue.put(pickle.dumps((self.index, self.attempt, msg)))


def _check_wanted(wanted: Callable[[], bool]) -> None:
    if not wanted():
        raise Superseded("Dask cancelled the task: its client (the coordinator) is gone")


def _wait_for_go(go: Variable, lease: Lease, wanted: Callable[[], bool]):
    """The task the coordinator tells this attempt to run (after its Started), checking
    meanwhile that the attempt is still wanted (a coordinator that died never answers)."""
    deadline = time.monotonic() + LEASE_WAIT_S
    while True:
        try:
            task = pickle.loads(go.get(timeout=0.5))
            break
        except TimeoutError:
            lease.check()
            _check_wanted(wanted)
            if time.monotonic() > deadline:
                raise WorkerError(f"no word from the coordinator in {LEASE_WAIT_S:.0f} s") from None
    if task == STOP:
        raise Superseded("the run was stopped")
    return task


def _still_wanted() -> Callable[[], bool]:
    """For the task running in this thread: whether Dask still wants its result (a task of
    a client that is gone is released: its state on the worker becomes cancelled)."""
    worker = get_worker()
    key = worker.get_current_task()

    def wanted() -> bool:
        ts = worker.state.tasks.get(key)
        return ts is not None and ts.state not in ("cancelled", "released", "forgotten")

    return wanted


def _hosted(fn: Callable, task, index: int, job: Job) -> Result:
    """A task's attempt on a Dask worker: lease, announce, wait for the go, run ``fn``."""
    lease = Lease(job, index)
    try:
        wanted = _still_wanted()
        attempt = lease.acquire(wanted)
        queue = Queue(job.queue)
        out = _Outbox(queue, index, attempt, lease, wanted)
        out.put(Started(get_worker().address, os.getpid()))
        return Result(receipt=fn(_wait_for_go(Variable(f"{job.queue}-{index}-{attempt}"), lease, wanted), out))
    except BaseException as e:  # report everything, including SystemExit
        return Result(None, True, picklable(e), str(e) or type(e).__name__, traceback.format_exc())
    finally:
        lease.release()


def hosted_task(task):
    """``task`` as it runs inside a Dask worker: no coordinator pid to watch (the client
    may be on another host; Dask cancels the tasks of a client that is gone)."""
    if any(f.name == "main_pid" for f in fields(task)):
        return replace(task, main_pid=0)
    return task


class DaskExecutor:
    """Runs tasks on the workers of ``client``; leases live under ``lease_dir``."""

    engine = "dask"
    local = False

    def __init__(self, client, lease_dir: str, scheduler: str = ""):
        self.client, self.lease_dir = client, lease_dir
        self.scheduler = scheduler or str(client.scheduler.address)
        self.retried = 0  # attempts after the first, over every run of this executor
        self.workers: set[str] = set()  # addresses of the workers that ran an attempt

    def run(
        self,
        fn: Callable,
        tasks: list,
        extras: list[tuple] | None = None,
        on_progress: Callable[..., None] | None = None,
        on_message: Callable[[object], None] | None = None,
        on_retry: Callable | None = None,
    ) -> list:
        return _Run(self, fn, tasks, on_progress, on_message, on_retry).run()


class _Run:
    """One run of tasks on Dask (see the module docstring)."""

    def __init__(self, ex: DaskExecutor, fn, tasks, on_progress, on_message, on_retry):
        self.ex, self.fn, self.on_retry = ex, fn, on_retry
        self.tasks = [hosted_task(t) for t in tasks]
        self.on_progress = on_progress or (lambda records, nbytes=None: None)
        self.on_message = on_message or (lambda msg: None)
        run_id = uuid.uuid4().hex[:12]
        self.job = Job(run_id, ex.lease_dir, f"bulkload-{run_id}")
        self.attempt = [0] * len(tasks)
        self.delivered: list[list] = [[] for _ in tasks]
        self.results: dict[int, object] = {}
        self.futures: list = []

    def run(self) -> list:
        self.coordinator = hold_run(self.job)
        name = getattr(self.fn, "__name__", "task")
        try:
            self.queue = Queue(self.job.queue, client=self.ex.client)
            self.futures = [
                self.ex.client.submit(
                    _hosted, self.fn, t, i, self.job, pure=False, key=f"bulkload-{name}-{i}-{self.job.run_id}"
                )
                for i, t in enumerate(self.tasks)
            ]
            while len(self.results) < len(self.tasks):
                idle = not self._drain()
                for i, f in enumerate(self.futures):
                    if i not in self.results and f.done():
                        self._drain()  # its messages were queued before its result
                        self._finished(i, f)
                        idle = False
                if idle:
                    time.sleep(0.02)
            return [self.results[i] for i in range(len(self.tasks))]
        except KeyboardInterrupt as e:
            self._stop()
            raise Interrupted.of(e) from None
        except BaseException:
            self._stop()
            raise
        finally:
            self._clean()

    def _drain(self) -> bool:
        items = self.queue.get(batch=True)
        for item in items:
            index, attempt, msg = pickle.loads(item)
            if isinstance(msg, Started):
                self._started(index, attempt, msg)
            elif attempt < self.attempt[index]:
                continue  # a zombie's word: a newer attempt runs
            elif isinstance(msg, Progress):
                self.on_progress(msg.records, msg.nbytes)
            elif isinstance(msg, numbers.Integral):  # arrays/ and docs/compact.py workers send records
                self.on_progress(msg)
            else:
                self.delivered[index].append(msg)
                self.on_message(msg)  # may raise: the run stops
        return bool(items)

    def _started(self, index: int, attempt: int, msg: Started) -> None:
        self.attempt[index] = attempt
        self.ex.workers.add(msg.address)
        task = self.tasks[index]
        if attempt > 1:
            self.ex.retried += 1
            if self.on_retry is not None:
                task = self.on_retry(task, list(self.delivered[index]))
            elif self.delivered[index]:
                raise WorkerError(
                    f"worker {index} died after it reported progress and this run cannot resume "
                    "a task; re-run the same command to resume"
                )
        Variable(f"{self.job.queue}-{index}-{attempt}", client=self.ex.client).set(pickle.dumps(task))

    def _finished(self, i: int, f) -> None:
        if f.status == "error":
            exc = f.exception()
            died = type(exc).__name__ == "KilledWorker"
            err = WorkerError(
                f"worker {i} " + ("was lost with every Dask worker that ran it" if died else f"failed: {exc}")
            )
            err.died, err.error = died, exc
            raise err
        try:
            res = f.result()
        except FutureCancelledError:
            raise WorkerError(f"worker {i} was cancelled by the Dask scheduler") from None
        if res.failed:
            raise failure(i, res)
        self.results[i] = res.receipt

    def _stop(self) -> None:
        """Stop every attempt (cancel, revoke the leases) and wait until none writes."""
        for i in range(len(self.tasks)):
            if os.path.exists(lease_base(self.job, i) + ".want"):
                write_text(lease_base(self.job, i) + ".want", STOP)
            for a in range(1, self.attempt[i] + 2):  # an attempt waiting for its go
                Variable(f"{self.job.queue}-{i}-{a}", client=self.ex.client).set(pickle.dumps(STOP))
        try:
            self.ex.client.cancel(self.futures)
        except Exception:
            pass
        deadline = time.monotonic() + STOP_WAIT_S
        for i in range(len(self.tasks)):
            _wait_free(lease_base(self.job, i) + ".lock", deadline)

    def _clean(self) -> None:
        _remove_run(self.job.lease_dir, self.job.run_id)
        os.close(self.coordinator)
        try:
            os.rmdir(self.job.lease_dir)
        except OSError:
            pass  # another run's leases, or not empty


def hold_run(job: Job) -> int:
    """Mark ``job``'s run live - an flock on ``<run id>.run``, held by the coordinator until
    the run ends (the kernel drops it if the coordinator dies) - then stop the orphans:
    the attempts of runs whose coordinator is gone. Returns the held file's descriptor."""
    mkdir_inside(job.lease_dir)
    tmp = os.path.join(job.lease_dir, f".{job.run_id}.run.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.replace(tmp, os.path.join(job.lease_dir, f"{job.run_id}.run"))  # never seen unlocked
    try:
        stop_orphans(job.lease_dir, job.run_id)
    except BaseException:
        _remove_run(job.lease_dir, job.run_id)
        os.close(fd)
        raise
    return fd


def stop_orphans(lease_dir: str, own: str) -> None:
    """Revoke every lease of a run whose coordinator died (its ``.run`` lock is free, or it
    has none) and wait until none of its attempts holds a lock: an orphaned Dask task
    stops at its next message, before this run's tasks write anything."""
    runs = {name.split("-")[0].split(".")[0] for name in os.listdir(lease_dir) if not name.startswith(".")}
    deadline = time.monotonic() + LEASE_WAIT_S
    for run_id in sorted(runs - {own}):
        if not _lock_free(os.path.join(lease_dir, f"{run_id}.run")):
            continue  # a live run (e.g. a verify next to this one)
        prefix = os.path.join(lease_dir, f"{run_id}-")
        for name in os.listdir(lease_dir):
            if name.startswith(f"{run_id}-") and name.endswith(".want"):
                write_text(os.path.join(lease_dir, name), STOP)
        for name in sorted(os.listdir(lease_dir)):
            lock = os.path.join(lease_dir, name)
            if lock.startswith(prefix) and name.endswith(".lock") and not _wait_free(lock, deadline):
                raise WorkerError(
                    f"an attempt of an earlier run whose coordinator is gone still holds {lock} "
                    f"after {LEASE_WAIT_S:.0f} s (a stopped or hung Dask worker); restart that "
                    "worker, then re-run the command"
                )
        _remove_run(lease_dir, run_id)


def _remove_run(lease_dir: str, run_id: str) -> None:
    for name in os.listdir(lease_dir):
        if name == f"{run_id}.run" or name.startswith(f"{run_id}-"):
            try:
                os.unlink(os.path.join(lease_dir, name))
            except FileNotFoundError:
                pass


def _lock_free(path: str) -> bool:
    """Whether nobody holds the flock of ``path`` (True for a missing file)."""
    return _wait_free(path, 0.0)


def _wait_free(lock: str, deadline: float) -> bool:
    """Wait until nobody holds ``lock`` (or the deadline passes); whether it is free."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)
    finally:
        os.close(fd)


def nearest_existing(path: str) -> str:
    """``path``, or its nearest ancestor that exists (a dataset not created yet)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def inode_of(path: str) -> int | None:
    """On a Dask worker (sent by reference: a worker that cannot import bulkload fails to
    unpickle it): the inode of ``path`` there, None if it cannot see it."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def check_workers(client, root: str) -> None:
    """Before anything is written: every Dask worker can import bulkload and sees the
    dataset's directory (or its nearest existing ancestor) as the same directory as the
    coordinator (same inode: one host, or a shared filesystem). EngineError otherwise."""
    where = nearest_existing(root)
    mine = os.stat(where).st_ino
    for address, got in sorted(client.run(inode_of, where, on_error="return").items()):
        if isinstance(got, BaseException):
            missing = re.search(r"No module named '[^']+'", str(got))
            if missing:  # the worker's error comes back wrapped: its text names the module
                raise EngineError(
                    f"the Dask worker at {address} cannot import bulkload ({missing.group(0)}); "
                    "install it in the workers' Python environment: pip install 'bulkload[dask]'"
                )
            raise EngineError(f"the Dask worker at {address} cannot run bulkload's tasks: {got}")
        if got != mine:
            raise unseen(address, where, "does not exist there" if got is None else "is another directory there")


def unseen(address: str, where: str, seen: str, host: str = "") -> EngineError:
    """The error of a Dask worker (at ``address``, on ``host`` if known) that cannot see
    ``where``: ``seen`` says what it finds there. Said alike before a run and by a read
    task on that worker."""
    on = f" (host {host})" if host else ""
    return EngineError(
        f"the Dask worker at {address}{on} cannot see the dataset's directory {where} (it {seen}); "
        "put the dataset on a filesystem every worker sees at the same path"
    )
