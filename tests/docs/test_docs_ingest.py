"""`bulkload ingest` for documents (layout docs): new <id>.json files only, already ingested
files (ledger, or compared with the stored document), changed files, bad files, the CLI,
resume after a kill, the ledger's merge; and `compact` with nothing to do."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import manifest_json, run_cli, stored_docs, tool

import loader
import loader.docs.ledger as docs_ledger
from loader.docs.gen import generate_docs
from loader.docs.json_dir import write_json_dir
from loader.errors import BadFileError
from loader.loading.ingest import ingest
from loader.stores.spec import parse_dataset_uri

SEED, N, B = 11, 300, 50
KW = dict(shards=2, workers=2, batch_records=B, progress="none")
CLI_KW = ["--shards", "2", "--workers", "2", "--batch-records", str(B)]


def docs(start, n, seed=SEED):
    return generate_docs(seed, start, n)


def put(d, start, n, seed=SEED):
    write_json_dir(docs(start, n, seed), d)


def files(start, n, but=()):
    """What a report lists for the files <start>.json .. <start + n - 1>.json ingested
    (one document each), but the ids ``but``."""
    return [{"name": f"{i}.json", "records": 1} for i in range(start, start + n) if i not in but]


def scan(uri):
    with loader.open(uri) as ds:
        assert ds.verify().ok
        return ds.scan()


def manifest_state(uri):
    """What a run that writes nothing must leave as it is: the metadata (and its catalog
    file's mtime), ledgers."""
    root = parse_dataset_uri(uri).root
    path = os.path.join(root, "catalog", "data.mdb")
    return manifest_json(root), os.stat(path).st_mtime_ns, sorted(os.listdir(os.path.join(root, ".ingest")))


def ledgers(uri):
    with loader.open(uri) as ds:
        return ds.manifest.extra.get("ingest_ledgers", [])


def rewrite(path, content: bytes):
    with open(path, "wb") as f:
        f.write(content)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a new mtime, whatever the clock's grain


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_new_files_once_then_nothing_then_only_new(tmp_path, scheme):
    src, uri = tmp_path / "in", f"{scheme}://{tmp_path}/ds"
    put(src, 0, N)
    rep = ingest(uri, str(src), layout="docs", **KW)
    assert (rep.status, rep.files, rep.records, rep.already, rep.skipped) == ("done", files(0, N), N, 0, [])
    assert rep.bytes == docs(0, N).text_nbytes and rep.run_id
    assert scan(uri).equals(docs(0, N))
    # again: nothing new, nothing written (the layout comes from the manifest)
    before = manifest_state(uri)
    rep = ingest(uri, str(src), **KW)
    assert (rep.status, rep.already, rep.files, rep.run_id) == ("nothing-to-do", N, [], None)
    assert manifest_state(uri) == before
    # new files arrive (the old ones stay): only they are loaded
    put(src, N, 120)
    rep = ingest(uri, str(src), **KW)
    assert (rep.status, rep.files, rep.already) == ("done", files(N, 120), N)
    assert scan(uri).equals(docs(0, N + 120))
    with loader.open(uri) as ds:
        kinds = [(r.kind, r.status, r.records) for r in ds.manifest.runs]
        assert kinds == [("ingest", "done", N), ("ingest", "done", 120)]
    assert [(r["files"], r["plan"], r["exclude"]) for r in ledgers(uri)] == [(N, N, []), (120, 120, [])]


def test_changed_file_is_a_bad_file(tmp_path):
    src, uri = tmp_path / "in", f"lmdb://{tmp_path}/ds"
    put(src, 0, N)
    ingest(uri, str(src), layout="docs", **KW)
    put(src, N, 30)  # new files, and an ingested one rewritten with other content:
    rewrite(src / "5.json", b'{"text": "a new version", "created_at": 5}')
    before = manifest_state(uri)
    with pytest.raises(
        BadFileError,
        match=r"/5\.json: already ingested, but its content changed \(created_at "
        r"\d+ -> 5, text of \d+ -> 13 bytes differs\); documents are immutable once stored - give "
        r"the new version a new id .*; nothing was loaded",
    ):
        ingest(uri, str(src), **KW)
    assert manifest_state(uri) == before  # fail: nothing of the run, not even a run record
    rep = ingest(uri, str(src), on_bad_file="skip", **KW)
    assert (rep.files, rep.already) == (files(N, 30), N - 1)
    assert [(s["name"], s["reason"][:43]) for s in rep.skipped] == [
        ("5.json", "already ingested, but its content changed (")
    ]
    assert scan(uri).equals(docs(0, N + 30))  # the stored version stays
    rep = ingest(uri, str(src), on_bad_file="skip", **KW)  # looked at again by every run
    assert (rep.status, rep.already, [s["name"] for s in rep.skipped]) == ("nothing-to-do", N + 29, ["5.json"])
    # the same document with another formatting and a new mtime: already ingested
    d = docs(5, 1)
    rewrite(
        src / "5.json",
        json.dumps({"created_at": int(d.created_at[0]), "text": d.text_of(0).decode()}, indent=2).encode(),
    )
    before = manifest_state(uri)
    rep = ingest(uri, str(src), **KW)
    assert (rep.status, rep.already, rep.skipped) == ("nothing-to-do", N + 30, [])
    assert manifest_state(uri) == before
    # a changed text of the same length is found too
    t = bytearray(d.text_of(0))
    t[3] = ord("#") if t[3] != ord("#") else ord("%")
    rewrite(src / "5.json", json.dumps({"text": t.decode(), "created_at": int(d.created_at[0])}).encode())
    with pytest.raises(BadFileError, match=r"5\.json: already ingested, but its content changed \(text differs\)"):
        ingest(uri, str(src), **KW)


def test_touched_files_are_recorded_by_the_next_committing_run(tmp_path):
    src, uri = tmp_path / "in", f"lmdb://{tmp_path}/ds"
    put(src, 0, N)
    ingest(uri, str(src), layout="docs", **KW)
    for i in (3, 4):  # same content, new mtime: compared (equal) on every run ...
        rewrite(src / f"{i}.json", (src / f"{i}.json").read_bytes())
    assert ingest(uri, str(src), **KW).already == N
    put(src, N, 10)  # ... until a run commits: it records their new stat in its ledger
    rep = ingest(uri, str(src), **KW)
    assert (rep.files, rep.already) == (files(N, 10), N)
    assert [(r["files"], r["plan"]) for r in ledgers(uri)] == [(N, N), (12, 10)]
    assert ingest(uri, str(src), **KW).already == N + 10


def test_ids_stored_by_load_are_compared(tmp_path):
    src, uri = tmp_path / "in", f"rocksdb://{tmp_path}/ds"
    put(src, 0, 200)
    loader.load(str(src), uri, layout="docs", **KW)
    put(src, 200, 40)
    rewrite(src / "10.json", b'{"text": "other", "created_at": 1}')
    rep = ingest(uri, str(src), on_bad_file="skip", **KW)
    assert (rep.files, rep.already, [s["name"] for s in rep.skipped]) == (files(200, 40), 199, ["10.json"])
    assert scan(uri).equals(docs(0, 240))
    # the 199 files found equal are in this run's ledger: the next run reads none of them
    assert [(r["files"], r["plan"]) for r in ledgers(uri)] == [(239, 40)]
    os.unlink(src / "10.json")
    before = manifest_state(uri)
    rep = ingest(uri, str(src), **KW)
    assert (rep.status, rep.already, rep.skipped) == ("nothing-to-do", 239, [])
    assert manifest_state(uri) == before
    # and `load` of the same directory still refuses the stored ids (its behaviour is unchanged)
    with pytest.raises(BadFileError, match="duplicate id 0: a document with this id is already stored"):
        loader.load(str(src), uri, layout="docs", new_run=True, **KW)


def test_bad_json(tmp_path):
    src, uri = tmp_path / "in", f"lmdb://{tmp_path}/ds"
    put(src, 0, N)
    ingest(uri, str(src), layout="docs", **KW)
    put(src, N, 100)
    (src / f"{N + 60}.json").write_bytes(b'{"text": "a", "created_at": 1')  # a new file, bad
    (src / "x.json").write_bytes(b"{}")  # not named <id>.json
    with pytest.raises(BadFileError, match=r"x\.json: file name is not an integer id"):
        ingest(uri, str(src), **KW)
    os.unlink(src / "x.json")
    with pytest.raises(BadFileError, match=rf"/{N + 60}\.json: invalid JSON.*nothing was loaded"):
        ingest(uri, str(src), **KW)
    with loader.open(uri) as ds:
        assert ds.records == N and ds.manifest.runs[-1].status == "failed"
    rep = ingest(uri, str(src), on_bad_file="skip", **KW)
    assert (rep.files, rep.already) == (files(N, 100, but={N + 60}), N)
    assert [(s["name"], s["reason"][:12]) for s in rep.skipped] == [(f"{N + 60}.json", "invalid JSON")]
    # the skipped file's batch is not in the ledger: the bad file is reported again, not "already"
    assert ledgers(uri)[-1]["exclude"] == [[50, 100]]
    rep = ingest(uri, str(src), on_bad_file="skip", **KW)
    assert (rep.status, rep.already, [s["name"] for s in rep.skipped]) == ("nothing-to-do", N + 99, [f"{N + 60}.json"])
    put(src, N + 60, 1)  # fixed: loaded by the next run
    rep = ingest(uri, str(src), **KW)
    assert (rep.files, rep.already, rep.skipped) == (files(N + 60, 1), N + 99, [])
    assert scan(uri).equals(docs(0, N + 100))


def test_cli(tmp_path):
    src, uri = tmp_path / "in", f"lmdb://{tmp_path}/ds"
    put(src, 0, N)
    p = run_cli("ingest", uri, "--from", src, "--layout", "docs", *CLI_KW, "--json", "-q")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert {k: rep[k] for k in ("status", "layout", "files", "records", "already", "skipped", "deferred")} == {
        "status": "done",
        "layout": "docs",
        "files": files(0, N),
        "records": N,
        "already": 0,
        "skipped": [],
        "deferred": [],
    }
    assert rep["run_id"] and rep["seconds"] > 0
    p = run_cli("ingest", uri, "--from", src)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"nothing new in {src} ({N} already ingested into {uri})")
    put(src, N, 20)
    rewrite(src / "1.json", b'{"text": "b", "created_at": 2}')
    p = run_cli("ingest", uri, "--from", src, "-q")
    assert p.returncode == 1
    assert (
        "1.json: already ingested, but its content changed" in p.stderr
        and "give the new version a new id" in p.stderr
        and "Traceback" not in p.stderr
    )
    p = run_cli("ingest", uri, "--from", src, "--on-bad-file", "skip")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("ingested 20 document(s) (") and "299 already ingested, 1 skipped" in p.stdout
    assert "  skipped 1.json: already ingested, but its content changed" in p.stdout
    p = run_cli("ingest", uri, "--from", src, "--on-bad-file", "skip", "--json", "-q")
    rep = json.loads(p.stdout)
    assert (rep["status"], rep["already"], [s["name"] for s in rep["skipped"]]) == ("nothing-to-do", N + 19, ["1.json"])
    p = run_cli("ingest", uri, "--from", src, "--pattern", "*.json")
    assert p.returncode == 2 and "--pattern does not apply to documents" in p.stderr
    p = run_cli("ingest", uri, "--from", src, "--on-bad-file", "maybe")
    assert p.returncode == 2 and "--on-bad-file" in p.stderr
    assert scan(uri).equals(docs(0, N + 20))


