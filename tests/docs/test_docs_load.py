"""Documents (layout docs) through the load pipeline: gen://docs and JSON directories into
LMDB and RocksDB, get / get_many / scan, the CLI, bad files, duplicate ids, verify,
resume after a kill."""

from __future__ import annotations

import json
import os
import re
import subprocess

import numpy as np
import pytest
from helpers import each_shard, run_cli, shard_tables, stored_docs, tool

import loader
from loader.docs.batch import DocBatch, key_of
from loader.docs.gen import generate_docs
from loader.docs.json_dir import write_json_dir
from loader.docs.tables import doc_tables
from loader.errors import BadFileError, DuplicateIdError, NotFoundError
from loader.stores.spec import parse_dataset_uri

N, SEED, B = 2400, 5, 300
KW = dict(shards=2, workers=2, batch_records=B, progress="none")


def gen_uri(n=N, seed=SEED, start=0):
    return f"gen://docs?n={n}&seed={seed}&start={start}"


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """One gen://docs load per backend and document format, shared by the read-only tests."""
    base = tmp_path_factory.mktemp("docs")
    out = {}
    for scheme in ("lmdb", "rocksdb"):
        for fmt in ("block", "raw"):
            uri = f"{scheme}://{base}/{scheme}-{fmt}"
            rep = loader.load(gen_uri(), uri, **KW, **({} if fmt == "block" else {"format": fmt}))
            out[scheme, fmt] = (uri, rep)
    return out


@pytest.fixture(params=[("lmdb", "block"), ("rocksdb", "block"), ("lmdb", "raw"), ("rocksdb", "raw")], ids="-".join)
def ds_uri(request, loaded):
    return loaded[request.param]


def test_gen_docs_load_reads_back(ds_uri):
    uri, rep = ds_uri
    want = generate_docs(SEED, 0, N)
    assert rep.layout == "docs" and rep.format in ("block", "raw") and rep.compression == "zstd"
    assert rep.records == N and rep.bytes == want.text_nbytes and rep.batches == N // B
    with loader.open(uri) as ds:
        assert ds.records == N
        assert ds.scan().equals(want)
        assert ds.scan(100, 250).equals(want.slice(100, 250))
        for a, z in ((0, 1), (299, 301), (N - 1, N), (1234, 1235), (5, 2000)):
            assert ds.scan(a, z).equals(want.slice(a, z))
        for i in (0, 1, 299, 300, 301, N - 1):
            d = ds.get(i)
            assert (d.id, d.created_at, d.text.encode()) == (i, int(want.created_at[i]), want.text_of(i))
        assert len(ds.scan(N + 5, N + 10)) == 0
        d = ds.get(17)
        assert (d.id, d.created_at, d.text.encode()) == (17, int(want.created_at[17]), want.text_of(17))
        found, missing = ds.get_many([5, N + 1, 3, 10**12])
        assert found.ids.tolist() == [5, 3] and missing == [N + 1, 10**12]
        assert found.text_of(0) == want.text_of(5)
        with pytest.raises(NotFoundError, match=f"id {N + 1} not found"):
            ds.get(N + 1)
        table = ds.to_arrow()
        assert table.num_rows == N and table.column("id").to_pylist()[:3] == [0, 1, 2]
        assert ds.verify().ok
        info = ds.info()
        assert info["text_bytes"] == want.text_nbytes and info["records"] == N
        # size sanity (random printable text: ~6.6 bits per character): LMDB stores
        # zdict-compressed values; RocksDB raw values in zstd-dict compressed blocks
        if uri.startswith("rocksdb"):
            assert info["disk_bytes"] < 0.95 * want.text_nbytes
        else:
            assert info["stored_bytes"] < 0.9 * want.text_nbytes


