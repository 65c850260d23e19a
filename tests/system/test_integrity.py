"""Data integrity: manifests that are not valid, missing shards, damaged stores, changed
batch values, changed sources and the skip-then-ingest of documents.

Each promise is tested over its class: every command, both stores, many mutations or
offsets; real LMDB / RocksDB files damaged on disk, real processes (a damaged store must
never kill a process with a signal: a Bus error is a returncode < 0).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import manifest_json, run_cli, wait_until, write_manifest_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import loader
from loader.arrays.finalize import finalize
from loader.cli.main import app
from loader.errors import BulkloadError, CorruptBatchError, ManifestError
from loader.model.layouts import get_layout
from loader.sources.generators import generate

LAY = get_layout("scidb96")
RS = LAY.record_size


# --- helpers ----------------------------------------------------------------------------------


def one_line_error(p, code: int, *texts: str) -> str:
    """The single `bulkload: error:` line of a failed command (and no traceback)."""
    assert p.returncode == code, (p.returncode, p.stderr)
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("bulkload: error: "), p.stderr
    for t in texts:
        assert t in lines[0], lines[0]
    return lines[0]


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under root (relative name) -> sha256 of its bytes; not LMDB's reader
    tables (lock.mdb), which every reader writes - the catalog's is read before a writer
    finds what is wrong."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            if f == "lock.mdb":
                continue
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def write_records(path: Path, start: int, n: int) -> bytes:
    data = generate(LAY, start, n, impl="c").tobytes()
    path.write_bytes(data)
    return data


def uri_of(root: Path, scheme: str) -> str:
    return f"mem://{root.name}" if scheme == "mem" else f"{scheme}://{root}"


@pytest.fixture
def ds_root(tmp_path):
    """root_for(scheme): the directory of a fresh dataset (mem://: under /dev/shm/bulkload,
    removed afterwards)."""
    made = []

    def root_for(scheme: str) -> Path:
        if scheme != "mem":
            return tmp_path / "ds"
        made.append(Path("/dev/shm/bulkload") / f"test-{uuid.uuid4().hex[:10]}")
        return made[-1]

    yield root_for
    for p in made:
        shutil.rmtree(p, ignore_errors=True)


def make_dataset(root: Path, scheme: str = "lmdb", n: int = 2000, shards: int = 2, batch: int = 100, **opts) -> str:
    uri = uri_of(root, scheme)
    opts.setdefault("compression", "none")  # the tests find a record's bytes in the store files
    loader.load(f"gen://scidb96?n={n}", uri, shards=shards, workers=2, batch_records=batch, **opts)
    return uri


@pytest.fixture(scope="module")
def base_dataset(tmp_path_factory):
    """A small lmdb dataset with a finalized array, copied by each test that damages it."""
    root = tmp_path_factory.mktemp("base") / "ds"
    uri = make_dataset(root)
    finalize(uri, dims="i0:5,i1:500")
    return root


def copy_dataset(base: Path, tmp: Path, name: str = "ds") -> Path:
    dst = tmp / name
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(base, dst)
    return dst


def cli(*args) -> subprocess.CompletedProcess:
    """The CLI in this process (fast; for the many hypothesis examples)."""
    r = CliRunner().invoke(app, [str(a) for a in args])
    return subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr)


# --- manifests that are not valid (issue items 4 and 12) ---------------------------------------

REQUIRED = [
    "layout",
    "format",
    "compression",
    "scheme",
    "shards",
    "batch_records",
    "batches",
    "runs",
    "arrays",
    "dataset_id",
    "created",
    "version",
]
WRONG_TYPE = {
    "layout": "scidb96",
    "format": 5,
    "compression": None,
    "scheme": [],
    "shards": "2",
    "batch_records": 1.5,
    "batches": {},
    "runs": {"id": "x"},
    "arrays": [],
    "dataset_id": 7,
    "created": "yesterday",
    "version": "1",
    "files": [],
}


def mutations(text: str):
    """A strategy of (description, new manifest text) for a real manifest's text."""
    d = json.loads(text)
    nb = len(d["batches"])

    def with_(fn):
        def apply(x):
            m = json.loads(text)
            fn(m, x)
            return json.dumps(m)

        return apply

    def drop_key(m, k):
        del m[k]

    def wrong_type(m, k):
        m[k] = WRONG_TYPE[k]

    def short_row(m, i):
        m["batches"][i] = m["batches"][i][:-1]

    def long_row(m, i):
        m["batches"][i] = m["batches"][i] + [0]

    def shard_out(m, x):
        m["batches"][x[0]][1] = m["shards"] + x[1]

    def seq_back(m, i):
        m["batches"][i + 1][0] = m["batches"][i][0]

    def swap_rows(m, i):
        m["batches"][i], m["batches"][i + 1] = m["batches"][i + 1], m["batches"][i]

    def negative(m, x):
        m["batches"][x[0]][x[1]] = -1

    def str_field(m, x):
        m["batches"][x[0]][x[1]] = "7"

    def run_no_id(m, i):
        del m["runs"][i]["id"]

    def run_not_obj(m, i):
        m["runs"][i] = "done"

    def bad_field_type(m, x):
        m["layout"]["fields"][x] = ["d0", "complex128"]

    rows, runs = st.integers(0, nb - 1), st.integers(0, len(d["runs"]) - 1)
    return st.one_of(
        st.sampled_from(REQUIRED).map(lambda k: (f"no {k}", with_(drop_key)(k))),
        st.sampled_from(sorted(WRONG_TYPE)).map(lambda k: (f"{k} of a wrong type", with_(wrong_type)(k))),
        st.integers(0, len(text) - 1).map(lambda i: (f"cut at byte {i}", text[:i])),
        st.sampled_from(["[]", "null", '"manifest"', "1", "", "\x00\xff", '{"layout": ']).map(
            lambda t: (f"replaced by {t!r}", t)
        ),
        rows.map(lambda i: (f"row {i} short", with_(short_row)(i))),
        rows.map(lambda i: (f"row {i} long", with_(long_row)(i))),
        st.tuples(rows, st.integers(0, 5)).map(lambda x: (f"row {x[0]} shard out of range", with_(shard_out)(x))),
        st.integers(0, nb - 2).map(lambda i: (f"seq {i + 1} repeats", with_(seq_back)(i))),
        st.integers(0, nb - 2).map(lambda i: (f"rows {i}, {i + 1} swapped", with_(swap_rows)(i))),
        st.tuples(rows, st.integers(0, 5)).map(lambda x: (f"row {x[0]} field {x[1]} negative", with_(negative)(x))),
        st.tuples(rows, st.integers(0, 5)).map(lambda x: (f"row {x[0]} field {x[1]} a string", with_(str_field)(x))),
        runs.map(lambda i: (f"run {i} without id", with_(run_no_id)(i))),
        runs.map(lambda i: (f"run {i} not an object", with_(run_not_obj)(i))),
        st.integers(0, 13).map(lambda i: (f"layout field {i} of an unknown type", with_(bad_field_type)(i))),
    )