def test_compact_of_one_ingest_table_has_nothing_to_do(tmp_path):
    src, uri = tmp_path / "in", f"lmdb://{tmp_path}/ds"
    put(src, 0, 60)
    ingest(uri, str(src), layout="docs", **KW)
    before = manifest_state(uri)
    from loader.maintain.compact import compact

    rep = compact(uri).to_dict()
    assert rep["status"] == "nothing-to-do" and rep["documents_rewritten"] == 0
    p = run_cli("compact", uri)
    assert p.returncode == 0 and p.stdout.startswith("nothing to do: "), p.stderr
    assert manifest_state(uri) == before


@pytest.mark.parametrize("point", ["checkpoint:3", "commit:1"])
def test_kill_then_rerun_is_byte_identical(tmp_path, point):
    """Killed mid-run (checkpoints after every batch: the rerun keeps the durable ones) or
    after the workers finished, before the commit (no checkpoint: the rerun redoes it)."""
    src = tmp_path / "in"
    put(src, 0, 100)
    ref, uri = f"lmdb://{tmp_path}/ref", f"lmdb://{tmp_path}/ds"
    for u in (ref, uri):
        ingest(u, str(src), layout="docs", **KW)
    put(src, 100, 500)
    ingest(ref, str(src), **KW)
    mid = point.startswith("checkpoint")
    env = dict(os.environ, BULKLOAD_FAULT=point, BULKLOAD_CHECKPOINT_SECONDS="0" if mid else "600")
    p = subprocess.run(
        [tool("bulkload"), "ingest", uri, "--from", str(src), *CLI_KW, "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    with loader.open(uri) as ds:  # killed: nothing of the run visible, its ledger not named
        assert ds.records == 100 and bool(ds.manifest.runs[-1].pending) == mid
        assert len(ds.manifest.extra["ingest_ledgers"]) == 1
    p = run_cli("ingest", uri, "--from", src, *CLI_KW, "--json", "-q")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert (rep["status"], rep["files"], rep["already"]) == ("done", files(100, 500), 100)
    assert (rep["resumed_records"] > 0) == mid
    got, want = stored_docs(uri), stored_docs(ref)
    assert got[0] == want[0] and got[1] == want[1] and got[2].equals(want[2])
    assert got[2].equals(docs(0, 600))
    assert ingest(uri, str(src), **KW).status == "nothing-to-do"
    with loader.open(uri) as ds:
        assert [r.status for r in ds.manifest.runs] == ["done", "done"]
        assert len(ds.manifest.extra["ingest_ledgers"]) == 2


def test_ledger_merge_and_damage(tmp_path, monkeypatch):
    monkeypatch.setattr(docs_ledger, "LEDGER_MERGE", 3)
    src, uri = tmp_path / "in", f"lmdb://{tmp_path}/ds"
    root = parse_dataset_uri(uri).root
    for k in range(5):
        put(src, 40 * k, 40)
        rep = ingest(uri, str(src), layout="docs", **KW)
        assert (rep.files, rep.already) == (files(40 * k, 40), 40 * k)
    refs = ledgers(uri)
    assert [r["files"] for r in refs] == [160, 40]  # run 4 merged the ledgers of runs 1-4
    assert refs[0]["file"].startswith("merged-")
    # the files no manifest names are deleted by the next committing run
    assert set(os.listdir(os.path.join(root, ".ingest"))) >= {r["file"] for r in refs}
    put(src, 200, 5)
    ingest(uri, str(src), **KW)
    assert sorted(os.listdir(os.path.join(root, ".ingest"))) == sorted(r["file"] for r in ledgers(uri))
    assert ingest(uri, str(src), **KW).already == 205
    # a damaged ledger counts as empty: its files are compared with the store (still already)
    path = os.path.join(root, ".ingest", ledgers(uri)[0]["file"])
    with open(path, "r+b") as f:
        f.seek(30)
        f.write(b"\xff")
    rep = ingest(uri, str(src), **KW)
    assert (rep.status, rep.already) == ("nothing-to-do", 205)
    assert scan(uri).equals(docs(0, 205))