def test_docs_options_and_uncompressed_capnp(tmp_path):
    uri = f"lmdb://{tmp_path}/c"
    rep = loader.load(gen_uri(500), uri, format="capnp", compression="none", **KW)
    assert (rep.format, rep.compression) == ("capnp", "none")
    with loader.open(uri) as ds:
        assert ds.scan().equals(generate_docs(SEED, 0, 500))
        assert ds.verify().ok
    uri = f"rocksdb://{tmp_path}/b"
    rep = loader.load(gen_uri(500), uri, compression="none", **KW)  # blocks of plain text
    assert (rep.format, rep.compression) == ("block", "none")
    with loader.open(uri) as ds:
        assert ds.scan().equals(generate_docs(SEED, 0, 500))
        assert ds.get(321).text.encode() == generate_docs(SEED, 321, 1).text_of(0)
        assert ds.verify().ok
    with pytest.raises(loader.errors.UsageError, match="not one for documents"):
        loader.load(gen_uri(10), f"lmdb://{tmp_path}/x", format="arrow", **KW)
    with pytest.raises(loader.errors.UsageError, match=re.escape("directory of <id>.json")):
        loader.load(str(tmp_path), f"lmdb://{tmp_path}/y", **KW)  # a directory without --layout docs


def test_cli_get(loaded):
    uri, _ = loaded["lmdb", "block"]
    want = generate_docs(SEED, 0, N)
    p = run_cli("get", uri, "7", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d == {"id": 7, "created_at": int(want.created_at[7]), "text": want.text_of(7).decode()}
    p = run_cli("get", uri, "1", "2")
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert [ln.split("\t")[0] for ln in lines] == ["1", "2"]
    p = run_cli("get", uri, "3", str(N + 4))
    assert p.returncode == 1
    assert f"id {N + 4} not found" in p.stderr
    assert p.stdout.startswith("3\t")
    p = run_cli("info", uri)
    assert p.returncode == 0 and "docs" in p.stdout
    p = run_cli("verify", uri)
    assert p.returncode == 0 and "ok" in p.stdout
    p = run_cli("finalize", uri, "--dims", "id:10,created_at:100")
    assert p.returncode == 2 and "layout docs holds documents" in p.stderr
    # ingest takes the layout from the dataset: a directory without <id>.json files has nothing new
    p = run_cli("ingest", uri, "--from", os.path.dirname(uri.split("://")[1]))
    assert p.returncode == 0 and p.stdout.startswith("nothing new in ") and "(0 already ingested" in p.stdout
    p = run_cli("compact", uri)  # one run: one table per shard, nothing is written
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"nothing to do: {uri} holds one document table per shard")
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.records == N


# --- JSON directories -------------------------------------------------------------------


def write_bad(d, name, content: bytes):
    with open(os.path.join(d, name), "wb") as f:
        f.write(content)


def test_json_dir_load(tmp_path):
    src = tmp_path / "in"
    want = generate_docs(2, 0, 900)
    # ids need not be contiguous: drop every 7th
    keep = np.arange(900)[np.arange(900) % 7 != 3]
    want = want.take(keep)
    write_json_dir(want, src)
    uri = f"rocksdb://{tmp_path}/ds"
    p = run_cli(
        "load",
        src,
        uri,
        "--layout",
        "docs",
        "--shards",
        "2",
        "--workers",
        "2",
        "--batch-records",
        "100",
        "--json",
        "-q",
    )
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["records"] == len(want) and rep["skipped"] == [] and rep["bytes"] == want.text_nbytes
    with loader.open(uri) as ds:
        assert ds.scan().equals(want)
        assert ds.verify().ok
    # the same directory again: already loaded
    again = loader.load(str(src), uri, layout="docs", **KW)
    assert again.status == "already-loaded"


BAD = [  # (file name, content, reason)
    ("1001.json", b'{"text": "a", "created_at": 1', "invalid JSON"),
    ("1002.json", b'{"text": "\xff\xfe", "created_at": 1}', "text is not valid UTF-8"),
    ("1003.json", b'{"text": "a"}', "missing field(s) 'created_at'"),
    ("1004.json", b'{"text": "a", "created_at": 1, "lang": "en"}', "unexpected field(s) 'lang'"),
    ("notanid.json", b'{"text": "a", "created_at": 1}', "file name is not an integer id"),
    ("007.json", b'{"text": "a", "created_at": 1}', "duplicate id 7 (also in"),
]


