"""Opening the files inside a dataset only when they are regular files of plausible size.

Anything in a dataset directory can be replaced by something that is not a file: a FIFO
(an open for reading waits for a writer that never comes), a link to ``/dev/zero`` (a
read never ends) or ``/dev/null``, a ``mknod`` device, a directory. bulkload opens every
file inside a dataset through `open_regular` (or checks a file a library opens by path
with `require_regular`): the path is stat'ed first, so a FIFO or a device is never opened
(opening a device can have effects of its own), then opened with ``O_NONBLOCK`` (should it
have been swapped for a FIFO meanwhile, the open does not wait) and checked again on the
open descriptor (``fstat``: S_ISREG, and at most ``max_bytes`` when given). What is not a
regular file raises DamagedDatasetError naming the path and what it is; a missing file
raises FileNotFoundError as ``open`` does (the caller knows what a missing file means).
Nothing here writes.
"""

from __future__ import annotations

import fcntl
import io
import os
import stat

from ..errors import DamagedDatasetError

#: the most a JSON metadata file (manifest, run plans, ledgers) may plausibly hold
MAX_METADATA_BYTES = 1 << 30

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words ("a FIFO (named pipe)", "a directory", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refuse(path: str, st: os.stat_result, max_bytes: int | None, advice: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        link = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
        what = f"is {kind_of(st.st_mode)}, not a regular file"
    elif max_bytes is not None and st.st_size > max_bytes:
        link, what = "", f"holds {st.st_size:,} bytes, more than the {max_bytes:,} such a file can plausibly hold"
    else:
        return
    err = DamagedDatasetError(f"{path}{link} {what}; nothing was read or written - {advice}")
    err.what = f"{os.path.basename(path)}{link} {what}"  # for a caller's own message
    raise err


DEFAULT_ADVICE = "move it aside and restore the file from a backup"


def require_regular(path: str, max_bytes: int | None = None, advice: str = DEFAULT_ADVICE) -> bool:
    """Raise DamagedDatasetError if ``path`` exists (following links) and is not a regular
    file (of at most ``max_bytes``): for files a library opens by name. False when there is
    nothing at ``path`` (or a dangling link), True for a regular file."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    _refuse(path, st, max_bytes, advice)
    return True


def require_regular_entries(directory: str, advice: str = DEFAULT_ADVICE) -> None:
    """`require_regular` for every entry of ``directory`` but sub-directories: before a
    library (RocksDB) opens whatever files it finds there by name."""
    with os.scandir(directory) as entries:
        for e in entries:
            if not e.is_dir(follow_symlinks=False):
                require_regular(e.path, advice=advice)


def open_regular(
    path: str, max_bytes: int | None = None, flags: int = os.O_RDONLY, advice: str = DEFAULT_ADVICE
) -> int:
    """A descriptor of the regular file ``path`` (blocking mode, close-on-exec); see the
    module docstring. FileNotFoundError (also for a dangling link) when there is none."""
    _refuse(path, os.stat(path), max_bytes, advice)
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        _refuse(path, os.fstat(fd), max_bytes, advice)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular_file(path: str, max_bytes: int | None = None, advice: str = DEFAULT_ADVICE) -> io.BufferedReader:
    """`open_regular` as a Python binary file object named ``path``."""
    return open(path, "rb", opener=lambda p, _flags: open_regular(p, max_bytes, advice=advice))


def read_regular(path: str, max_bytes: int | None = MAX_METADATA_BYTES, advice: str = DEFAULT_ADVICE) -> bytes:
    """The bytes of the regular file ``path`` (of at most ``max_bytes``; None: any size)."""
    with open_regular_file(path, max_bytes, advice) as f:
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:  # it grew since it was checked
        raise DamagedDatasetError(
            f"{path} holds more than the {max_bytes:,} bytes such a file can plausibly "
            f"hold; nothing was read or written - {advice}"
        )
    return data
