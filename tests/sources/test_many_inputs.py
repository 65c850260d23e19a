"""Several inputs in one run: ``bulkload load a.bin b.bin c.bin DATASET``, globs, FIFOs.

- Files (raw, .npy, Parquet), gen:// ranges, given as arguments, a list in Python or a
  quoted glob: one run, the records numbered in the order given, byte-identical to the
  raw-file load of their concatenation, on lmdb, rocksdb and mem://, however split.
- Each input is recognised on a re-run as one source would be: a re-run with one more
  file loads only that file; an input loaded alone before is left out; one that grew
  loads its new records; one that changed is refused (nothing written). A crashed run
  keeps the inputs it committed and is resumed (more inputs given: appended).
- FIFOs, one or many, each fed by a real writer process (`bulkload-gen`, `bulkload
  generate`): each pipe read in parallel, every record loaded once, a pipe's own records
  in its order; every load a new run; a writer that dies mid-record: one line naming the
  pipe and the byte offset, exit 1, nothing committed.
- Mixing FIFOs with files, an input given twice, inputs of different layouts, a glob
  that matches nothing, a partial record in one file: one line, exit 1 or 2, nothing
  written.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import run_cli, tool

import loader

from .source_helpers import LAY, RS, error_line, records, snapshot


def write_raw(path, start: int, n: int) -> str:
    path.write_bytes(records(start, n).tobytes())
    return str(path)


def runs_of(uri):
    with loader.open(uri) as ds:
        return ds.info()["runs"]


PARTS = [(0, 1234), (50_000, 1), (7, 2999), (1_000_000, 0), (123, 1000)]  # (start, n) of each input


def raw_parts(tmp_path, parts=PARTS) -> list[str]:
    d = tmp_path / "parts"
    d.mkdir(exist_ok=True)
    return [write_raw(d / f"p{i:02d}.bin", start, n) for i, (start, n) in enumerate(parts)]


def concatenated(tmp_path, parts=PARTS) -> str:
    """A raw file of the records of ``parts``, one after the other."""
    path = tmp_path / "all.bin"
    path.write_bytes(snapshot_of_concat(tmp_path, parts))
    return str(path)


def snapshot_of_concat(tmp_path, parts=PARTS) -> bytes:
    return b"".join(records(s, n).tobytes() for s, n in parts)


# --- several files in one run -------------------------------------------------------------------


SPLITS = {"lmdb": (2, 2, 500), "rocksdb": (1, 3, 1000), "mem": (2, 5, 77)}  # workers, shards, batch size


def test_many_files_load_like_their_concatenation(tmp_path, store_uri):
    workers, shards, batch = SPLITS[store_uri.split(":")[0]]
    files = raw_parts(tmp_path)
    ref = f"lmdb://{tmp_path}/ref"
    opts = dict(workers=workers, shards=shards, batch_records=batch)
    loader.load(concatenated(tmp_path), ref, **opts)
    p = run_cli("load", *files, store_uri, "--workers", workers, "--shards", shards, "--batch-records", batch, "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["records"] == sum(n for _, n in PARTS) and rep["status"] == "loaded"
    rows, data = snapshot(store_uri)
    assert data == snapshot(ref)[1]
    # each input is its own segment: batches never straddle two files
    assert len(rows) == sum(-(-n // batch) for _, n in PARTS)
    run = runs_of(store_uri)[-1]
    assert [e["source"] for e in run["inputs"]] == files and all(e["committed"] for e in run["inputs"])


def test_a_glob_in_the_cli_and_in_python_and_a_list_in_python(tmp_path):
    files = raw_parts(tmp_path)
    (tmp_path / "parts" / ".hidden.bin").write_bytes(b"x")  # dotfiles and directories are left out
    (tmp_path / "parts" / "sub.bin").mkdir()
    expected = snapshot_of_concat(tmp_path)
    p = run_cli("load", str(tmp_path / "parts" / "*.bin"), f"lmdb://{tmp_path}/a", "--batch-records", 500, "-q")
    assert p.returncode == 0, p.stderr
    assert snapshot(f"lmdb://{tmp_path}/a")[1] == expected
    assert loader.load(str(tmp_path / "parts" / "p0[0-4].bin"), f"lmdb://{tmp_path}/b").records == 5234
    assert snapshot(f"lmdb://{tmp_path}/b")[1] == expected
    loader.load(list(reversed(files)), f"lmdb://{tmp_path}/c")  # the order given
    assert snapshot(f"lmdb://{tmp_path}/c")[1] == b"".join(records(s, n).tobytes() for s, n in reversed(PARTS))


def test_files_npy_parquet_and_gen_in_one_run(tmp_path):
    a = write_raw(tmp_path / "a.bin", 0, 700)
    np.save(tmp_path / "b.npy", records(700, 900))
    pq.write_table(pa.table({n: records(1600, 650)[n] for n in LAY.names}), tmp_path / "c.parquet", row_group_size=200)
    uri = f"rocksdb://{tmp_path}/ds"
    rep = loader.load(
        [a, str(tmp_path / "b.npy"), "gen://scidb96?n=350&start=2250", str(tmp_path / "c.parquet")],
        uri,
        workers=2,
        shards=2,
        batch_records=300,
    )
    assert rep.records == 2600
    expected = (
        records(0, 700).tobytes()
        + records(700, 900).tobytes()
        + records(2250, 350).tobytes()
        + records(1600, 650).tobytes()
    )
    assert snapshot(uri)[1] == expected


# --- each input recognised on a re-run -----------------------------------------------------------


def test_a_rerun_with_one_more_file_loads_only_that_file(tmp_path):
    files = raw_parts(tmp_path)
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(files[:3], uri, batch_records=500)
    p = run_cli("load", *files, uri, "--json")
    rep = json.loads(p.stdout)
    assert p.returncode == 0 and rep["records"] == 1000 and rep["status"] == "loaded"  # p03 is empty, p04 new
    assert snapshot(uri)[1] == snapshot_of_concat(tmp_path)
    for again in (files, files[2:], files[1:2]):  # all of them, some, one alone: nothing to do
        p = run_cli("load", *again, uri, "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["status"] == "already-loaded", p.stderr
    assert len(runs_of(uri)) == 2


def test_inputs_loaded_alone_before_are_left_out_and_a_grown_one_loads_its_new_records(tmp_path):
    a, b, c = (write_raw(tmp_path / f"{x}.bin", s, 600) for x, s in zip("abc", (0, 600, 1200), strict=True))
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(b, uri, batch_records=250)
    loader.load("gen://scidb96?n=100&start=9000", uri)
    with open(a, "ab") as f:  # nothing of a was loaded: all of it goes
        f.write(records(600, 0).tobytes())
    with open(b, "ab") as f:  # b grew since it was loaded: its 150 new records go
        f.write(records(5000, 150).tobytes())
    rep = loader.load([a, b, c, "gen://scidb96?n=100&start=9000"], uri)
    assert rep.records == 600 + 150 + 600
    expected = (
        records(600, 600).tobytes()
        + records(9000, 100).tobytes()
        + records(0, 600).tobytes()
        + records(5000, 150).tobytes()
        + records(1200, 600).tobytes()
    )
    assert snapshot(uri)[1] == expected
    entries = runs_of(uri)[-1]["inputs"]
    assert [(e["source_offset"], e["total"]) for e in entries] == [(0, 600), (600, 150), (0, 600)]


def test_a_changed_input_refuses_the_run_and_new_run_loads_all_again(tmp_path):
    files = raw_parts(tmp_path, [(0, 500), (500, 500)])
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(files, uri)
    before = snapshot(uri)
    write_raw(tmp_path / "parts" / "p01.bin", 9999, 500)
    error_line(run_cli("load", *files, uri), 1, f"{files[1]} changed since run", "--new-run")
    assert snapshot(uri) == before
    assert loader.load(files, uri, new_run=True).records == 1000


def test_a_crashed_run_keeps_its_committed_inputs_and_resumes_with_one_more(tmp_path):
    parts = [(0, 1500), (1500, 1500), (3000, 1500), (4500, 1500)]
    files = raw_parts(tmp_path, parts)
    uri, ref = f"lmdb://{tmp_path}/ds", f"lmdb://{tmp_path}/ref"
    extra = write_raw(tmp_path / "parts" / "p09.bin", 6000, 321)
    loader.load([*files, extra], ref, batch_records=100, shards=2, workers=2)
    env = dict(os.environ, BULKLOAD_FAULT="checkpoint:40", BULKLOAD_CHECKPOINT_SECONDS="0")
    p = subprocess.run(
        [tool("bulkload"), "load", *files, uri, "--batch-records", "100", "--shards", "2", "-q"],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == -signal.SIGKILL
    run = runs_of(uri)[-1]
    committed = [e["source"] for e in run["inputs"] if e["committed"]]
    assert run["status"] == "interrupted" and 1 <= len(committed) < 4 and committed == files[: len(committed)]
    with loader.open(uri) as ds:  # what is committed is whole inputs
        assert ds.read_records().tobytes() == snapshot_of_concat(tmp_path, parts[: len(committed)])
    p = run_cli("load", *files, extra, uri, "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["status"] == "resumed" and rep["run_id"] == run["id"] and rep["resumed_records"] > 0
    assert snapshot(uri) == snapshot(ref)


def test_a_worker_killed_during_a_run_of_several_inputs_says_what_was_committed(tmp_path):
    files = raw_parts(tmp_path, [(0, 1000), (1000, 1000), (2000, 1000)])
    uri = f"lmdb://{tmp_path}/ds"
    env = {"BULKLOAD_FAULT": "w0.flush:8", "BULKLOAD_CHECKPOINT_SECONDS": "0"}
    p = run_cli("load", *files, uri, "--batch-records", 100, "--shards", 2, "--workers", 2, "-q", env=env)
    line = error_line(p, 1, "worker 0", "was killed by signal", "of its 3 inputs", "re-run the same command")
    committed = [e for e in runs_of(uri)[-1]["inputs"] if e["committed"]]
    assert (
        f"{len(committed)} of its 3 inputs were committed" if committed else "none of its 3 inputs was committed"
    ) in line
    p = run_cli("load", *files, uri, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["status"] == "resumed", p.stderr
    assert snapshot(uri)[1] == snapshot_of_concat(tmp_path, [(0, 1000), (1000, 1000), (2000, 1000)])


# --- FIFOs, each read in parallel ------------------------------------------------------------------


def fifo_writer(fifo: str, start: int, n: int, how: str) -> subprocess.Popen:
    """A real writer process on a FIFO: `bulkload-gen N START > FIFO` or `bulkload generate`."""
    if how == "gen":
        cmd = f'exec "$0" {n} {start} > "$1"'
        return subprocess.Popen(["sh", "-c", cmd, tool("bulkload-gen"), fifo])
    return subprocess.Popen([tool("bulkload"), "generate", str(n), "--start", str(start), "--out", fifo])


@pytest.mark.parametrize(
    "scheme,ranges",
    [
        ("lmdb", [(0, 2500), (1_000_000, 3100)]),
        ("rocksdb", [(0, 0), (10, 4321), (5000, 1), (7000, 2000)]),
        ("mem", [(0, 3000), (5000, 1), (10_000, 2222)]),
    ],
)
def test_many_fifos_are_read_in_parallel_every_record_once(tmp_path, scheme, ranges):
    fifos = []
    for i in range(len(ranges)):
        os.mkfifo(tmp_path / f"p{i}")
        fifos.append(str(tmp_path / f"p{i}"))
    name = f"fifos-{os.getpid()}-{len(ranges)}"
    uri = f"mem://{name}" if scheme == "mem" else f"{scheme}://{tmp_path}/ds"
    writers = [
        fifo_writer(f, s, n, "gen" if i % 2 else "generate")
        for i, (f, (s, n)) in enumerate(zip(fifos, ranges, strict=True))
    ]
    try:
        for attempt in (1, 2):  # every load of a FIFO is a new run
            p = run_cli(
                "load", *fifos, uri, "--shards", 3, "--workers", 2, "--batch-records", 500, "--json", timeout=120
            )
            assert p.returncode == 0, p.stderr
            rep = json.loads(p.stdout)
            assert rep["records"] == sum(n for _, n in ranges) and rep["status"] == "loaded"
            assert all(w.wait(timeout=30) == 0 for w in writers)
            if attempt == 1:
                writers = [fifo_writer(f, s, n, "gen") for f, (s, n) in zip(fifos, ranges, strict=True)]
        with loader.open(uri) as ds:
            assert ds.verify().ok
            got = ds.read_records()
        total = sum(n for _, n in ranges)
        assert len(got) == 2 * total
        for half in (got[:total], got[total:]):
            expected = np.concatenate([records(s, n) for s, n in ranges])
            assert sorted(r.tobytes() for r in half) == sorted(r.tobytes() for r in expected)
            for s, n in ranges:  # a pipe's own records in its order
                mine = half[(half["d0"] >= s) & (half["d0"] < s + n)]
                assert mine.tobytes() == records(s, n).tobytes()
        assert [r["status"] for r in runs_of(uri)] == ["done", "done"]
    finally:
        for w in writers:
            w.kill()
        if scheme == "mem":
            import shutil

            shutil.rmtree(f"/dev/shm/bulkload/{name}", ignore_errors=True)


WRITE_THEN_DIE = """
import os, signal, sys
from loader.model.layouts import get_layout
from loader.sources.generators import generate
data = generate(get_layout("scidb96"), 0, int(sys.argv[2])).tobytes() + b"\\x01" * int(sys.argv[3])
with open(sys.argv[1], "wb") as f:
    f.write(data)
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("whole,tail,dying", [(0, 5, 1), (1700, 95, 0), (3000, 1, 1)])
def test_a_fifo_writer_that_dies_mid_record_commits_nothing(tmp_path, whole, tail, dying):
    fifos = [str(tmp_path / "p0"), str(tmp_path / "p1")]
    for f in fifos:
        os.mkfifo(f)
    uri = f"rocksdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=1000", uri, shards=2)
    before = snapshot(uri)
    good = fifo_writer(fifos[1 - dying], 0, 2000, "gen")
    bad = subprocess.Popen([sys.executable, "-c", WRITE_THEN_DIE, fifos[dying], str(whole), str(tail)])
    p = run_cli("load", *fifos, uri, "--batch-records", 400, "-q", timeout=120)
    good.wait(timeout=30)
    assert bad.wait(timeout=30) == -signal.SIGKILL
    error_line(p, 1, f"{fifos[dying]}: partial record at byte offset {whole * RS} ({tail} trailing bytes")
    assert snapshot(uri) == before
    run = runs_of(uri)[-1]
    assert run["status"] == "failed" and not run.get("resumable")


