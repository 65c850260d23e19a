"""Workers reading their coordinator's memory: process_vm_readv(2).

A whole in-memory array given to load (sources/shared.py) is read by the workers straight
out of the coordinator's address space (`read_from`): one copy per byte, like a pread from
the page cache, no second copy of the array, nothing left behind by a crash. The kernel
allows it when a worker may ptrace its coordinator: same user, the coordinator dumpable,
no seccomp filter refusing the call, and Yama's ptrace_scope 0 or 1. Under scope 1 only
ancestors may trace, so while a load needs it the coordinator names itself as the tracer
its descendants may act for (`allow_descendants`: PR_SET_PTRACER; undone when the last
such load in the process ends).

Whether it works here is found out once per process, by a real worker of the pool that
reads a known word of the coordinator (`workers_can_read`: ~one process start); where it
does not, the caller copies the records into shared memory instead.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from dataclasses import dataclass

from .pool import Pool

PR_SET_PTRACER = 0x59616D61
YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"
_PROBE_WORD = 0x62756C6B6C6F6164  # "bulkload"


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


@functools.cache
def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.process_vm_readv.argtypes = [
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_ulong,
        ctypes.c_void_p,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    return libc


def read_from(pid: int, address: int, dst_address: int, nbytes: int) -> None:
    """Copy ``nbytes`` at ``address`` of process ``pid`` to ``dst_address`` of this one
    (OSError with the errno when the kernel refuses or the range is not mapped)."""
    fn = _libc().process_vm_readv
    got = 0
    while got < nbytes:
        local = _IoVec(dst_address + got, nbytes - got)
        remote = _IoVec(address + got, nbytes - got)
        k = fn(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if k <= 0:
            err = ctypes.get_errno() if k < 0 else 0
            raise OSError(err, os.strerror(err) if err else "read nothing")
        got += k


# --- permission: Yama scope 1 ---------------------------------------------------------------

_allowed = 0  # loads that currently need descendants to read this process
_lock = threading.Lock()


def allow_descendants():
    """Let this process's descendants read its memory until the returned release() is
    called (Yama scope 1: PR_SET_PTRACER; nothing to do under scope 0)."""
    global _allowed
    if _yama_scope() != 1:
        return lambda: None
    with _lock:
        if _allowed == 0:
            _prctl(PR_SET_PTRACER, os.getpid())
        _allowed += 1
    released = threading.Event()

    def release() -> None:
        global _allowed
        if released.is_set():
            return
        released.set()
        with _lock:
            _allowed -= 1
            if _allowed == 0:
                _prctl(PR_SET_PTRACER, 0)

    return release


def _yama_scope() -> int:
    try:
        with open(YAMA_SCOPE) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0  # no Yama: the classic ptrace rules


def _prctl(option: int, arg: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, ctypes.c_ulong(arg), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no prctl: the probe finds out that workers cannot read


# --- the probe -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeTask:
    pid: int
    address: int


def workers_can_read() -> bool:
    """Can a worker of the pool read this process's memory (with the permissions as they
    are now)? Found out once per process by a real worker."""
    return _probe(os.getpid())


@functools.cache
def _probe(pid: int) -> bool:
    word = ctypes.c_uint64(_PROBE_WORD)
    try:
        got = Pool(probe_worker, [ProbeTask(pid, ctypes.addressof(word))]).run()
    except Exception:
        return False
    return got == [_PROBE_WORD]


def probe_worker(task: ProbeTask, outbox) -> int | None:
    """The probe's worker: the word at ``task.address`` of the coordinator, None if refused."""
    word = ctypes.c_uint64(0)
    try:
        read_from(task.pid, task.address, ctypes.addressof(word), 8)
    except OSError:
        return None
    return word.value