def commands(uri: str, tmp: Path) -> list[list]:
    src = tmp / "in"
    src.mkdir(exist_ok=True)
    if not (src / "a.bin").exists():
        write_records(src / "a.bin", 0, 10)
    job = tmp / "job.toml"
    job.write_text(f'[job]\ndataset = "{uri}"\n\n[load]\nsource = "gen://scidb96?n=10"\n')
    return [
        ["info", uri],
        ["info", uri, "--json"],
        ["verify", uri],
        ["export", uri, "--out", tmp / "x.arrow"],
        ["load", "gen://scidb96?n=10", uri, "-q"],
        ["load", src / "a.bin", uri, "-q"],
        ["ingest", uri, "--from", src, "-q"],
        ["finalize", uri, "--dims", "i0:5,i1:500", "-q"],
        ["compact", uri, "-q"],
        ["query", uri, "--box", "i0=0:2"],
        ["get", uri, "1"],
        ["run", job, "-q"],
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_invalid_manifest_is_one_line_error_for_every_command_and_nothing_is_written(data, base_dataset, tmp_path):
    text = json.dumps({**manifest_json(base_dataset), "version": 1})  # as a version-1 manifest
    what, bad = data.draw(mutations(text), label="mutation")
    root = copy_dataset(base_dataset, tmp_path)
    write_manifest_json(root, {})
    (root / "manifest.json").write_text(bad)
    before = tree_digest(root)
    uri = f"lmdb://{root}"
    for args in commands(uri, tmp_path):
        p = cli(*args)
        one_line_error(
            p,
            1,
            f"{root}/manifest.json is not a valid bulkload manifest: ",
            "nothing was written - restore the file from a backup",
        )
        assert tree_digest(root) == before, (what, args)
    with pytest.raises(ManifestError, match=re.escape("manifest.json is not a valid bulkload manifest")):
        loader.open(uri)


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
@pytest.mark.parametrize(
    "mutate,where",
    [
        (lambda m: m.pop("batches"), "missing required field `batches`"),
        (
            lambda m: m["batches"][3].__setitem__(1, 9),
            "shard 9 does not exist (the dataset has 2 shards: 0..1) (at $.batches[3][1])",
        ),
        (lambda m: m["batches"][4].pop(), "has 5 (at $.batches[4])"),
        (
            lambda m: m["batches"][5].__setitem__(0, 2),
            "batch seq 2 does not follow seq 4 (seqs must ascend) (at $.batches[5][0])",
        ),
        (lambda m: m["runs"][0].pop("status"), "missing required field `status` (at $.runs[0])"),
    ],
)
def test_invalid_manifest_real_cli_names_the_problem_and_its_place(tmp_path, scheme, mutate, where):
    root = tmp_path / "ds"
    uri = make_dataset(root, scheme, n=1000)
    m = manifest_json(root)
    mutate(m)
    write_manifest_json(root, m)
    before = tree_digest(root)
    for args in (["info", uri], ["verify", uri], ["load", "gen://scidb96?n=10", uri, "-q"]):
        one_line_error(run_cli(*args), 1, "manifest.json is not a valid bulkload manifest", where)
    assert tree_digest(root) == before


def test_truncated_json_names_line_and_column(tmp_path):
    root = tmp_path / "ds"
    uri = make_dataset(root, n=300)
    (root / "manifest.json").write_text('{"layout": ')
    one_line_error(run_cli("info", uri), 1, "invalid JSON: Expecting value (at line 1 column 12)")


def test_replace_starts_over_a_dataset_whose_manifest_is_not_valid(tmp_path):
    root = tmp_path / "ds"
    uri = make_dataset(root, n=300)
    (root / "manifest.json").write_text("[]")
    p = run_cli("load", "gen://scidb96?n=50", uri, "--replace", "-q")
    assert p.returncode == 0, p.stderr
    with loader.open(uri) as ds:
        assert ds.records == 50 and ds.verify().ok


def test_old_and_newer_manifests_stay_valid(tmp_path):
    """The format on disk is unchanged: a manifest without the later `files` key, and one
    with keys written by newer code (kept as they are), both load."""
    root = tmp_path / "ds"
    uri = make_dataset(root, n=300)
    m = manifest_json(root)
    m.pop("files")
    m["future_key"] = {"x": 1}
    write_manifest_json(root, m)
    with loader.open(uri) as ds:
        assert ds.records == 300 and ds.verify().ok
    loader.load("gen://scidb96?n=10&start=300", uri)
    assert manifest_json(root)["future_key"] == {"x": 1}


# --- missing shards (issue item 5) ----------------------------------------------------------------


def _remove(root: Path, scheme: str, how: str) -> None:
    shard = root / "shard-001"
    if how == "rmtree":
        shutil.rmtree(shard)
    else:  # the store's main file: the directory stays
        (shard / ("CURRENT" if scheme == "rocksdb" else "data.mdb")).unlink()


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb", "mem"])
@pytest.mark.parametrize("how", ["rmtree", "main-file"])
def test_a_missing_shard_stops_every_writer_and_is_named_by_info(tmp_path, ds_root, scheme, how):
    root = ds_root(scheme)
    uri = make_dataset(root, scheme, n=1000)
    finalize(uri, dims="i0:5,i1:500")
    _remove(root, scheme, how)
    before = tree_digest(root)
    src = tmp_path / "in"
    src.mkdir()
    write_records(src / "a.bin", 5000, 20)
    word = "missing" if how == "rmtree" else "damaged (no "
    for args in (
        ["load", "gen://scidb96?n=10&start=1000", uri, "-q"],
        ["load", src / "a.bin", uri, "-q"],
        ["ingest", uri, "--from", src, "-q"],
        ["finalize", uri, "--dims", "i0:5,i1:500", "-q"],
        ["compact", uri, "-q"],
        ["compact", uri, "--force", "-q"],
    ):
        one_line_error(
            cli(*args),
            1,
            f"shard 1 ({root}/shard-001) is {word}",
            "but the manifest lists 5 committed batches in it",
            "nothing was written",
        )
        assert tree_digest(root) == before, args  # not re-created, nothing else touched
    p = run_cli("info", uri)
    assert p.returncode == 1
    assert f"DAMAGED: shard 1 ({root}/shard-001) {'missing' if how == 'rmtree' else 'no '}" in p.stderr
    assert "(5 committed batches)" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("info", uri, "--json")
    assert p.returncode == 1
    (problem,) = json.loads(p.stdout)["problems"]
    assert problem["shard"] == 1 and problem["batches"] == 5
    p = run_cli("verify", uri)
    assert p.returncode == 1 and "Traceback" not in p.stderr and "shard 1 (" in p.stderr
    one_line_error(run_cli("export", uri, "--out", tmp_path / "x.arrow"), 1, "shard 1 (")


def test_a_missing_shard_stops_a_docs_ingest(tmp_path):
    root = tmp_path / "docs"
    uri = f"rocksdb://{root}"
    loader.load("gen://docs?n=400", uri, shards=2, batch_records=100)
    d = tmp_path / "in"
    d.mkdir()
    (d / "1000.json").write_text(json.dumps({"text": "hello", "created_at": 1}))
    shutil.rmtree(root / "shard-000")
    before = tree_digest(root)
    for args in (
        ["ingest", uri, "--from", d, "-q"],
        ["load", d, uri, "--layout", "docs", "-q"],
        ["compact", uri, "-q"],
    ):
        one_line_error(run_cli(*args), 1, f"shard 0 ({root}/shard-000) is missing", "nothing was written")
    assert tree_digest(root) == before
    one_line_error(run_cli("get", uri, "5"), 1, "shard 0 (")


# --- damaged stores (issue item 11) ----------------------------------------------------------------

READ_CMDS = {
    "verify": lambda uri, tmp: ["verify", uri],
    "export": lambda uri, tmp: ["export", uri, "--out", tmp / "x.arrow"],
    "info": lambda uri, tmp: ["info", uri],
    "query": lambda uri, tmp: ["query", uri, "--box", "i0=0:5", "--format", "csv"],
}
READ_RECORDS = "import loader,sys\nwith loader.open(sys.argv[1]) as ds: ds.read_records()\n"


def read_records_proc(uri: str) -> subprocess.CompletedProcess:
    """read_records in a child process (a signal would kill pytest itself); an error is one
    line on stderr, as the CLI prints it."""
    code = (
        "import sys\nfrom loader.errors import BulkloadError\n"
        "try:\n    " + READ_RECORDS.replace("\n", "\n    ").rstrip() + "\n"
        "except BulkloadError as e:\n    print('bulkload: error:', e, file=sys.stderr); sys.exit(1)\n"
    )
    return subprocess.run([sys.executable, "-c", code, uri], capture_output=True, text=True, timeout=120)


def btree_page_offsets(data: bytes, rng: random.Random, n: int) -> list[int]:
    """n offsets of used bytes (header or nodes) of LMDB branch / leaf pages (page >= 2)."""
    pages = [
        i for i in range(2, len(data) // 4096) if int.from_bytes(data[i * 4096 + 10 : i * 4096 + 12], "little") & 0x03
    ]
    out = []
    for _ in range(n):
        pg = rng.choice(pages)
        lower = int.from_bytes(data[pg * 4096 + 12 : pg * 4096 + 14], "little")
        upper = int.from_bytes(data[pg * 4096 + 14 : pg * 4096 + 16], "little")
        used = list(range(0, min(lower, 4096))) + list(range(min(upper, 4096), 4096))
        out.append(pg * 4096 + rng.choice(used))
    return out


def flip(path: Path, offset: int, bit: int = 0) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ (1 << bit)]))