# --- what cannot be loaded together ----------------------------------------------------------------


def test_inputs_that_cannot_make_one_run_are_refused_before_anything_is_written(tmp_path):
    a = write_raw(tmp_path / "a.bin", 0, 10)
    b = write_raw(tmp_path / "b.bin", 10, 10)
    os.mkfifo(tmp_path / "p")
    (tmp_path / "bad.bin").write_bytes(records(0, 3).tobytes() + b"xyz")
    np.save(tmp_path / "other.npy", np.zeros(3, [("x", "<i4")]))
    uri = f"lmdb://{tmp_path}/ds"
    other = str(tmp_path / "other.npy")
    cases = [
        ((a, str(tmp_path / "p")), 2, f"{tmp_path / 'p'} is a stream", "separate commands"),
        ((a, b, str(tmp_path / "." / "a.bin")), 2, f"input {a} is given more than once"),
        ((a, other, "--layout", "scidb96"), 2, "other.npy has no field 'd0' of layout 'scidb96'"),
        (
            (other, "gen://scidb96?n=5"),
            2,
            "input gen://scidb96?n=5&start=0 holds records of layout 'scidb96' (96 bytes: ",
            f"not of the run's layout 'other' (4 bytes: that of {other}, the first input)",
        ),
        ((a, str(tmp_path / "nothing*.bin")), 2, "no file matches", "nothing*.bin"),
        ((a, str(tmp_path / "bad.bin")), 1, f"{tmp_path / 'bad.bin'}: partial record at byte offset {3 * RS}"),
        ((a, str(tmp_path / "missing.bin")), 2, "missing.bin does not exist"),
    ]
    for args, code, *texts in cases:
        error_line(run_cli("load", *args, uri), code, *texts)
        assert not os.path.exists(tmp_path / "ds"), args
    error_line(run_cli("load", a, "--quiet"), 2, "Missing argument 'dataset'")


