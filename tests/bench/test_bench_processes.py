"""Running what the benchmarks measure (loader/bench/processes.py, child.py): the peak RSS of
a whole process tree, child benchmark processes and their failures, bulkload-gen, and the
file chores between runs - real processes, real files, real /dev/full. Never timed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from loader.bench.child import CHILDREN
from loader.bench.processes import cached_fraction, child_cmd, evict, rm, run_child, run_gen, run_sampled, tail, tool

MIB = 1 << 20

# a grandchild (under sh) that holds 200 MiB of private memory for half a second
HOLD = (
    "import sys, time; b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); print('held'); "
    "sys.stdout.flush(); time.sleep(0.5)"
)


def test_peak_rss_of_the_whole_tree():
    p = run_sampled(["sh", "-c", f'{sys.executable} -c "{HOLD}"; echo done >&2'])
    assert (p.rc, p.out, p.err) == (0, "held\n", "done\n")
    assert p.peak_tree_anon_bytes >= 180 * MIB  # the grandchild's memory counts
    assert p.peak_tree_rss_bytes >= p.peak_tree_anon_bytes and p.wall_s > 0


def test_a_run_over_its_timeout_is_killed():
    with pytest.raises(RuntimeError, match=r"timed out after 1 s: sleep 30"):
        run_sampled(["sleep", "30"], timeout=1)


def test_after_runs_only_when_the_command_succeeded():
    ran = []
    run_sampled(["true"], after=lambda: ran.append("ok"))
    run_sampled(["false"], after=lambda: ran.append("failed"))
    assert ran == ["ok"]


def test_a_child_benchmark_gives_its_json_result():
    res, p = run_child("cfill", n=1000)
    assert set(res) == {"seconds"} and res["seconds"] > 0 and p.rc == 0 and p.peak_tree_rss_bytes > 0
    assert child_cmd("npload", path="x")[1:] == ["-m", "loader.bench.child", "npload", '{"path": "x"}']


def test_a_failing_child_is_a_runtime_error_with_its_stderr(tmp_path):
    missing = tmp_path / "missing.npy"
    with pytest.raises(RuntimeError, match=f"FileNotFoundError: .*{missing.name}"):
        run_child("npload", path=str(missing))
    with pytest.raises(RuntimeError, match=re.escape("usage: python -m loader.bench.child KIND")):
        run_child("no_such_kind")


@pytest.mark.parametrize("argv", [[], ["nope"]])
def test_the_child_module_without_a_known_kind_is_a_usage_error(argv):
    p = subprocess.run([sys.executable, "-m", "loader.bench.child", *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("usage: python -m loader.bench.child KIND [ARGS-JSON]; KIND is one of cfill, ")
    assert set(CHILDREN) <= set(p.stderr.split(": ")[-1].replace(",", " ").split())


def test_run_gen_writes_the_records_and_reports_a_failed_write(tmp_path):
    gen = tool("bulkload-gen")
    out = tmp_path / "recs.bin"
    with open(out, "wb") as o:
        run_gen(gen, 1234, o, fsync=True, start=10)
    assert out.stat().st_size == 1234 * 96
    with open("/dev/full", "wb") as o, pytest.raises(RuntimeError, match=r"bulkload-gen failed \(1\): .*No space"):
        run_gen(gen, 100_000, o)


def test_tool_finds_the_programs_next_to_the_interpreter():
    assert tool("bulkload") == str(Path(sys.executable).parent / "bulkload")
    with pytest.raises(
        RuntimeError, match=re.escape("no-such-program-x is not installed; run `pip install -e .` first")
    ):
        tool("no-such-program-x")


def test_rm_removes_files_and_trees_but_only_the_link_of_a_linked_directory(tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "data").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(keep)
    rm(link)
    assert not link.exists() and (keep / "data").read_text() == "x"
    tree = tmp_path / "tree" / "a"
    tree.mkdir(parents=True)
    (tree / "f").write_text("y")
    rm(tmp_path / "tree")
    rm(tmp_path / "never-existed")
    rm(keep / "data")
    assert not (tmp_path / "tree").exists() and list(keep.iterdir()) == []


def test_tail_is_the_last_lines_on_one_line():
    assert tail("a\n b \nc\nd\n\n") == "b | c | d"
    assert tail("only") == "only" and tail("") == ""


def test_cached_fraction_follows_the_page_cache(tmp_path):
    f = tmp_path / "recs.bin"
    f.write_bytes(b"r" * (64 << 20))
    evict(f)
    assert cached_fraction(f) == 0.0
    with open(f, "rb") as fh:
        fh.read(4 << 20)  # the first 16th (readahead - 8 MiB on this VM's disk - may add some more)
    assert 1 / 16 <= cached_fraction(f) < 1.0
    f.read_bytes()
    # all of it, but for the odd page the kernel (this VM's DAMON pageout) may drop at once
    # under a busy test run: 0.99976 (4 pages of 16,384) was seen once
    assert cached_fraction(f) > 0.99
    (tmp_path / "empty").write_bytes(b"")
    assert cached_fraction(tmp_path / "empty") == 1.0
