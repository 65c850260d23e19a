"""Streams: stdin (``-``), a FIFO, /dev/stdin, /dev/fd/N, /proc/self/fd/N.

A stream cannot be split or replayed: the coordinator reads it once into shared memory
(loading/stream.py), every load of it is a new run (never "already loaded", never
resumed), and nothing of a failed load of it is committed: re-run the whole producer
pipeline. Its URI is the path.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import UnreadableInputError
from ..model.layouts import Layout
from .base import Source
from .files import open_input

#: paths that name one of the coordinator's open file descriptors (group 1/2: its number)
STREAM_PATH = re.compile(r"/dev/stdin|/dev/fd/(\d+)|/proc/self/fd/(\d+)")


@dataclass(frozen=True)
class StreamSource(Source):
    """A stream, read once by the coordinator (streams.py): ``-`` (stdin), a FIFO, or
    /dev/stdin, /dev/fd/N, /proc/self/fd/N (whatever the descriptor is: pipe, socket,
    file). Its URI is the path. It cannot be recognised or replayed: every load of it is
    a new run, never "already loaded", never resumed."""

    path: str = "-"

    replayable = False
    raw_bytes = True

    @property
    def uri(self) -> str:
        return self.path

    @property
    def name(self) -> str:
        """How errors name it."""
        return "<stdin>" if self.path == "-" else self.path

    def count(self, layout: Layout) -> None:
        return None

    def fingerprint(self, layout: Layout) -> None:
        return None

    def open(self, stdin=None) -> tuple:
        """(a binary stream with readinto, whether the caller closes it)."""
        if self.path == "-" and stdin is not None:
            return stdin, False
        fd = stream_fd(self.path)
        if fd is not None:  # this process's descriptor, whatever it is (open() fails on a socket)
            try:
                return os.fdopen(os.dup(fd), "rb", buffering=0), True
            except OSError as e:
                raise UnreadableInputError(f"{self.name}: cannot be read: {e.strerror or e}") from None
        return open_input(self.path), True  # a FIFO: waits for a writer, as `cat FIFO` does


def stream_fd(path: str) -> int | None:
    """The file descriptor ``-`` or a /dev/stdin-like path names, else None."""
    if path == "-":
        return 0
    m = STREAM_PATH.fullmatch(path)
    return None if m is None else int(m.group(1) or m.group(2) or 0)
