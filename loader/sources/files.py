"""Files of raw records: ``bulkload load FILE`` and each file of ``ingest``.

A file's size must be a whole number of records (a partial trailing record is an error
naming its byte offset). Workers ``pread`` their batches' records straight into the
serializer's buffer, exactly the records their run planned. A run fingerprints the part
of the file it loads (size plus a sampled xxh3: loading/file_runs.py decides from it that
a file grew - load its new records - or changed - refused); ``ingest`` hashes whole files
(`hash_file`). A character or block device, a socket, or a file on procfs/sysfs is
refused (`refuse_pseudo_file`): their sizes say nothing about what reading them yields.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from dataclasses import dataclass

import numpy as np
import xxhash

from ..errors import (
    MissingPathError,
    PartialRecordError,
    SourceTypeError,
    SourceVanishedError,
    UnreadableInputError,
)
from ..model.layouts import Layout
from .base import Source


@dataclass(frozen=True)
class FileSource(Source):
    """A file of raw records (its size a whole number of records)."""

    path: str

    by_extent = True  # a re-run loads only what was appended (loading/file_runs.py)
    raw_bytes = True

    @property
    def uri(self) -> str:
        return self.path

    def count(self, layout: Layout) -> int:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            raise MissingPathError(f"source file {self.path} does not exist") from None
        except PermissionError:
            raise MissingPathError(f"source file {self.path} is not readable (permission denied)") from None
        rs = layout.record_size
        if size % rs:
            n = size // rs
            raise PartialRecordError(self.path, n * rs, rs, size - n * rs)
        return size // rs

    def fingerprint(self, layout: Layout, records: int | None = None) -> str:
        """Of the file's first ``records`` records (default: all): their size in bytes plus
        an xxh3 of 16 sampled 64 KiB blocks of them (head, tail and evenly between).

        Cheap for any file size. Bytes after the prefix do not count, so a file that was
        only appended to keeps the fingerprint of what was loaded of it (file_runs.py); a
        file truncated or rewritten has another one - when the rewrite touches a sampled
        block (rewriting only bytes between the samples goes unnoticed). The prefix of a
        whole file is the file: fingerprints of earlier versions stay valid. (Directory
        ingestion hashes whole files instead.)
        """
        if records is None:
            records = self.count(layout)
        size = records * layout.record_size
        return f"size={size};sample={sample_digest(self.path, 0, size)}"

    def fill(self, records: np.ndarray, offset: int) -> None:
        read_exactly(self.path, records.view("u1").data, offset * records.dtype.itemsize)


def read_exactly(path: str, view: memoryview, pos: int) -> None:
    """Read ``len(view)`` bytes of ``path`` from byte ``pos`` into ``view`` (a file that
    ends sooner shrank: SourceVanishedError naming the byte offset)."""
    with open_input(path) as f:
        want, got = view.nbytes, 0
        while got < want:
            try:
                k = os.preadv(f.fileno(), [view[got:]], pos + got)
            except OSError as e:
                raise UnreadableInputError(
                    f"{path}: read failed at byte offset {pos + got}: {e.strerror or e}"
                ) from None
            if k == 0:
                raise SourceVanishedError(
                    f"{path}: the file shrank while being read (ended at byte offset "
                    f"{pos + got}, {pos + want} expected); nothing from it was committed"
                )
            got += k


def sample_digest(path: str, start: int, size: int) -> str:
    """xxh3 (hex) of 16 sampled 64 KiB blocks (head, tail and evenly between) of the
    ``size`` bytes of ``path`` from byte ``start``: cheap for any size."""
    h = xxhash.xxh3_64()
    block = 64 << 10
    with open_input(path) as f:
        offs = sorted({min(max(0, size - block), i * max(0, size - block) // 15) for i in range(16)})
        for off in offs:
            h.update(os.pread(f.fileno(), min(block, size - off), start + off))
    return h.hexdigest()


def open_input(path: str):
    """Open a source file for reading, with one-line errors naming it."""
    try:
        return open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise SourceVanishedError(
            f"{path}: the file vanished while being read; nothing from it was committed"
        ) from None
    except IsADirectoryError:
        raise UnreadableInputError(f"{path}: is a directory, not a file of records") from None
    except PermissionError:
        raise UnreadableInputError(
            f"{path}: not readable (permission denied); fix its permissions and re-run"
        ) from None
    except OSError as e:
        raise UnreadableInputError(f"{path}: cannot be opened: {e.strerror or e}") from None


def hash_file(path: str, chunk: int = 4 << 20) -> tuple[str, int]:
    """(xxh3-128 hex digest of the whole content, bytes read)."""
    h = xxhash.xxh3_128()
    n = 0
    with open_input(path) as f:
        buf = bytearray(chunk)
        mv = memoryview(buf)
        while True:
            try:
                k = f.readinto(mv)
            except OSError as e:
                raise UnreadableInputError(f"{path}: read failed at byte offset {n}: {e.strerror or e}") from None
            if not k:
                break
            h.update(mv[:k])
            n += k
    return h.hexdigest(), n


#: statfs f_type of the kernel's pseudo filesystems: their files report sizes (often 0 or
#: 4096) that have nothing to do with what reading them yields
PSEUDO_FILESYSTEMS = {
    0x9FA0: "procfs",
    0x62656572: "sysfs",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0x73636673: "securityfs",
    0x63677270: "cgroup2",
    0x27E0EB: "cgroup",
    0x62656570: "configfs",
    0xCAFE4A11: "bpf",
    0xDE5E81E4: "efivarfs",
}
_NOT_RECORDS = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def refuse_pseudo_file(ref: str) -> None:
    """Raise SourceTypeError unless ``ref`` can hold records: a device, a socket, or a
    file of procfs/sysfs (whose sizes lie) is refused. Regular files, directories and
    FIFOs pass (what each of those may hold is checked by its own reader)."""
    st = os.stat(ref)
    kind = _NOT_RECORDS.get(stat.S_IFMT(st.st_mode))
    if kind is None:
        magic = _fs_type(ref)
        fs = None if magic is None else PSEUDO_FILESYSTEMS.get(magic)
        kind = f"on {fs} (its sizes are not the bytes it yields)" if fs else None
    if kind is not None:
        raise SourceTypeError(
            f"source {ref} is {kind}, not a file of records; load a regular file, a FIFO "
            "or - (stdin), e.g. head -c BYTES DEVICE | bulkload load - DATASET"
        )


def _fs_type(path: str) -> int | None:
    """statfs(2) f_type of the filesystem holding ``path`` (None if unknown)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if libc.statfs(os.fsencode(path), buf) != 0:
        return None
    return int.from_bytes(buf.raw[: ctypes.sizeof(ctypes.c_long)], sys.byteorder) & 0xFFFFFFFF
