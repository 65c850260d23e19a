"""Writing a file the user named: ``--out`` of export, query and generate, bench's outputs.

What the path is decides how it is written (`open_output`):

- a regular file, or a name that does not exist yet: the content goes to a temporary
  file beside it (``.NAME.tmp-PID``, with the old file's permission bits), is fsync'd, and
  is renamed over the name when complete. A failure or a kill leaves the old file (or no
  file) and at most the temporary one;
- a FIFO or a character / block device (``/dev/null``, a named pipe, a tape): opened and
  written as a stream - never truncated, renamed over or removed;
- a symlink is followed, as a shell's ``>`` does: the file it points to is written as
  above and the link stays a link; a dangling link creates the file it names;
- a directory or a socket is a UsageError (exit 2), as are a missing parent directory
  (MissingPathError) and a path that cannot be created (NotWritableError);
- a write that fails (``/dev/full``: No space left on device; EIO; a file size limit)
  is an OutputError naming the path and the reason (exit 1).

Nothing is ever renamed over a path that is not a regular file: the type is checked
again just before the rename.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from contextlib import contextmanager
from typing import Iterator

from ..errors import MissingPathError, NotWritableError, OutputError, UsageError
from .fsatomic import fsync_dir

_STREAMS = (stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK)
_USAGE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG, errno.ENOTDIR, errno.ELOOP,
                 errno.EISDIR, errno.ENXIO}


class _CountingRaw(io.RawIOBase):
    """A file descriptor written with os.write; counts the bytes and turns a failed write
    into OutputError (so that a library writing through it reports the output, not itself)."""

    def __init__(self, fd: int, name: str):
        super().__init__()
        self._fd, self.name, self.nbytes = fd, name, 0

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def tell(self) -> int:  # a stream cannot seek: the position is what was written
        return self.nbytes

    def write(self, data) -> int:
        try:
            n = os.write(self._fd, data)
        except OSError as e:
            raise write_error(self.name, e) from None
        self.nbytes += n
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


class Output:
    """An open output: ``file`` to write (binary, or text with ``text=True``); after the
    ``with`` block, ``nbytes`` written and ``path`` (the file written: a symlink resolved)."""

    def __init__(self, path: str, target: str, stream: bool, fd: int, text: bool, tmp: str | None):
        self.path, self.target, self.stream, self.tmp = path, target, stream, tmp
        self._raw = _CountingRaw(fd, path)
        buffered = io.BufferedWriter(self._raw, 1 << 20)
        self.file = io.TextIOWrapper(buffered, encoding="utf-8", newline="") if text else buffered

    @property
    def nbytes(self) -> int:
        return self._raw.nbytes

    def finish(self) -> None:
        """Flush; a regular file is fsync'd and renamed over its name."""
        self.file.flush()
        if self.stream:
            self.file.close()
            return
        try:
            os.fsync(self._raw.fileno())
        except OSError as e:
            raise write_error(self.path, e) from None
        self.file.close()
        _refuse_non_regular(self.target, self.path)
        os.replace(self.tmp, self.target)
        fsync_dir(os.path.dirname(self.target))

    def abort(self) -> None:
        """Close without keeping anything (the temporary file is removed)."""
        try:
            self.file.close()
        except (OSError, ValueError):
            pass
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass


@contextmanager
def open_output(path: str, *, text: bool = False) -> Iterator[Output]:
    """Open ``path`` for writing as the module docstring says; yields an `Output`."""
    out = _open(path, text)
    try:
        yield out
        out.finish()
    except BaseException:
        out.abort()
        raise


def write_output(path: str, data: str | bytes) -> None:
    """Write a whole text (or bytes) to ``path`` through `open_output`."""
    with open_output(path, text=isinstance(data, str)) as out:
        out.file.write(data)


def output_dir(path: str, what: str = "--out") -> str:
    """Make sure ``path`` is a directory to write files into (created with its parents)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{what} {path} exists and is not a directory; give a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise NotWritableError(f"cannot create directory {path} ({what}): {e.strerror or e}") from None
    return path


def check_output(path: str) -> None:
    """The errors `open_output` would raise for ``path`` before it writes (a directory, a
    socket, a missing parent directory), without writing anything."""
    _resolve(path)


def write_error(path: str, e: OSError) -> OutputError:
    err = OutputError(f"cannot write {path}: {e.strerror or e}")
    err.errno = e.errno
    return err


def _open(path: str, text: bool) -> Output:
    target, st = _resolve(path)
    if st is not None and stat.S_IFMT(st.st_mode) in _STREAMS:
        fd = _os_open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
        if stat.S_IFMT(os.fstat(fd).st_mode) not in _STREAMS:  # replaced between stat and open
            os.close(fd)
            raise UsageError(f"--out {path} changed type while it was being opened; retry")
        return Output(path, target, True, fd, text, None)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name[:200]}.tmp-{os.getpid()}")
    fd = _os_open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, where=path)
    if st is not None:
        os.fchmod(fd, stat.S_IMODE(st.st_mode))
    return Output(path, target, False, fd, text, tmp)


def _resolve(path: str) -> tuple[str, os.stat_result | None]:
    """(the path to write: a symlink followed, its stat or None when it does not exist)."""
    if not path:
        raise UsageError("--out is empty; give a file path")
    try:
        st = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise _open_error(path, e) from None
    if st is not None:
        kind = stat.S_IFMT(st.st_mode)
        if kind == stat.S_IFDIR:
            raise UsageError(f"--out {path} is a directory; give a file path (e.g. {os.path.join(path, 'out')})")
        if kind in _STREAMS:
            return path, st
        if kind != stat.S_IFREG:
            raise UsageError(f"--out {path} is {_kind_name(st)}; give a file path")
    target = os.path.realpath(path)  # a symlink (dangling too): the file it names
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise MissingPathError(f"cannot write {path}: directory {parent} does not exist; create it first "
                               f"(mkdir -p {parent})")
    return target, st


def _refuse_non_regular(target: str, path: str) -> None:
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--out {path} became {_kind_name(st)} while it was written; it was not replaced")


def _os_open(path: str, flags: int, where: str | None = None) -> int:
    try:
        return os.open(path, flags, 0o666)
    except OSError as e:
        raise _open_error(where or path, e) from None


def _open_error(path: str, e: OSError) -> Exception:
    if e.errno in _USAGE_ERRNOS:
        cls = NotWritableError if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else UsageError
        return cls(f"cannot write {path}: {e.strerror or e}")
    return write_error(path, e)


def _kind_name(st: os.stat_result) -> str:
    return {stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symlink"}.get(
        stat.S_IFMT(st.st_mode), "not a regular file")
