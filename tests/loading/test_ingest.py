"""`bulkload ingest`: exactly once per file, name order, bad files, files being written."""

import json
import os
import re

import pytest
from helpers import run_cli

import loader
import loader.loading.ingest as ingest_mod
import loader.loading.ingest_scan as scan_mod
import loader.sources.files as sources_mod
from loader.errors import ChangedInputError, SourceVanishedError, UnreadableInputError
from loader.loading.ingest import ingest
from loader.model.layouts import get_layout
from loader.sources.generators import generate

LAY = get_layout("scidb96")
RS = LAY.record_size


def gen_bytes(start, n):
    return generate(LAY, start, n, impl="c").tobytes()


@pytest.fixture
def incoming(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    return d


def put(d, name, start, n, tail=b""):
    (d / name).write_bytes(gen_bytes(start, n) + tail)


def records(uri):
    with loader.open(uri) as ds:
        assert ds.verify().ok
        return ds.read_records().tobytes()


def test_ingest_each_file_once_in_name_order(tmp_path, incoming, store_uri):
    put(incoming, "002.bin", 1200, 800)
    put(incoming, "001.bin", 0, 1200)
    put(incoming, "003.bin", 2000, 0)  # empty: fine, 0 records
    put(incoming, "notes.txt", 0, 3)  # not matching the pattern
    (incoming / ".004.bin").write_bytes(gen_bytes(0, 5))  # being written under a dot name
    p = run_cli(
        "ingest", store_uri, "--from", incoming, "--pattern", "*.bin", "--batch-records", 500, "--shards", 2, "--json"
    )
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert [f["name"] for f in rep["files"]] == ["001.bin", "002.bin", "003.bin"]
    assert rep["records"] == 2000 and rep["status"] == "done" and rep["run_id"]
    assert records(store_uri) == gen_bytes(0, 2000)
    # a re-run finds nothing new and writes nothing
    p = run_cli("ingest", store_uri, "--from", incoming, "--pattern", "*.bin")
    assert p.returncode == 0 and "nothing new" in p.stdout and "3 file(s) already ingested" in p.stdout
    # a new file later: appended, numbering continues
    put(incoming, "005.bin", 2000, 700)
    rep = ingest(store_uri, str(incoming), pattern="*.bin")
    assert [f["name"] for f in rep.files] == ["005.bin"] and rep.already == 3
    assert records(store_uri) == gen_bytes(0, 2700)
    with loader.open(store_uri) as ds:
        files = ds.manifest.files
        assert sorted(files) == ["001.bin", "002.bin", "003.bin", "005.bin"]
        assert files["002.bin"]["size"] == 800 * RS and files["002.bin"]["first_record"] == 1200
        assert len(files["001.bin"]["xxh3"]) == 32
        kinds = [(r["kind"], r["status"]) for r in ds.info()["runs"]]
        assert kinds == [("ingest", "done"), ("ingest", "done")]


def test_changed_file_is_refused(tmp_path, incoming):
    uri = f"lmdb://{tmp_path}/ds"
    put(incoming, "a.bin", 0, 100)
    ingest(uri, str(incoming))
    put(incoming, "a.bin", 1, 100)  # same name and size, other content
    os.utime(incoming / "a.bin", ns=(1, 1))
    p = run_cli("ingest", uri, "--from", incoming)
    assert p.returncode == 1
    assert "a.bin: this file was already ingested (run " in p.stderr and "its content changed" in p.stderr
    put(incoming, "a.bin", 0, 50)
    with pytest.raises(ChangedInputError, match=r"its size changed \(9600 -> 4800 bytes\)"):
        ingest(uri, str(incoming))
    put(incoming, "b.bin", 100, 10)
    rep = ingest(uri, str(incoming), on_bad_file="skip")
    assert [s["name"] for s in rep.skipped] == ["a.bin"] and [f["name"] for f in rep.files] == ["b.bin"]
    assert records(uri) == gen_bytes(0, 110)


def test_partial_trailing_record_fail_and_skip(tmp_path, incoming):
    uri = f"lmdb://{tmp_path}/ds"
    put(incoming, "a.bin", 0, 100)
    put(incoming, "b.bin", 100, 10, tail=b"xyz")
    put(incoming, "c.bin", 110, 10)
    p = run_cli("ingest", uri, "--from", incoming)
    assert p.returncode == 1
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("bulkload: error")]
    assert lines == [lines[0]] and "b.bin: partial record at byte offset 960 (3 trailing bytes" in lines[0]
    assert records(uri) == gen_bytes(0, 100)  # the files before it are in, nothing of b or c
    with loader.open(uri) as ds:
        assert ds.info()["runs"][-1]["status"] == "failed"
    rep = json.loads(run_cli("ingest", uri, "--from", incoming, "--on-bad-file", "skip", "--json").stdout)
    assert rep["skipped"] == [{"name": "b.bin", "reason": rep["skipped"][0]["reason"]}]
    assert "byte offset 960" in rep["skipped"][0]["reason"]
    assert [f["name"] for f in rep["files"]] == ["c.bin"]
    assert records(uri) == gen_bytes(0, 100) + gen_bytes(110, 10)
    # fixed later: loaded then (after c.bin)
    put(incoming, "b.bin", 100, 10)
    assert [f["name"] for f in ingest(uri, str(incoming)).files] == ["b.bin"]


