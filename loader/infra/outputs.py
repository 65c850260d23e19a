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
- ``-``, ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` and ``/proc/self/fd/N`` name one of
  this process's open descriptors: it is written as a stream, whatever it is open on (a
  pipe, a terminal, a file a shell's ``>`` opened) - never renamed over. ``-`` is standard
  output (`writes_stdout`: the command's status lines then go to stderr). Binary data is
  never written to a terminal (UsageError);
- a write that fails (``/dev/full``: No space left on device; EIO; a file size limit)
  is an OutputError naming the path and the reason (exit 1); a reader that went away (a
  closed pipe or FIFO, ``| head``) is a BrokenPipeError, which the CLI ends quietly with
  exit 0;
- a path that resolves (symlinks, ``..``, bind mounts: device + inode of each directory
  up to ``/``) into a dataset or a piece of one (paths.holds_bulkload_data), or into the
  datasets given as ``protect`` (the one the command reads), is an OutputInDatasetError
  (exit 2) before anything is written (`refuse_dataset_paths`).

Nothing is ever renamed over a path that is not a regular file: the type is checked
again just before the rename.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from ..errors import MissingPathError, NotWritableError, OutputError, OutputInDatasetError, UsageError
from .fsatomic import fsync_dir
from .paths import holds_bulkload_data

STDOUT = "standard output"  # how errors name it
_STREAMS = (stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK)
_DESCRIPTOR = re.compile(r"/dev/(?P<std>stdout|stderr)|/(?:dev|proc/self|proc/(?P<pid>\d+))/fd/(?P<fd>\d+)")
_USAGE_ERRNOS = {
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENAMETOOLONG,
    errno.ENOTDIR,
    errno.ELOOP,
    errno.EISDIR,
    errno.ENXIO,
}


class _CountingRaw(io.RawIOBase):
    """A file descriptor written with os.write; counts the bytes and turns a failed write
    into OutputError (so that a library writing through it reports the output, not itself)."""

    def __init__(self, fd: int, name: str, owned: bool = True):
        super().__init__()
        self._fd, self.name, self.nbytes, self._owned = fd, name, 0, owned

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def tell(self) -> int:  # a stream cannot seek: the position is what was written
        return self.nbytes

    def write(self, data) -> int:
        try:
            n = self._put(data)
        except BrokenPipeError:
            raise  # the reader went away: the CLI ends quietly (not a failure to report)
        except OSError as e:
            raise write_error(self.name, e) from None
        self.nbytes += n
        return n

    def _put(self, data) -> int:
        return os.write(self._fd, data)

    def close(self) -> None:
        if not self.closed:
            try:
                if self._owned:
                    os.close(self._fd)
            finally:
                super().close()


class _PythonStdout(_CountingRaw):
    """``sys.stdout`` where it is not descriptor 1 (a notebook, a test's capture): the
    bytes go to its binary buffer, or decoded as UTF-8 to it when it has none."""

    def __init__(self, f):
        super().__init__(-1, STDOUT, owned=False)
        self._f, self._bin = f, getattr(f, "buffer", None)
        self._text = codecs.getincrementaldecoder("utf-8")()

    def fileno(self) -> int:
        raise io.UnsupportedOperation("sys.stdout is not a descriptor here")

    def isatty(self) -> bool:
        return self._f.isatty()

    def _put(self, data) -> int:
        data = bytes(data)
        if self._bin is not None:
            self._bin.write(data)
        else:
            self._f.write(self._text.decode(data))
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                (self._bin or self._f).flush()
            finally:
                super().close()


class Output:
    """An open output: ``file`` to write (binary, or text with ``text=True``); after the
    ``with`` block, ``nbytes`` written and ``path`` (the file written: a symlink resolved)."""

    def __init__(
        self,
        path: str,
        target: str,
        stream: bool,
        fd: int | _CountingRaw,
        text: bool,
        tmp: str | None,
        name: str | None = None,
    ):
        self.path, self.target, self.stream, self.tmp = path, target, stream, tmp
        self._raw = fd if isinstance(fd, _CountingRaw) else _CountingRaw(fd, name or path)
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
        assert self.tmp is not None  # a file that is not a stream is written beside its name
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
def open_output(path: str, *, text: bool = False, protect: Iterable[str] = ()) -> Iterator[Output]:
    """Open ``path`` for writing as the module docstring says; yields an `Output`.
    ``protect``: the directories of the datasets the command reads (never written into)."""
    out = _open(path, text, tuple(protect))
    try:
        yield out
        out.finish()
    except BaseException:
        out.abort()
        raise


def write_output(path: str, data: str | bytes) -> None:
    """Write a whole text (or bytes) to ``path`` through `open_output`."""
    with open_output(path, text=isinstance(data, str)) as out:
        out.file.write(data)  # type: ignore[arg-type]  # text=True gives a text file exactly for a str


def descriptor_of(path: str) -> int | None:
    """The number of this process's open descriptor that ``path`` names (``-`` and
    ``/dev/stdout``: 1, ``/dev/stderr``: 2, ``/dev/fd/N``, ``/proc/self/fd/N``), else None."""
    if path == "-":
        return 1
    m = _DESCRIPTOR.fullmatch(os.path.normpath(path)) if path.startswith("/") else None
    if m is None or (m["pid"] is not None and int(m["pid"]) != os.getpid()):
        return None
    return {"stdout": 1, "stderr": 2}.get(m["std"]) if m["std"] else int(m["fd"])


def writes_stdout(path: str | None) -> bool:
    """Does an output to ``path`` land on standard output (None: the default, stdout)?
    Then the command's own lines (status, report) go to stderr."""
    if path is None or descriptor_of(path) == 1:
        return True
    try:
        a, b = os.stat(path), os.fstat(1)
    except (OSError, ValueError):
        return False
    return not stat.S_ISREG(a.st_mode) and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def refuse_dataset_paths(
    path: str, protect: Iterable[str] = (), *, what: str = "--out", directory: bool = False
) -> None:
    """OutputInDatasetError when writing ``path`` (or a temporary file beside it; with
    ``directory``, files inside it) would land in a dataset or a piece of one, or in one
    of the ``protect`` dataset directories: each directory from where the write lands up
    to ``/`` is looked at, and compared by device and inode with the protected ones and
    their sub-directories (a bind mount, a symlinked shard), never by name only."""
    if not path or descriptor_of(path) is not None:
        return  # an empty path is refused where it is opened
    target = os.path.realpath(path)  # symlinks and .. resolved, as the write will
    ids, names = _guarded(protect)
    d, hit = target if directory else os.path.dirname(target), None
    while True:
        try:
            st = os.stat(d)
        except OSError:
            st = None
        if d in names or (st is not None and ((st.st_dev, st.st_ino) in ids or holds_bulkload_data(d))):
            hit = d  # the outermost one is named: the dataset, not its shard
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    if hit is not None:
        via = "" if os.path.abspath(path) == target else f" (it resolves to {target})"
        raise OutputInDatasetError(
            f"{what} {path} is inside the dataset directory {hit}{via}; writing there "
            f"would destroy the dataset - write the output outside it"
        )


def _guarded(protect: Iterable[str]) -> tuple[set[tuple[int, int]], set[str]]:
    """(device, inode) of each protected directory and of the directories in it (two levels:
    shards, arrays, a shard's own), and their resolved names (for one not created yet)."""
    ids: set[tuple[int, int]] = set()
    names: set[str] = set()
    for root in protect:
        names.add(os.path.realpath(root))
        level = [root]
        for _ in range(3):
            below: list[str] = []
            for d in level:
                try:
                    st = os.stat(d)
                    if not stat.S_ISDIR(st.st_mode):
                        continue
                    ids.add((st.st_dev, st.st_ino))
                    with os.scandir(d) as it:
                        below.extend(e.path for e in it if e.is_dir())
                except OSError:
                    continue
            level = below
    return ids, names


def output_dir(path: str, what: str = "--out") -> str:
    """Make sure ``path`` is a directory to write files into (created with its parents)."""
    refuse_dataset_paths(path, what=what, directory=True)
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
    err.errno, err.output = e.errno, path
    return err


def stdout_failed(e: BaseException) -> bool:
    """Is ``e`` a failed write to standard output (then nothing more is written there)?"""
    return getattr(e, "output", None) == STDOUT


def _open(path: str, text: bool, protect: tuple[str, ...]) -> Output:
    fd_num = descriptor_of(path)
    if fd_num is not None:
        return _open_descriptor(path, fd_num, text)
    refuse_dataset_paths(path, protect)
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


def _open_descriptor(path: str, n: int, text: bool) -> Output:
    """One of this process's descriptors, written as a stream (a duplicate, so that
    closing the output leaves the descriptor open)."""
    name = {1: STDOUT, 2: "standard error"}.get(n, f"descriptor {n}")
    if n == 1 and not _is_fd1(sys.stdout):  # a notebook's, a capture's: write to it
        raw = _PythonStdout(sys.stdout)
        if not text and (raw._bin is None or sys.stdout.isatty()):
            raise UsageError(
                f"refusing to write binary data to {STDOUT} here (a terminal or a notebook); give a file path"
            )
        return Output(path, path, True, raw, text, None)
    if n == 1:
        try:
            sys.stdout.flush()  # what was printed before comes first
        except (OSError, ValueError):
            pass
    try:
        fd = os.dup(n)
    except OSError:
        raise UsageError(f"--out {path}: {name} is not open") from None
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise UsageError(f"--out {path}: {name} is open on a directory; give a file path")
        if not text and os.isatty(fd):
            raise UsageError(f"refusing to write binary data to a terminal ({name}); pipe it or use --out FILE")
    except BaseException:
        os.close(fd)
        raise
    return Output(path, path, True, fd, text, None, name=name)


def _is_fd1(f) -> bool:
    try:
        return f is not None and f.fileno() == 1
    except (AttributeError, OSError, ValueError):
        return False


def guard_stdout() -> None:
    """Make ``sys.stdout`` (the command's tables, reports, status lines) report a failed
    write as an OutputError naming standard output (a full disk, /dev/full) and a reader
    that went away as BrokenPipeError: the CLI's one line, never an unexpected error."""
    old = sys.stdout
    if not _is_fd1(old):
        return  # not the real descriptor (a test harness's capture)
    buffered = io.BufferedWriter(_CountingRaw(1, STDOUT, owned=False))
    sys.stdout = io.TextIOWrapper(
        buffered, encoding=old.encoding, errors=old.errors, line_buffering=bool(old.line_buffering)
    )


def silence_stdout() -> None:
    """After a reader went away: what is still buffered for stdout goes nowhere (so that
    the interpreter's flush at exit reports nothing)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


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
        raise MissingPathError(
            f"cannot write {path}: directory {parent} does not exist; create it first (mkdir -p {parent})"
        )
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
        stat.S_IFMT(st.st_mode), "not a regular file"
    )
