"""The ``--replace`` build beside a dataset (``PARENT/.NAME.replacing``, infra/paths.py):
what may stand at that name, and discarding a build whose writer died.

Only a directory that bulkload made is a build: one holding the build's ``.lock`` (a
--replace takes it right after creating the directory), or an empty one (killed in
between). A symlink at that name is never followed - neither read, written through nor
deleted through: it is removed itself (a link holds no data). Anything else (a file, a
FIFO, a directory of other files) is not bulkload's: it is refused, never deleted.

`discard_dead_build` is what every writing command but --replace does first, holding the
dataset lock (maintain/garbage.py `start_writing`): a build whose writer is dead (no job
holds its lock) is deleted; the dataset itself is untouched.

Crash behaviour: deletion is idempotent; a build half deleted is deleted by the next writer.
"""

from __future__ import annotations

import os
import shutil
import stat

from ..errors import NotWritableError
from ..infra import logs
from ..infra.lock import LOCK, is_held
from ..infra.paths import replacing_sibling


def build_dir(root: str) -> str | None:
    """The path of the --replace build of the dataset at ``root`` when one is there (a
    directory bulkload made), else None; a symlink at that name is removed unfollowed,
    anything else that bulkload did not make is refused (NotWritableError)."""
    drop_link_beside_link(root)
    path = replacing_sibling(root)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        os.unlink(path)  # the link only: what it points to is never touched
        return None
    if not stat.S_ISDIR(st.st_mode) or not _made_by_bulkload(path):
        what = "a directory of other files" if stat.S_ISDIR(st.st_mode) else "not a directory"
        raise NotWritableError(
            f"{path} is where a --replace of {root} builds, but it is {what}, not a bulkload build; "
            "move it away (bulkload never deletes what it did not make) and retry"
        )
    return path


def drop_link_beside_link(root: str) -> None:
    """A dataset path that is a symlink builds beside its target; a symlink at the link's
    own build name (``.LINK.replacing -> target``, left by a --replace of versions that
    swapped the link) is removed, unfollowed."""
    beside = replacing_sibling(root, resolve=False)
    if beside != replacing_sibling(root) and os.path.islink(beside):
        os.unlink(beside)


def _made_by_bulkload(path: str) -> bool:
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return not names or (LOCK in names and stat.S_ISREG(os.lstat(os.path.join(path, LOCK)).st_mode))


def discard_build(path: str) -> None:
    """Delete a build directory (`build_dir`); never follows a symlink (rmtree unlinks
    links inside; a link at ``path`` itself is unlinked)."""
    if os.path.islink(path):
        os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def discard_dead_build(root: str, progress: str = "none") -> str | None:
    """Delete the --replace build of the dataset at ``root`` if its writer is dead (call
    with the dataset lock held); returns the path deleted, or None."""
    path = build_dir(root)
    if path is None or is_held(path):
        return None
    if progress != "none":
        logs.event(
            f"discarding an unfinished --replace of {root} ({path}): its job is gone", level="warning", build=path
        )
    discard_build(path)
    return path