CHILD = """
import json, sys
from typer.testing import CliRunner
from loader.cli.main import app
out = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(app, args)
    out.append([args[0], r.exit_code, r.stderr, repr(r.exception) if r.exit_code not in (0, 1) else None])
print(json.dumps(out))
"""


def read_commands_in_child(uri: str, tmp: Path) -> list:
    """verify, export, info, query (the CLI, in-process) in one child process: [(command,
    exit code, stderr, exception)]; asserts the child was not killed by a signal."""
    cmds = [[str(a) for a in args(uri, tmp)] for args in READ_CMDS.values()]
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cmds)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])  # < 0: a signal (SIGBUS, SIGSEGV)
    return json.loads(p.stdout)


@pytest.mark.parametrize("seed", range(6))
def test_flipped_lmdb_btree_bytes_never_kill_a_reader(base_dataset, tmp_path, seed):
    """Bytes flipped in B-tree pages: every read command either still gives the exact data
    (the flip hit something unused) or fails with one line naming the shard - never a
    signal, never a traceback."""
    import pyarrow as pa

    with loader.open(f"lmdb://{base_dataset}") as ds:
        want = ds.to_arrow()
    rng = random.Random(seed)
    data = (base_dataset / "shard-000" / "data.mdb").read_bytes()
    for off in btree_page_offsets(data, rng, 3):
        root = copy_dataset(base_dataset, tmp_path)
        flip(root / "shard-000" / "data.mdb", off, rng.randrange(8))
        uri = f"lmdb://{root}"
        for name, code, err, exc in read_commands_in_child(uri, tmp_path):
            assert code in (0, 1) and exc is None and "Traceback" not in err, (off, name, code, err, exc)
            if code and name != "verify":  # verify lists each problem it finds
                line = one_line_error(subprocess.CompletedProcess(name, code, "", err), 1)
                assert re.search(r"shard 0\b", line), line
            elif name == "export":
                assert pa.ipc.open_file(str(tmp_path / "x.arrow")).read_all().equals(want), off
        p = read_records_proc(uri)
        assert p.returncode in (0, 1) and "Traceback" not in p.stderr, (off, p.returncode, p.stderr)