def test_unreadable_file(tmp_path, incoming, monkeypatch):
    uri = f"lmdb://{tmp_path}/ds"
    put(incoming, "a.bin", 0, 10)
    put(incoming, "b.bin", 10, 10)
    real_open = open

    def deny(path, *a, **k):  # root can read anything: simulate EACCES for one file
        if str(path).endswith("b.bin"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(sources_mod, "open", deny, raising=False)
    with pytest.raises(UnreadableInputError, match=r"b.bin: not readable \(permission denied\)"):
        ingest(uri, str(incoming))
    assert records(uri) == gen_bytes(0, 10)
    rep = ingest(uri, str(incoming), on_bad_file="skip")
    assert rep.skipped[0]["name"] == "b.bin" and "not readable" in rep.skipped[0]["reason"]


def test_file_vanishing_mid_read(tmp_path, incoming, monkeypatch):
    uri = f"lmdb://{tmp_path}/ds"
    put(incoming, "a.bin", 0, 10)
    put(incoming, "b.bin", 10, 2000)
    put(incoming, "c.bin", 2010, 10)
    real_hash = scan_mod.hash_file

    def vanish(path, *a):
        if path.endswith("b.bin") and os.path.exists(path):
            os.unlink(path)
        return real_hash(path, *a)

    monkeypatch.setattr(scan_mod, "hash_file", vanish)
    with pytest.raises(SourceVanishedError, match=re.escape("b.bin: the file vanished while being read")):
        ingest(uri, str(incoming))
    assert records(uri) == gen_bytes(0, 10)
    # vanishing while the workers read it (after it was fingerprinted)
    monkeypatch.setattr(scan_mod, "hash_file", real_hash)
    put(incoming, "b.bin", 10, 2000)
    real_plan = ingest_mod.number_files

    def plan_then_delete(*a):
        out = real_plan(*a)
        if (incoming / "b.bin").exists():
            os.unlink(incoming / "b.bin")
        return out

    monkeypatch.setattr(ingest_mod, "number_files", plan_then_delete)
    p_err = None
    try:
        ingest(uri, str(incoming), batch_records=500)
    except SourceVanishedError as e:
        p_err = str(e)
    assert p_err and "b.bin: the file vanished while being read" in p_err
    assert records(uri) == gen_bytes(0, 10)
    put(incoming, "b.bin", 10, 2000)
    rep = ingest(uri, str(incoming), on_bad_file="skip", batch_records=500)
    assert rep.skipped[0]["name"] == "b.bin" and [f["name"] for f in rep.files] == ["c.bin"]
    assert records(uri) == gen_bytes(0, 10) + gen_bytes(2010, 10)


def test_file_still_being_written_is_left_for_the_next_run(tmp_path, incoming, monkeypatch):
    uri = f"lmdb://{tmp_path}/ds"
    put(incoming, "a.bin", 0, 10)
    put(incoming, "b.bin", 10, 10)
    put(incoming, "c.bin", 20, 10)
    real_hash = scan_mod.hash_file

    def grow(path, *a):
        out = real_hash(path, *a)
        if path.endswith("b.bin") and os.path.getsize(path) < 20 * RS:
            with open(path, "ab") as f:  # the producer appends while we read
                f.write(gen_bytes(20, 10))
        return out

    monkeypatch.setattr(scan_mod, "hash_file", grow)
    rep = ingest(uri, str(incoming))
    assert [f["name"] for f in rep.files] == ["a.bin", "c.bin"]
    assert rep.deferred[0]["name"] == "b.bin" and "still being written" in rep.deferred[0]["reason"]
    monkeypatch.setattr(scan_mod, "hash_file", real_hash)
    rep = ingest(uri, str(incoming))
    assert [f["name"] for f in rep.files] == ["b.bin"] and rep.records == 20


def test_ingest_usage_errors(tmp_path):
    p = run_cli("ingest", f"lmdb://{tmp_path}/ds", "--from", tmp_path / "nope")
    assert p.returncode == 2 and "directory" in p.stderr and "does not exist" in p.stderr
    p = run_cli("ingest", f"lmdb://{tmp_path}/ds", "--from", tmp_path, "--on-bad-file", "ignore")
    assert p.returncode == 2 and "--on-bad-file must be fail or skip" in p.stderr


def test_ingest_json_logs(tmp_path, incoming):
    put(incoming, "a.bin", 0, 10)
    p = run_cli("--log-format", "json", "ingest", f"lmdb://{tmp_path}/ds", "--from", incoming)
    assert p.returncode == 0, p.stderr
    events = [json.loads(ln) for ln in p.stderr.splitlines() if ln.startswith("{")]
    assert events and all({"ts", "level", "msg"} <= set(e) for e in events)
    assert events[-1]["event"] == "done" and events[-1]["files"] == 1


def test_ingest_from_a_file_says_it_is_a_file_not_a_directory(tmp_path, incoming):
    put(incoming, "a.bin", 0, 10)
    for layout in ((), ("--layout", "docs")):
        p = run_cli("ingest", f"lmdb://{tmp_path}/ds", "--from", incoming / "a.bin", *layout)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert f"--from {incoming / 'a.bin'} is a file, not a directory" in p.stderr, p.stderr
        assert "does not exist" not in p.stderr and not os.path.exists(tmp_path / "ds")


def test_ingest_summary_names_the_layout_of_the_records(tmp_path, incoming):
    put(incoming, "a.bin", 0, 10)
    p = run_cli("ingest", f"lmdb://{tmp_path}/ds", "--from", incoming)
    assert p.returncode == 0 and "10 records of layout scidb96" in p.stdout, p.stderr
    put(incoming, "b.bin", 10, 10)
    rep = ingest(f"lmdb://{tmp_path}/ds", str(incoming))
    assert rep.layout == "scidb96" and rep.to_dict()["layout"] == "scidb96"
