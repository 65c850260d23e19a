"""Refusing, before anything is written, a load that cannot fit on the dataset's filesystem.

What a load needs is a *lower bound* of what the stores will hold for the records still
to load, given by the record kind (`Kind.min_stored_bytes`: fixed-size records x record
size, or / 32768 when compressed; documents: their text's entropy), so a refusal is
always right (a load that passes may still run out of space later: that is a clean
StoreError, and the same command resumes after space is freed). Streams: unknown,
nothing is checked.

`check_space` compares it with the free bytes of the filesystem that will hold the
dataset (``/dev/shm`` for mem://) and raises NoSpaceError naming both figures and the
filesystem's mount point. Reading only: nothing here writes.
"""

from __future__ import annotations

import os

from ..errors import NoSpaceError


def check_space(root: str, needed: int, what: str) -> None:
    """Raise NoSpaceError if ``needed`` bytes exceed the free space where ``root`` lives."""
    if needed <= 0:
        return
    where = existing_ancestor(root)
    free = free_bytes(where)
    if needed > free:
        raise NoSpaceError(
            f"{what} needs at least {human(needed)}, {human(free)} free on {mount_point(where)}; "
            "free space or choose a dataset on another filesystem (nothing was written)"
        )


def free_bytes(path: str) -> int:
    """The bytes this process may still write on the filesystem holding ``path`` (root
    may use the blocks reserved for it)."""
    st = os.statvfs(path)
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize


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


def human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:,} bytes" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} EiB"