@pytest.mark.parametrize("size", ["half", "3 pages", "1 page", "zero"])
def test_a_truncated_data_mdb_is_refused_before_it_is_mapped(base_dataset, tmp_path, size):
    root = copy_dataset(base_dataset, tmp_path)
    data = root / "shard-001" / "data.mdb"
    n = data.stat().st_size
    os.truncate(data, {"half": n // 2, "3 pages": 3 * 4096, "1 page": 4096, "zero": 0}[size])
    uri = f"lmdb://{root}"
    for name, args in READ_CMDS.items():
        p = run_cli(*args(uri, tmp_path))
        assert p.returncode == 1, (name, p.returncode, p.stderr)
        assert "shard 1 (" in p.stderr and "Traceback" not in p.stderr, p.stderr
        if name != "verify":  # verify lists problems, then its summary line
            one_line_error(p, 1, "data.mdb")
    one_line_error(read_records_proc(uri), 1, f"shard 1 ({root}/shard-001) is damaged")
    before = tree_digest(root)
    one_line_error(run_cli("load", "gen://scidb96?n=10&start=2000", uri, "-q"), 1, "shard 1 (", "data.mdb")
    assert tree_digest(root) == before


def test_a_damaged_rocksdb_sst_is_one_line_naming_the_shard(tmp_path):
    root = tmp_path / "ds"
    uri = make_dataset(root, "rocksdb", n=2000)
    ssts = sorted((root / "shard-000").glob("*.sst"), key=lambda p: p.stat().st_size)
    big = ssts[-1]
    for off in range(1000, big.stat().st_size // 2, 5000):  # bytes of data blocks
        flip(big, off)
    for name in ("verify", "export"):
        p = run_cli(*READ_CMDS[name](uri, tmp_path))
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert "shard 0 (" in p.stderr and "RocksDB cannot read it" in p.stderr, p.stderr
    one_line_error(read_records_proc(uri), 1, f"shard 0 ({root}/shard-000) is damaged", "Corruption")


# --- flipped bytes inside a batch value (issue item 11b) ------------------------------------------


def _flip_value_byte(root: Path, shard: int, needle: bytes) -> None:
    """Flip one byte of the stored value that contains ``needle``, found in data.mdb (in
    every copy of it: LMDB may keep a stale copy in a freed page)."""
    path = root / f"shard-{shard:03d}" / "data.mdb"
    data = path.read_bytes()
    found, at = [], data.find(needle)
    while at >= 0:
        found.append(at)
        at = data.find(needle, at + 1)
    assert found
    for at in found:
        flip(path, at + len(needle) // 2)


@pytest.mark.parametrize("fmt", ["capnp", "arrow"])
def test_a_changed_value_fails_every_whole_batch_read_naming_shard_and_batch(tmp_path, fmt):
    root = tmp_path / "ds"
    uri = make_dataset(root, n=2000, format=fmt)
    rec = generate(LAY, 1234, 1, impl="c")  # record 1234: batch 12 (shard 0)
    needle = rec.tobytes() if fmt == "capnp" else rec["d3"].tobytes()
    _flip_value_byte(root, 0, needle)
    where = "shard 0 batch 12 (first record 1200)"
    with loader.open(uri) as ds:
        for read in (
            lambda: ds.read_records(),
            lambda: ds.read_records(1200, 1201),
            lambda: list(ds.iter_batches()),
            lambda: ds.to_arrow(),
        ):
            with pytest.raises(CorruptBatchError, match=re.escape(f"{where} of {uri}: stored bytes changed")):
                read()
        assert len(ds.read_records(0, 1200)) == 1200  # the batches before it are fine
    for out_fmt in ("arrow", "parquet", "npy", "capnp"):
        one_line_error(run_cli("export", uri, "--out", tmp_path / f"x.{out_fmt}", "--format", out_fmt), 1, where)
        assert not (tmp_path / f"x.{out_fmt}").exists()
    p = run_cli("verify", uri)
    assert p.returncode == 1 and where in p.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["compact", "--target-batch-records", "500"],
        ["finalize", "--dims", "i0:5,i1:500", "--strategy", "direct", "--no-compact"],
        ["finalize", "--dims", "i0:5,i1:500", "--strategy", "spill"],
    ],
)
def test_a_changed_value_is_not_rebuilt_into_merged_batches_or_arrays(tmp_path, args):
    """compact's merge (decode + encode, or a batch copied as it is) and finalize (both
    strategies) read whole batches too: a changed one stops them before it gets a new,
    matching checksum; nothing is committed. (`compact --force` without merging copies
    store pages as they are: the manifest keeps the old checksum, verify still finds it.)"""
    root = tmp_path / "ds"
    uri = make_dataset(root, n=2000)
    _flip_value_byte(root, 0, generate(LAY, 1234, 1, impl="c").tobytes())  # batch 12, shard 0
    before = manifest_json(root)
    p = run_cli(args[0], uri, *args[1:], "-q")
    line = one_line_error(p, 1, f"shard 0 batch 12 (first record 1200) of {uri}: stored bytes changed")
    assert "Traceback" not in p.stderr, line
    after = manifest_json(root)
    assert after["batches"] == before["batches"] and after["arrays"] == before["arrays"] == {}
    assert after["runs"][-1]["status"] == "failed"


@pytest.mark.parametrize("fmt", ["block", "raw"])
def test_a_changed_document_fails_scan_and_export_naming_shard_and_batch(tmp_path, fmt):
    root = tmp_path / "docs"
    uri = f"lmdb://{root}"
    d = tmp_path / "in"
    d.mkdir()
    for i in range(300):
        (d / f"{i}.json").write_text(json.dumps({"text": f"document {i:05d} says hello to the world", "created_at": i}))
    loader.load(str(d), uri, layout="docs", format=fmt, compression="none", shards=2, batch_records=100)
    _flip_value_byte(root, 1, b"document 00150 says hello")  # batch 1 (ids 100..199)
    where = "shard 1 batch 1 (documents 100..199)"
    with loader.open(uri) as ds:
        with pytest.raises(CorruptBatchError, match=re.escape(f"{where} of {uri}: stored bytes changed")):
            ds.scan()
        with pytest.raises(CorruptBatchError, match=re.escape(where)):
            ds.scan(100, 200)
        assert len(ds.scan(0, 100)) == 100 and len(ds.scan(200)) == 100
    one_line_error(run_cli("export", uri, "--out", tmp_path / "x.parquet", "--format", "parquet"), 1, where)


# --- documents: a bad file skipped, then ingest (issue item 19) ------------------------------------


def _docs_dir(d: Path, ids, bad=()) -> Path:
    d.mkdir(exist_ok=True)
    for i in ids:
        (d / f"{i}.json").write_text(json.dumps({"text": f"text of {i}", "created_at": i}))
    for i in bad:
        (d / f"{i}.json").write_text('{"text": "cut sho')
    return d


def _ingest_skip(uri: str, d: Path) -> dict:
    p = run_cli("ingest", uri, "--from", d, "--on-bad-file", "skip", "--json", "-q")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
@pytest.mark.parametrize("first", ["load", "ingest"])
def test_a_skipped_bad_document_is_reported_and_nothing_new_is_written(tmp_path, scheme, first):
    uri = f"{scheme}://{tmp_path}/docs"
    d = _docs_dir(tmp_path / "in", range(1, 6), bad=[6])
    if first == "load":
        p = run_cli("load", d, uri, "--layout", "docs", "--on-bad-file", "skip", "-q", "--shards", "2")
        assert p.returncode == 0, p.stderr
    else:
        rep = run_cli(
            "ingest", uri, "--from", d, "--layout", "docs", "--on-bad-file", "skip", "--shards", "2", "--json", "-q"
        )
        assert rep.returncode == 0 and json.loads(rep.stdout)["records"] == 5, rep.stderr
    manifest = manifest_json(tmp_path / "docs")
    for _ in range(2):  # every later run: nothing new, the bad file reported, nothing written
        rep = _ingest_skip(uri, d)
        assert rep["status"] == "nothing-to-do" and rep["records"] == 0 and rep["already"] == 5
        assert [s["name"] for s in rep["skipped"]] == ["6.json"] and "invalid JSON" in rep["skipped"][0]["reason"]
        assert manifest_json(tmp_path / "docs") == manifest
    p = run_cli("ingest", uri, "--from", d, "--on-bad-file", "skip", "-q")
    assert p.returncode == 0 and "Traceback" not in p.stderr
    _docs_dir(d, [6])  # fixed: ingested by the next run, then nothing new
    rep = _ingest_skip(uri, d)
    assert rep["status"] == "done" and rep["records"] == 1 and rep["skipped"] == []
    rep = _ingest_skip(uri, d)
    assert rep["status"] == "nothing-to-do" and rep["already"] == 6
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.scan().ids.tolist() == [1, 2, 3, 4, 5, 6]
        assert ds.get(6).text == "text of 6"


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_a_batch_whose_files_are_all_bad_still_commits_with_the_run(tmp_path, scheme):
    """A batch of skipped files only (the last of its shard) stores no item, but its row
    is part of the run: the run commits (it failed with "the workers did not write every
    planned batch")."""
    uri = f"{scheme}://{tmp_path}/docs"
    d = _docs_dir(tmp_path / "in", range(1, 5), bad=[5, 6])
    rep = loader.load(str(d), uri, layout="docs", on_bad_file="skip", shards=2, batch_records=4)
    assert rep.records == 4 and sorted(f["path"] for f in rep.skipped) == [str(d / "5.json"), str(d / "6.json")]
    with loader.open(uri) as ds:
        assert ds.verify().ok and ds.scan().ids.tolist() == [1, 2, 3, 4]
        assert [b.docs for b in ds.manifest.batches] == [4, 0]


# --- changed sources (issue item 3) ---------------------------------------------------------------

SLOW = {"BULKLOAD_CHECKPOINT_SECONDS": "0"}  # a checkpoint (sync + manifest write) per batch


def _file_dataset(tmp_path: Path, scheme: str, n: int, root: Path | None = None) -> tuple[Path, str]:
    f = tmp_path / "g.bin"
    write_records(f, 0, n)
    return f, uri_of(root or tmp_path / "ds", scheme)


def _load(f: Path, uri: str, *extra, env=None) -> subprocess.CompletedProcess:
    return run_cli("load", f, uri, "--shards", "2", "--batch-records", "100", "--json", "-q", *extra, env=env)


def _append(f: Path, start: int, n: int) -> None:
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, generate(LAY, start, n, impl="c").tobytes())  # whole records, one write
    finally:
        os.close(fd)


def assert_holds(uri: str, want: bytes) -> None:
    """The dataset holds exactly these records (no duplicate, none missing) and verifies."""
    with loader.open(uri) as ds:
        assert ds.verify().ok
        assert ds.records == len(want) // RS
        assert ds.read_records().tobytes() == want


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb", "mem"])
def test_records_appended_after_a_load_are_loaded_once_by_the_next_run(tmp_path, ds_root, scheme):
    f, uri = _file_dataset(tmp_path, scheme, 1000, ds_root(scheme))
    assert json.loads(_load(f, uri).stdout)["status"] == "loaded"
    for start, n in ((1000, 500), (1500, 1)):
        _append(f, start, n)
        p = _load(f, uri)
        rep = json.loads(p.stdout)
        assert (rep["status"], rep["records"]) == ("appended", n), p.stderr
        assert_holds(uri, f.read_bytes())
        rep = json.loads(_load(f, uri).stdout)
        assert rep["status"] == "already-loaded" and rep["records"] == 0
    p = run_cli("load", f, uri, "-q")
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert_holds(uri, f.read_bytes())


def _running(root: Path) -> bool:
    """Whether the dataset's last run is a running one (a load records it once planned)."""
    try:
        return manifest_json(root)["runs"][-1]["status"] == "running"
    except (OSError, ValueError, KeyError, IndexError, BulkloadError):
        return False


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_records_appended_during_a_load_are_left_for_the_next_run(tmp_path, scheme):
    f, uri = _file_dataset(tmp_path, scheme, 20_000)
    from helpers import tool

    p = subprocess.Popen(
        [tool("bulkload"), "load", str(f), uri, "--shards", "2", "--batch-records", "100", "-q"],
        env=dict(os.environ, **SLOW),
        stderr=subprocess.PIPE,
        text=True,
    )
    root = tmp_path / "ds"
    wait_until(lambda: p.poll() is not None or _running(root), 60, "the load's run to start (its extent planned)")
    assert p.poll() is None, "the load ended before records could be appended: make it longer"
    size = 20_000
    while p.poll() is None and size < 60_000:  # a producer appends whole records while the load runs
        _append(f, size, 500)
        size += 500
        time.sleep(0.01)  # the subject: appends spread over the load
    assert p.wait(timeout=120) == 0, p.stderr.read()
    planned = manifest_json(tmp_path / "ds")["runs"][-1]["total"]
    assert 20_000 <= planned < size  # appends went on after the run planned its extent
    assert_holds(uri, f.read_bytes()[: planned * RS])  # exactly the records it planned
    rep = json.loads(_load(f, uri).stdout)
    assert (rep["status"], rep["records"]) == ("appended", size - planned)
    assert_holds(uri, f.read_bytes())
    assert json.loads(_load(f, uri).stdout)["status"] == "already-loaded"


def _truncate(f: Path) -> None:
    os.truncate(f, f.stat().st_size - 10 * RS)


def _rewrite_same_size(f: Path) -> None:
    write_records(f, 7, f.stat().st_size // RS)


def _rewrite_middle(f: Path) -> None:
    n = f.stat().st_size // RS
    with open(f, "r+b") as fh:
        fh.seek(n // 3 * RS)
        fh.write(generate(LAY, 10**6, n // 3, impl="c").tobytes())


def _rewrite_and_append(f: Path) -> None:
    _rewrite_middle(f)
    _append(f, 10**7, 50)


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
@pytest.mark.parametrize("change", [_truncate, _rewrite_same_size, _rewrite_middle, _rewrite_and_append])
def test_a_file_changed_since_it_was_loaded_is_refused_until_new_run_or_replace(tmp_path, scheme, change):
    f, uri = _file_dataset(tmp_path, scheme, 3000)
    assert _load(f, uri).returncode == 0
    loaded = f.read_bytes()
    change(f)
    root = tmp_path / "ds"
    before = tree_digest(root)
    p = _load(f, uri)
    one_line_error(
        p,
        1,
        f"{f} changed since run ",
        "nothing was loaded - use --new-run to load all of it again "
        "as new records, or --replace to start the dataset over with it",
    )
    assert tree_digest(root) == before
    assert_holds(uri, loaded)
    assert json.loads(_load(f, uri, "--new-run").stdout)["status"] == "loaded"
    assert_holds(uri, loaded + f.read_bytes())
    assert json.loads(_load(f, uri).stdout)["status"] == "already-loaded"
    change(f)
    assert json.loads(_load(f, uri, "--replace").stdout)["status"] == "loaded"
    assert_holds(uri, f.read_bytes())


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
@pytest.mark.parametrize("change", [_rewrite_middle, _truncate])
def test_a_file_changed_while_it_is_loaded_is_not_committed(tmp_path, scheme, change):
    f, uri = _file_dataset(tmp_path, scheme, 20_000)
    loader.load("gen://scidb96?n=500", uri, shards=2, batch_records=100)
    root = tmp_path / "ds"
    before = manifest_json(root)["batches"]
    from helpers import tool

    p = subprocess.Popen(
        [tool("bulkload"), "load", str(f), uri, "-q", "--batch-records", "100"],
        env=dict(os.environ, **SLOW),
        stderr=subprocess.PIPE,
        text=True,
    )
    while True:  # the first checkpoint of the run: it is loading
        m = manifest_json(root)
        if m["runs"][-1].get("source") == str(f) and m["runs"][-1].get("pending"):
            break
        assert p.poll() is None
    change(f)
    assert manifest_json(root)["runs"][-1]["status"] == "running"
    err = p.communicate(timeout=120)[1]
    assert p.returncode == 1, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"{f} changed while it was being loaded" in lines[0] or "the file shrank while being read" in lines[0]
    m = manifest_json(root)
    assert m["batches"] == before and m["runs"][-1]["status"] == "failed"
    with loader.open(uri) as ds:
        assert ds.records == 500 and ds.verify().ok
        first = ds.read_records().tobytes()
    assert json.loads(_load(f, uri).stdout)["status"] == "loaded"  # the file as it is now
    assert_holds(uri, first + f.read_bytes())


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_an_interrupted_run_of_a_grown_file_resumes_its_extent_then_the_rest_is_appended(tmp_path, scheme):
    f, uri = _file_dataset(tmp_path, scheme, 3000)
    p = _load(f, uri, env={"BULKLOAD_FAULT": "checkpoint:10", **SLOW})  # killed half way
    assert p.returncode == -9
    _append(f, 3000, 1234)
    rep = json.loads(_load(f, uri).stdout)
    assert (rep["status"], rep["records"]) == ("resumed", 3000) and 0 < rep["resumed_records"] < 3000
    assert_holds(uri, f.read_bytes()[: 3000 * RS])
    rep = json.loads(_load(f, uri).stdout)
    assert (rep["status"], rep["records"]) == ("appended", 1234)
    assert_holds(uri, f.read_bytes())


def test_an_interrupted_run_of_a_rewritten_file_starts_over(tmp_path):
    f, uri = _file_dataset(tmp_path, "lmdb", 3000)
    assert _load(f, uri, env={"BULKLOAD_FAULT": "commit:1"}).returncode == -9
    _rewrite_middle(f)
    rep = json.loads(_load(f, uri).stdout)
    assert (rep["status"], rep["records"], rep["resumed_records"]) == ("loaded", 3000, 0)
    assert_holds(uri, f.read_bytes())


def test_runs_recorded_before_extents_keep_working(tmp_path):
    """A run written by the previous version (no source_offset; its fingerprint is of the
    whole file as it was) is the extent [0, its total)."""
    f, uri = _file_dataset(tmp_path, "lmdb", 1000)
    assert _load(f, uri).returncode == 0
    m = manifest_json(tmp_path / "ds")
    assert m["runs"][-1].pop("source_offset") == 0
    assert m["runs"][-1]["fingerprint"].startswith(f"size={1000 * RS};sample=")
    write_manifest_json(tmp_path / "ds", m)
    assert json.loads(_load(f, uri).stdout)["status"] == "already-loaded"
    _append(f, 1000, 10)
    assert json.loads(_load(f, uri).stdout)["records"] == 10
    assert_holds(uri, f.read_bytes())


def test_a_get_from_a_damaged_document_block_names_shard_and_batch(tmp_path):
    """A get does not read the whole batch (its range checksum would cost ~100x the get,
    bench/integrity.py), but the block's zstd frame has a checksum of its texts."""
    from loader.docs.batch import key_of

    uri = f"lmdb://{tmp_path}/docs"
    loader.load("gen://docs?n=300&seed=1", uri, shards=1, batch_records=100)
    with loader.open(uri) as ds:
        b = ds.manifest.batches[1]
        _k, v = ds.shard(0).seek(key_of(150), table=b.table)
    _flip_value_byte(tmp_path / "docs", 0, bytes(v)[-200:-140])  # inside the compressed texts
    where = "shard 0 batch 1 (documents 100..199)"
    with loader.open(uri) as ds:
        with pytest.raises(CorruptBatchError, match=re.escape(where) + ".*Restored data doesn't match checksum"):
            ds.get(150)
        assert ds.get(50).id == 50
    one_line_error(run_cli("get", uri, "150"), 1, where, "document 150")
