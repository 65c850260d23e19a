"""A real Dask LocalCluster for the tests of this folder (worker processes, one thread each)."""

import contextlib
import contextvars
import glob
import json
import os
import signal
import tempfile
import threading
import time

import loader


@contextlib.contextmanager
def local_cluster(n_workers: int = 2):
    """(client, cluster) of ``n_workers`` worker processes, closed on the way out."""
    from distributed import Client, LocalCluster

    remove_leaked_semaphores()
    before = semaphores()
    with (
        LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None) as c,
        Client(c) as client,
    ):
        record_semaphores(semaphores() - before)
        yield client, c
    record_semaphores(set())


# Dask's nannies (multiprocessing queues under the spawn context) create named semaphores,
# /dev/shm/sem.mp-*, which multiprocessing's resource tracker removes when their process
# dies - unless the tracker is killed too (a test run killed with its process group).
# bulkload creates none (infra/pool.py: pipes only). Each test process records the names
# its clusters created; a later one removes those of a dead process that nobody maps.
SHM = "/dev/shm"
SEM_RECORDS = os.path.join(tempfile.gettempdir(), "bulkload-dask-test-semaphores")


def semaphores() -> set[str]:
    try:
        return {n for n in os.listdir(SHM) if n.startswith("sem.mp-")}
    except FileNotFoundError:
        return set()


def record_semaphores(names: set[str]) -> None:
    os.makedirs(SEM_RECORDS, exist_ok=True)
    with open(os.path.join(SEM_RECORDS, str(os.getpid())), "w") as f:
        f.write("\n".join(sorted(names)))


def _mapped() -> set[str]:
    """The semaphore files some live process has mapped (/proc/PID/maps)."""
    out = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as f:
                out.update(line.rsplit("/", 1)[-1].strip() for line in f if "/dev/shm/sem.mp-" in line)
        except OSError:
            pass
    return out


def remove_leaked_semaphores() -> None:
    """Remove the semaphores recorded by test processes that are gone, unless mapped."""
    for path in glob.glob(os.path.join(SEM_RECORDS, "*")):
        pid = int(os.path.basename(path))
        if os.path.exists(f"/proc/{pid}"):
            continue
        with open(path) as f:
            names = set(f.read().split())
        for name in names - _mapped() if names else ():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(SHM, name))
        os.unlink(path)


def dataset_state(uri: str, arrays: bool = True):
    """What must be byte-identical between two runs: the batch rows (seq, shard, first,
    count, nbytes, checksum), every record, and each array's whole box - after verify."""
    with loader.open(uri) as ds:
        rep = ds.verify()
        assert rep.ok, rep.problems
        rows = [(b.seq, b.shard, b.first, b.count, b.nbytes, b.checksum) for b in ds.manifest.batches]
        boxes = {a: ds.read_box(a) for a in sorted(ds.manifest.arrays)} if arrays else {}
        return rows, ds.read_records().tobytes(), boxes


def same_state(a, b) -> None:
    assert a[0] == b[0]
    assert a[1] == b[1]
    assert sorted(a[2]) == sorted(b[2])
    for name in a[2]:
        assert a[2][name].equals(b[2][name]), name


def pending_rows(root) -> int:
    """Checkpointed batches of the dataset's last run, not yet committed (a load under way)."""
    from loader.errors import BulkloadError
    from loader.model import manifest as mf

    try:
        runs = [r.to_dict() for r in mf.load_manifest(root).runs]
    except (FileNotFoundError, json.JSONDecodeError, BulkloadError):
        return 0
    return len(runs[-1].get("pending") or []) if runs else 0


def lease_holders(root) -> dict[str, int]:
    """Lease file -> pid of the process holding its flock (/proc/locks): the Dask worker
    process running that attempt (not its nanny)."""
    by_inode = {}
    for path in glob.glob(os.path.join(root, ".leases", "*.lock")):
        with contextlib.suppress(FileNotFoundError):
            by_inode[os.stat(path).st_ino] = path
    held = {}
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 5 and parts[1] == "FLOCK" and "->" not in parts:
                inode = int(parts[5].split(":")[2])
                if inode in by_inode:
                    held[by_inode[inode]] = int(parts[4])
    return held


def kill_an_attempt(root, ready, thread, timeout=60) -> int:
    """Once ``ready()``, SIGKILL the Dask worker process that holds a task's lease (so it
    runs that task now). Returns the pid killed."""
    deadline = time.monotonic() + timeout
    while True:
        assert thread.is_alive(), "the run ended before a worker could be killed: make it longer"
        assert time.monotonic() < deadline, "no attempt to kill"
        holders = lease_holders(root) if ready() else {}
        if holders:
            pid = sorted(holders.items())[0][1]
            assert pid != os.getpid()
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.005)


def run_in_thread(fn):
    """(thread, out) running ``fn`` with the caller's context (the engine in effect is a
    context variable); out gets "value" or "error"."""
    out = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e

    ctx = contextvars.copy_context()
    t = threading.Thread(target=ctx.run, args=(target,), daemon=True)
    t.start()
    return t, out