# --- raw bytes never take another input's layout ----------------------------------------------------

PTS = np.dtype([("x", "<i8"), ("y", "<i8"), ("z", "<f8")])  # 24 bytes: 4 scidb96 records are 16 of these


def typed_inputs(tmp_path) -> dict:
    """A file of 16 records of PTS, of each typed kind."""
    pts = np.zeros(16, PTS)
    pts["x"] = np.arange(16)
    table = pa.table({n: pts[n] for n in PTS.names})
    np.save(tmp_path / "pts.npy", pts)
    pq.write_table(table, tmp_path / "pts.parquet")
    with pa.OSFile(str(tmp_path / "pts.arrow"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    return {kind: str(tmp_path / f"pts.{kind}") for kind in ("npy", "parquet", "arrow")}


def test_a_raw_file_is_never_read_under_a_sibling_inputs_layout(tmp_path):
    raw = write_raw(tmp_path / "raw.bin", 0, 4)  # 384 bytes: whole records of scidb96 and of pts
    uri = f"lmdb://{tmp_path}/ds"
    for typed in typed_inputs(tmp_path).values():
        for args in ((raw, typed), (typed, raw)):
            error_line(
                run_cli("load", *args, uri),
                2,
                f"input {typed} holds records of layout 'pts' (24 bytes",
                "not of the run's layout 'scidb96' (96 bytes: the default, for the raw file",
                "--layout",
            )
            error_line(
                run_cli("load", *args, uri, "--layout", "scidb96"),
                2,
                f"input {typed} holds records of layout 'pts'",
                "not of the run's layout 'scidb96' (96 bytes: given by --layout)",
            )
            assert not os.path.exists(tmp_path / "ds"), args
    error_line(
        run_cli("load", raw, "gen://docs?n=3", uri),
        2,
        "holds records of layout 'docs'",
        "not of the run's layout 'scidb96'",
    )
    assert not os.path.exists(tmp_path / "ds")
    error_line(
        run_cli("load", raw, str(tmp_path / "pts.npy"), uri, "--layout", str(tmp_path / "none.toml")),
        2,
        "none.toml does not exist",
    )
    # the default layout, or one given, with inputs that hold it: loaded, and the summary names it
    p = run_cli("load", raw, "gen://scidb96?n=3&start=4", uri)
    assert p.returncode == 0, p.stderr
    assert "layout scidb96)" in p.stdout and "records of layout scidb96 from" in p.stderr
    assert snapshot(uri)[1] == records(0, 7).tobytes()


def test_an_appended_raw_file_takes_the_datasets_layout_and_the_summary_names_it(tmp_path):
    typed = typed_inputs(tmp_path)
    raw = write_raw(tmp_path / "raw.bin", 0, 4)
    uri = f"lmdb://{tmp_path}/ds"
    assert loader.load(typed["npy"], uri).layout == "pts"
    error_line(
        run_cli("load", raw, uri, "--layout", "scidb96"), 2, "already holds records with layout 'pts' (not 'scidb96')"
    )
    p = run_cli("load", raw, typed["parquet"], uri, "--json")  # the dataset's layout: pts for both
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["layout"] == "pts" and rep["records"] == 32
    p = run_cli("load", write_raw(tmp_path / "raw2.bin", 4, 4), uri)
    assert p.returncode == 0 and "layout pts)" in p.stdout, p.stderr


def test_a_single_raw_file_takes_the_default_or_the_layout_given(tmp_path):
    raw = write_raw(tmp_path / "raw.bin", 0, 4)
    p = run_cli("load", raw, f"lmdb://{tmp_path}/a", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["layout"] == "scidb96", p.stderr
    p = run_cli("load", raw, f"lmdb://{tmp_path}/a", "--new-run")
    assert p.returncode == 0 and "capnp, layout scidb96)" in p.stdout, p.stderr
    (tmp_path / "pts.toml").write_text('name = "pts"\n[fields]\nx = "int64"\ny = "int64"\nz = "float64"\n')
    rep = loader.load(raw, f"lmdb://{tmp_path}/b", layout=str(tmp_path / "pts.toml"))
    assert (rep.layout, rep.records) == ("pts", 16)


def test_raw_bytes_in_an_iterable_never_take_another_blocks_layout(tmp_path):
    import pandas as pd

    raw = records(0, 4).tobytes()
    pts = np.zeros(16, PTS)
    for blocks in ([pts, raw], [pd.DataFrame(pts), raw], [pa.table({n: pts[n] for n in PTS.names}), raw]):
        with pytest.raises(
            loader.errors.LayoutError,
            match="block 1 is raw bytes, which have no layout of their "
            "own, and the run's layout 'records' was taken from block 0",
        ):
            loader.load(blocks, f"lmdb://{tmp_path}/ds")
    with loader.open(f"lmdb://{tmp_path}/ds") as ds:
        assert ds.info()["records"] == 0
    assert loader.load([raw, raw], f"lmdb://{tmp_path}/ok").layout == "scidb96"


def test_a_later_input_that_changed_during_the_run_reports_the_inputs_committed_before_it(tmp_path, monkeypatch):
    import loader.loading.run as run_mod

    files = raw_parts(tmp_path, [(0, 300), (300, 300), (600, 300)])
    uri = f"lmdb://{tmp_path}/ds"
    real = run_mod.execute

    def execute_then_change_the_last_file(*args, **kwargs):
        receipts = real(*args, **kwargs)
        write_raw(tmp_path / "parts" / "p02.bin", 5000, 300)  # after the workers read it, before the commit
        return receipts

    monkeypatch.setattr(run_mod, "execute", execute_then_change_the_last_file)
    with pytest.raises(loader.errors.ChangedInputError) as e:
        loader.load(files, uri, batch_records=100, workers=1)
    monkeypatch.undo()
    message = str(e.value)
    assert f"{files[2]} changed while it was being loaded" in message
    assert "2 of its 3 inputs were committed" in message and "nothing" not in message
    failed = runs_of(uri)[-1]
    assert failed["status"] == "failed" and [x["committed"] for x in failed["inputs"]] == [True, True, False]
    assert failed["records"] == 600 and "2 of its 3 inputs were committed" in failed["error"]
    with loader.open(uri) as ds:
        assert ds.read_records().tobytes() == records(0, 600).tobytes()
    p = run_cli("load", *files, uri, "--batch-records", 100, "--json")  # loads the rest: the file as it is now
    assert p.returncode == 0 and json.loads(p.stdout)["records"] == 300, p.stderr
    assert snapshot(uri)[1] == records(0, 600).tobytes() + records(5000, 300).tobytes()
    first, second = runs_of(uri)[-2:]
    assert first["id"] == failed["id"] and first["status"] == "failed" and first["records"] == 600
    assert second["status"] == "done"