@pytest.mark.parametrize("name,content,reason", BAD, ids=[b[0] for b in BAD])
def test_bad_file_fail(tmp_path, name, content, reason):
    src = tmp_path / "in"
    good = generate_docs(3, 0, 200)
    write_json_dir(good, src)
    write_bad(src, name, content)
    uri = f"lmdb://{tmp_path}/ds"
    p = run_cli("load", src, uri, "--layout", "docs", "--shards", "2", "--workers", "2", "--batch-records", "50", "-q")
    assert p.returncode == 1, p.stdout
    msg = p.stderr
    assert name in msg and reason in msg and "nothing was loaded" in msg
    assert "--on-bad-file skip" in msg
    # nothing committed, nothing of the run left in the stores
    spec = parse_dataset_uri(uri)
    if os.path.exists(os.path.join(spec.root, "manifest.json")):
        with loader.open(uri) as ds:
            assert ds.records == 0
            assert ds.manifest.runs[-1].status == "failed"
        for s in range(2):
            if os.path.isdir(spec.shard_path(s)):
                with spec.open_shard(s, write=False) as st:
                    assert doc_tables(st) == []


def test_bad_files_skip(tmp_path):
    src = tmp_path / "in"
    good = generate_docs(3, 0, 200)
    write_json_dir(good, src)
    for name, content, _ in BAD:
        write_bad(src, name, content)
    uri = f"lmdb://{tmp_path}/ds"
    p = run_cli(
        "load",
        src,
        uri,
        "--layout",
        "docs",
        "--on-bad-file",
        "skip",
        "--shards",
        "2",
        "--batch-records",
        "50",
        "--json",
        "-q",
    )
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    skipped = {os.path.basename(f["path"]): f["reason"] for f in rep["skipped"]}
    flagged = {"007.json": "7.json"}  # two names for id 7: the first in name order is kept
    assert set(skipped) == {flagged.get(b[0], b[0]) for b in BAD}
    for name, _, reason in BAD:
        assert reason in skipped[flagged.get(name, name)], (name, skipped)
    assert rep["records"] == 200
    with loader.open(uri) as ds:
        got = ds.scan()
        assert got.ids.tolist() == list(range(200)) and ds.get(7).text == "a"  # from 007.json
        keep = np.arange(200) != 7
        assert got.take(np.flatnonzero(keep)).equals(good.take(np.flatnonzero(keep)))
        assert ds.verify().ok
        assert len(ds.manifest.runs[-1].skipped) == len(BAD)
    p = run_cli("load", src, uri, "--layout", "docs", "--on-bad-file", "skip", "--shards", "2", "--batch-records", "50")
    assert p.returncode == 0 and "already loaded" in p.stdout


