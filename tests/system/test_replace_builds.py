"""`--replace` builds (``PARENT/.NAME.replacing``): through a symlinked dataset path, a
planted link at the build's name, and the build a killed --replace leaves, which every
writing command discards (maintain/builds.py, loading/replace.py). Real CLI, real SIGKILL."""

import os
import signal

import pytest
from helpers import run_cli

import loader

from .test_faults import gen_bytes, run_killed


def records(path) -> bytes:
    with loader.open(f"lmdb://{path}") as ds:
        assert ds.verify().ok
        return ds.read_records().tobytes()


def test_replace_through_a_symlink_replaces_the_target_in_place_and_keeps_the_link(tmp_path):
    target, link = tmp_path / "target", tmp_path / "link"
    assert run_cli("load", "gen://scidb96?n=1000", f"lmdb://{target}", "-q").returncode == 0
    link.symlink_to(target)
    (tmp_path / ".link.replacing").symlink_to(target)  # what a --replace that swapped the link left
    p = run_cli("load", "gen://scidb96?n=2000&start=10", f"lmdb://{link}", "--replace", "-q")
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert records(target) == records(link) == gen_bytes(10, 2000)
    assert sorted(os.listdir(tmp_path)) == ["link", "target"]  # no build left, no link swapped
    # an append made to the target directly, then a second --replace through the link
    assert run_cli("load", "gen://scidb96?n=5&start=2010", f"lmdb://{target}", "-q").returncode == 0
    assert records(link) == gen_bytes(10, 2005)
    p = run_cli("load", "gen://scidb96?n=300&start=50", f"lmdb://{link}", "--replace", "-q")
    assert p.returncode == 0, p.stderr
    assert records(target) == records(link) == gen_bytes(50, 300)
    assert sorted(os.listdir(tmp_path)) == ["link", "target"]
    # and the target's own --replace after that
    assert run_cli("load", "gen://scidb96?n=7", f"lmdb://{target}", "--replace", "-q").returncode == 0
    assert records(link) == gen_bytes(0, 7)


@pytest.mark.parametrize("command", ["replace", "append"])
def test_a_symlink_at_the_build_name_is_never_written_through(tmp_path, command):
    ds, elsewhere = tmp_path / "ds", tmp_path / "elsewhere"
    assert run_cli("load", "gen://scidb96?n=1000", f"lmdb://{ds}", "-q").returncode == 0
    assert run_cli("load", "gen://scidb96?n=500&start=3", f"lmdb://{elsewhere}", "-q").returncode == 0
    before = {n: (elsewhere / n).read_bytes() for n in ("manifest.json", "catalog/data.mdb")}
    (tmp_path / ".ds.replacing").symlink_to(elsewhere)
    args = ["--replace"] if command == "replace" else []
    p = run_cli("load", "gen://scidb96?n=40&start=9", f"lmdb://{ds}", *args, "-q")
    assert p.returncode == 0, p.stderr
    assert not os.path.lexists(tmp_path / ".ds.replacing")  # the link removed, never followed
    assert records(elsewhere) == gen_bytes(3, 500)
    assert {n: (elsewhere / n).read_bytes() for n in before} == before
    assert records(ds) == (gen_bytes(9, 40) if command == "replace" else gen_bytes(0, 1000) + gen_bytes(9, 40))


def test_what_bulkload_did_not_make_at_the_build_name_is_refused_not_deleted(tmp_path):
    ds = tmp_path / "ds"
    assert run_cli("load", "gen://scidb96?n=100", f"lmdb://{ds}", "-q").returncode == 0
    mine = tmp_path / ".ds.replacing"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for args in (["--replace"], []):
        p = run_cli("load", "gen://scidb96?n=10&start=100", f"lmdb://{ds}", *args, "-q")
        assert p.returncode == 2 and "not a bulkload build" in p.stderr and "Traceback" not in p.stderr
        assert (mine / "notes.txt").read_text() == "mine"
    assert records(ds) == gen_bytes(0, 100)


WRITERS = {  # (`run` starts with a load or an ingest step) ingest: of an empty directory
    "load": lambda tmp, ds: ["load", "gen://scidb96?n=3000", f"lmdb://{ds}", "-q"],
    "ingest": lambda tmp, ds: ["ingest", f"lmdb://{ds}", "--from", str(tmp / "empty"), "-q"],
    "compact": lambda tmp, ds: ["compact", f"lmdb://{ds}", "-q"],
    "finalize": lambda tmp, ds: ["finalize", f"lmdb://{ds}", "--dims", "i0:10,i1:1000", "-q"],
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writing_command_discards_a_killed_replace_build(tmp_path, writer):
    ds = tmp_path / "ds"
    (tmp_path / "empty").mkdir()
    assert run_cli("load", "gen://scidb96?n=3000", f"lmdb://{ds}", "-q").returncode == 0
    code, _ = run_killed(
        ["load", "gen://scidb96?n=4000&start=100", f"lmdb://{ds}", "--replace", "--batch-records", 500, "-q"],
        "checkpoint:3",
    )
    assert code == -signal.SIGKILL
    build = tmp_path / ".ds.replacing"
    assert build.is_dir()
    p = run_cli(*WRITERS[writer](tmp_path, ds))
    assert p.returncode == 0, p.stderr
    assert not os.path.lexists(build)
    assert records(ds) == gen_bytes(0, 3000)
