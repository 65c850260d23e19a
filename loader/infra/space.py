"""Refusing, before anything is written, a load that cannot fit on the dataset's filesystem.

`needed_bytes` is a *lower bound* of what the stores will hold for the records still to
load, so a refusal is always right (a load that passes may still run out of space later:
that is a clean StoreError, and the same command resumes after space is freed):

- fixed-size records, uncompressed (capnp; arrow without compression): records x record
  size - both formats store every record byte (capnp pads records to 8-byte words);
- arrow with lz4 / zstd: records x record size / 32768 - no codec beats zstd's run-length
  blocks (128 KiB in 4 bytes), so even a source of zeros needs that much;
- generated documents: n x the mean text size (1000 bytes, 90 % of it as a margin for
  small n), times log2(95)/8 when compressed (the text is uniform over 95 characters: no
  codec stores it in fewer bits);
- documents from a directory: n x 16 bytes (every document stores its id and created_at);
- stdin: unknown, nothing is checked.

`check_space` compares it with the free bytes of the filesystem that will hold the
dataset (``/dev/shm`` for mem://) and raises NoSpaceError naming both figures and the
filesystem's mount point. Reading only: nothing here writes.
"""

from __future__ import annotations

import math
import os

from ..errors import NoSpaceError

#: zstd stores a run-length block of 128 KiB in 4 bytes: no codec compresses more
MAX_COMPRESSION_RATIO = 32768
#: bits of entropy of a character of generated document text (uniform over 95 printable ones)
DOC_TEXT_BITS = math.log2(95)
DOC_FIXED_BYTES = 16  # id + created_at of every stored document


def needed_bytes(kind, src, records: int) -> int:
    """A lower bound of the bytes ``records`` records of ``src`` take in stores of ``kind``."""
    from ..sources.base import GenDocsSource, StreamSource

    if records <= 0 or isinstance(src, StreamSource):
        return 0
    if not kind.keyed:
        raw = records * kind.layout.record_size
        return raw if kind.compression == "none" else raw // MAX_COMPRESSION_RATIO
    if not isinstance(src, GenDocsSource):
        return records * DOC_FIXED_BYTES
    from ..docs.gen import TEXT_MAX

    text = records * TEXT_MAX / 2 * 0.9
    if kind.compression != "none":
        text *= DOC_TEXT_BITS / 8
    return int(text) + records * DOC_FIXED_BYTES


def check_space(root: str, needed: int, what: str) -> None:
    """Raise NoSpaceError if ``needed`` bytes exceed the free space where ``root`` lives."""
    if needed <= 0:
        return
    where = existing_ancestor(root)
    st = os.statvfs(where)
    free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    if needed > free:
        raise NoSpaceError(
            f"{what} needs at least {human(needed)}, {human(free)} free on {mount_point(where)}; "
            "free space or choose a dataset on another filesystem (nothing was written)")


def existing_ancestor(path: str) -> str:
    """``path`` or its nearest ancestor that exists."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def mount_point(path: str) -> str:
    """The mount point of the filesystem holding ``path``."""
    path = os.path.realpath(path)
    dev = os.stat(path).st_dev
    while path != "/":
        parent = os.path.dirname(path)
        if os.stat(parent).st_dev != dev:
            break
        path = parent
    return path


def human(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:,} bytes" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} EiB"
