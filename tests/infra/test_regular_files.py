"""infra/regular.py: files inside a dataset are opened only when they are regular files of
plausible size - a FIFO, a device node, a link to /dev/zero or a directory is refused
without blocking, and a missing file is FileNotFoundError as for open()."""

from __future__ import annotations

import os
import stat

import pytest

from loader.errors import DamagedDatasetError
from loader.infra.regular import open_regular, read_regular, require_regular, require_regular_entries
from tests.dask_engine.cluster import run_in_thread

SPECIAL = {
    "fifo": (lambda p: os.mkfifo(p), "a FIFO"),
    "dev-zero-link": (lambda p: os.symlink("/dev/zero", p), "a character device"),
    "char-device": (lambda p: os.mknod(p, 0o600 | stat.S_IFCHR, os.makedev(1, 5)), "a character device"),
    "directory": (lambda p: os.mkdir(p), "a directory"),
}


def _in_thread(fn, timeout=5.0):
    """fn()'s result or exception; fails (instead of hanging the suite) if fn blocks."""
    t, out = run_in_thread(fn)
    t.join(timeout)
    assert not t.is_alive(), "blocked on a special file"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_a_special_file_is_refused_without_blocking(tmp_path, kind):
    make, words = SPECIAL[kind]
    p = tmp_path / "manifest.json"
    make(p)
    try:
        calls = [lambda: open_regular(str(p)), lambda: read_regular(str(p)), lambda: require_regular(str(p))]
        if kind != "directory":  # a RocksDB shard's sub-directories are its own business
            calls.append(lambda: require_regular_entries(str(tmp_path)))
        for fn in calls:
            with pytest.raises(DamagedDatasetError, match=words) as e:
                _in_thread(fn)
            assert "not a regular file" in str(e.value) and "nothing was read or written" in str(e.value)
    finally:
        os.rmdir(p) if kind == "directory" else os.unlink(p)


def test_a_regular_file_reads_and_a_missing_one_is_file_not_found(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"{}")
    assert read_regular(str(p)) == b"{}" and require_regular(str(p))
    fd = open_regular(str(p))
    try:
        assert os.get_blocking(fd) and os.read(fd, 10) == b"{}"
    finally:
        os.close(fd)
    os.symlink(str(tmp_path / "gone"), tmp_path / "dangling")
    for missing in (tmp_path / "none", tmp_path / "dangling"):
        with pytest.raises(FileNotFoundError):
            read_regular(str(missing))
        assert require_regular(str(missing)) is False


def test_a_file_larger_than_its_cap_is_refused(tmp_path):
    p = tmp_path / "big.json"
    with open(p, "wb") as f:
        f.truncate(1 << 20)  # sparse
    with pytest.raises(DamagedDatasetError, match="more than the 1,024"):
        read_regular(str(p), 1024)
    assert len(read_regular(str(p), 1 << 20)) == 1 << 20