def test_duplicate_ids_already_stored(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(gen_uri(300), uri, **KW)
    # a generator overlapping stored ids: refused, nothing written
    with pytest.raises(DuplicateIdError, match=r"ids 250\.\.349 overlap documents already stored .*id 250"):
        loader.load(gen_uri(100, start=250), uri, **KW)
    # a directory: per-file errors
    src = tmp_path / "in"
    write_json_dir(DocBatch.from_records([(299, 1, b"x"), (300, 2, b"y"), (5, 3, b"z")]), src)
    with pytest.raises(
        BadFileError,
        match=r"/5\.json: duplicate id 5: a document with this id is already "
        r"stored in the dataset \(and 1 more bad file\(s\)\); nothing was loaded",
    ):
        loader.load(str(src), uri, layout="docs", **KW)
    rep = loader.load(str(src), uri, layout="docs", on_bad_file="skip", **KW)
    assert rep.records == 1
    assert sorted(os.path.basename(f["path"]) for f in rep.skipped) == ["299.json", "5.json"]
    # disjoint ids append
    rep = loader.load(gen_uri(100, start=1000), uri, **KW)
    assert rep.records == 100
    with loader.open(uri) as ds:
        assert ds.records == 401
        assert ds.get(300).text == "y" and ds.get(1099).id == 1099
        assert ds.scan(295, 1002).ids.tolist() == [295, 296, 297, 298, 299, 300, 1000, 1001]
        assert ds.verify().ok
    # exit code of the CLI for a duplicate
    p = run_cli("load", gen_uri(10, start=5), uri, "-q")
    assert p.returncode == 1 and "overlap documents already stored" in p.stderr


def test_verify_catches_a_flipped_byte(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(gen_uri(600), uri, **KW)
    with loader.open(uri) as ds:
        b = ds.manifest.batches[1]
    spec = parse_dataset_uri(uri)
    with spec.open_shard(b.shard, write=True) as st:
        k, v = st.seek(key_of(b.lo + 3), table=b.table)  # the block holding id lo + 3
        v = bytearray(v)
        v[len(v) // 2] ^= 0x40
        st.put_sorted([(k, bytes(v))], table=b.table)
        st.sync()
    with loader.open(uri) as ds:
        rep = ds.verify()
    assert not rep.ok and len(rep.problems) == 1
    p = rep.problems[0]
    assert p["batch"] == b.seq and p["shard"] == b.shard and "checksum mismatch" in p["problem"]
    r = run_cli("verify", uri)
    assert r.returncode == 1 and "checksum mismatch" in r.stderr


def test_resume_after_kill_is_byte_identical(tmp_path):
    src = tmp_path / "in"
    write_json_dir(generate_docs(9, 0, 1200), src)
    args = ["load", str(src), "--layout", "docs", "--shards", "2", "--workers", "2", "--batch-records", "100", "-q"]
    ref = f"lmdb://{tmp_path}/ref"
    p = run_cli(args[0], args[1], ref, *args[2:])
    assert p.returncode == 0, p.stderr
    uri = f"lmdb://{tmp_path}/ds"
    env = dict(os.environ, BULKLOAD_FAULT="checkpoint:4", BULKLOAD_CHECKPOINT_SECONDS="0")
    p = subprocess.run(
        [tool("bulkload"), args[0], args[1], uri, *args[2:]], env=env, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == -9, p.stderr
    with loader.open(uri) as ds:  # killed: nothing visible, the run is resumable
        assert ds.records == 0
        assert ds.manifest.runs[-1].pending
    p = run_cli(args[0], args[1], uri, *args[2:], "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["status"] == "resumed" and rep["resumed_records"] > 0
    got, want = stored_docs(uri), stored_docs(ref)
    assert got[0] == want[0]
    assert got[1] == want[1]
    assert got[2].equals(want[2])


def test_mem_replace_and_export(tmp_path):
    import uuid

    import pyarrow.parquet as pq

    name = f"test-{uuid.uuid4().hex[:10]}"
    uri = f"mem://{name}"
    try:
        loader.load(gen_uri(400), uri, **KW)
        rep = loader.load(gen_uri(300, seed=8, start=50), uri, replace=True, **KW)
        assert rep.records == 300
        want = generate_docs(8, 50, 300)
        with loader.open(uri) as ds:
            assert ds.records == 300 and ds.scan().equals(want)
            assert ds.verify().ok
        out = tmp_path / "d.parquet"
        p = run_cli("export", uri, "--out", out, "--format", "parquet")
        assert p.returncode == 0, p.stderr
        t = pq.read_table(out)
        assert t.column("id").to_pylist() == list(range(50, 350))
        assert t.column("text")[3].as_py().encode() == want.text_of(3)
        p = run_cli("export", uri, "--out", tmp_path / "d.npy", "--format", "npy")
        assert p.returncode == 2 and "export them as arrow or parquet" in p.stderr
    finally:
        import shutil

        shutil.rmtree(f"/dev/shm/bulkload/{name}", ignore_errors=True)


def _all_items(uri):
    """Every key+value of every docs table of every shard (leftovers included)."""
    items = each_shard(uri, lambda st: [(bytes(k), bytes(v)) for t in doc_tables(st) for k, v in st.range(table=t)])
    return [(s, k, v) for s, kv in enumerate(items) for k, v in kv]  # without table names: run ids differ


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_runs_above_the_stored_ids_share_a_table(tmp_path, scheme):
    uri = f"{scheme}://{tmp_path}/ds?shards=2"
    loader.load(gen_uri(600), uri, **KW)
    loader.load(gen_uri(300, start=1000), uri, **KW)  # above every stored id: same table
    src = tmp_path / "in"
    write_json_dir(generate_docs(SEED, 2000, 150), src)
    loader.load(str(src), uri, layout="docs", **KW)  # a directory above them: same table
    assert all(len(t) == 1 for t in shard_tables(uri))
    loader.load(gen_uri(100, start=700), uri, **KW)  # between stored ids: a table of its own
    assert len(set().union(*shard_tables(uri))) == 2
    want = DocBatch.concat(
        [
            generate_docs(SEED, 0, 600),
            generate_docs(SEED, 700, 100),
            generate_docs(SEED, 1000, 300),
            generate_docs(SEED, 2000, 150),
        ]
    )
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.records == 1150
        assert ds.scan().equals(want)
        for i in (0, 599, 700, 799, 1000, 1299, 2000, 2149):
            assert ds.get(i).text.encode() == generate_docs(SEED, i, 1).text_of(0)
        with pytest.raises(NotFoundError):
            ds.get(650)


def test_a_failed_run_leaves_nothing_in_a_shared_table(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(gen_uri(600), uri, **KW)
    before = _all_items(uri)
    src = tmp_path / "in"
    write_json_dir(generate_docs(SEED, 600, 700), src)
    write_bad(src, "1250.json", b'{"text": "x"}')  # in the last batches: earlier ones get written
    with pytest.raises(BadFileError, match=re.escape("1250.json")):
        loader.load(str(src), uri, layout="docs", **KW)
    assert _all_items(uri) == before  # the shared table holds nothing of the failed run
    os.remove(src / "1250.json")
    loader.load(str(src), uri, layout="docs", **KW)
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.records == 1299
        assert ds.scan(600, 1300).equals(
            generate_docs(SEED, 600, 700).take(np.array([i for i in range(700) if i != 650]))
        )


def test_a_killed_run_in_a_shared_table_is_cleared_by_the_next_one(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    ref = f"lmdb://{tmp_path}/ref"
    for u in (uri, ref):
        loader.load(gen_uri(600), u, **KW)
    env = dict(os.environ, BULKLOAD_FAULT="checkpoint:2", BULKLOAD_CHECKPOINT_SECONDS="0")
    p = subprocess.run(
        [
            tool("bulkload"),
            "load",
            gen_uri(900, start=1000),
            uri,
            "--shards",
            "2",
            "--workers",
            "2",
            "--batch-records",
            str(B),
            "-q",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    assert len(_all_items(uri)) > len(_all_items(ref))  # the killed run left blocks behind
    # another source above the stored ids: it shares the table and clears the leftovers first
    for u in (uri, ref):
        loader.load(gen_uri(200, start=5000), u, **KW)
    assert _all_items(uri) == _all_items(ref)
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.records == 800
        with pytest.raises(NotFoundError):
            ds.get(1100)


def test_the_lmdb_table_limit_is_a_clear_error(tmp_path):
    uri = f"lmdb://{tmp_path}/ds?max_dbs=3"
    loader.load(gen_uri(50, start=1000), uri, **KW)  # tables: meta, docs-1
    loader.load(gen_uri(50, start=0), uri, **KW)  # below: docs-2
    with pytest.raises(loader.errors.UsageError, match=r"max_dbs=3 per shard\): open the dataset with \?max_dbs=12"):
        loader.load(gen_uri(50, start=100), uri, **KW)  # among the stored ids: a table of its own, one too many
    loader.load(gen_uri(50, start=2000), uri, **KW)  # above them all: shares a table
    with loader.open(uri) as ds:
        assert ds.records == 150 and ds.verify().ok
