"""One writing job per dataset: an exclusive flock on ROOT/.lock.

The lock file records who holds it (pid, host, time) so that a second job can say
"dataset locked by pid P on host H since T" and exit with code 3. The kernel drops a
flock when its process dies, so a lock left by a killed job is taken over at once.

A job whose dataset directory is moved, renamed or removed while it holds the lock ends
with DatasetMovedError (exit 2) whatever error the move caused (a shard or the manifest
"missing"): `DatasetLock.moved` compares ROOT/.lock with the file it locked.

`is_held` tells a reader whether some job holds the lock without touching it (a probe
with flock, even shared, would make a writer starting at that moment fail with "busy").

Before locking, a writer checks that its dataset does not lie inside another dataset
(`refuse_nested`): the outer one's compaction or --replace would delete it. The lock
file is never opened through a symlink and must be a regular file (it is truncated).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from pathlib import Path

from ..errors import DatasetBusyError, DatasetMovedError, NestedDatasetError, NotWritableError
from .paths import enclosing_dataset
from .regular import read_regular

LOCK = ".lock"


class DatasetLock:
    def __init__(self, root: str):
        self.root = root
        self.path = Path(root) / LOCK
        self.fd: int | None = None

    def acquire(self) -> DatasetLock:
        refuse_nested(self.root)
        fd = _open_lock_file(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since", 0)))
            raise DatasetBusyError(
                f"dataset locked by pid {holder.get('pid', '?')} on host {holder.get('host', '?')} "
                f"since {since} ({holder.get('job', 'a job')}); wait for it to finish and retry"
            ) from None
        info = {
            "pid": os.getpid(),
            "host": os.uname().nodename,  # = socket.gethostname(), lighter (start-up)
            "since": time.time(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self.fd = fd
        return self

    def set_job(self, job: str) -> None:
        if self.fd is not None:
            info = _read_holder(self.fd) | {"job": job}
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps(info).encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def moved(self) -> bool:
        """Whether the dataset directory was moved, renamed or removed since the lock was
        taken: ROOT/.lock no longer names the file this job locked."""
        if self.fd is None:
            return False
        try:
            here = os.stat(self.path)
        except OSError:
            return True
        held = os.fstat(self.fd)
        return (here.st_dev, here.st_ino) != (held.st_dev, held.st_ino)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, kind, err, tb):
        moved = isinstance(err, Exception) and self.moved()
        self.release()
        if moved:  # a shard or the manifest "missing" is then no damage: say what happened
            raise DatasetMovedError(
                f"dataset directory {self.root} was moved, renamed or removed while this job was writing it, "
                f"so its files were missing ({type(err).__name__}); the dataset is not damaged: what was committed "
                f"is where the directory went - move it back to {self.root} and run the same command again to "
                "resume"
            ) from err


def refuse_nested(root: str) -> None:
    """Every writer's first check: no dataset inside another one (paths.enclosing_dataset)."""
    outer = enclosing_dataset(root)
    if outer is not None:
        raise NestedDatasetError(
            f"dataset path {root} lies inside {outer} (a dataset or a --replace build), whose compaction "
            f"or --replace would delete it; choose a path outside {outer}"
        )


def _open_lock_file(path: Path) -> int:
    """The lock file, opened read-write (created if missing); never through a symlink,
    and only a regular file (it is truncated and rewritten)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        what = {errno.EISDIR: "is a directory", errno.ELOOP: "is a symlink"}.get(e.errno or 0)
        if what:
            raise NotWritableError(f"lock file {path} {what}, not bulkload's lock; remove it and retry") from None
        raise NotWritableError(
            f"cannot open the lock file {path}: {e.strerror or e}; fix the dataset directory's permissions"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotWritableError(f"lock file {path} is not a regular file; remove it and retry")
    return fd


def _read_holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}


def is_held(root: str) -> bool:
    """Whether a job holds the dataset lock now: a FLOCK on the lock file's inode in
    /proc/locks (or, where that cannot be read, a live holder pid on this host)."""
    path = Path(root) / LOCK
    try:
        st = os.stat(path)
    except OSError:
        return False
    try:
        with open("/proc/locks") as f:
            table = f.read()
    except OSError:
        return _holder_alive(path)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF" (waiters are marked "->")
    return any(p[1:2] == ["FLOCK"] and inode in p for p in (line.split() for line in table.splitlines()))


def _holder_alive(path: Path) -> bool:
    try:
        holder = json.loads(read_regular(str(path), 1 << 16) or b"{}")
    except (OSError, ValueError):  # DamagedDatasetError (a FIFO, a device) is a ValueError
        return False
    if not holder.get("pid") or holder.get("host") != os.uname().nodename:
        return bool(holder)  # another host's job: trust the record
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError):
        pass
    return True
