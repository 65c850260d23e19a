"""User generators that split like the built-in ones (issue 13, item 2): the SciDB contract
``(start, n) -> records`` in Python (gen://MODULE:FUNCTION, loader.generator) and in C
(gen://c:LIB:SYMBOL), byte-identical however the range is split, and a one-line error
naming the generator and the record range - with nothing committed - when one misbehaves."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from helpers import run_cli, tool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loader
from loader.errors import GeneratorError, UsageError, WorkerError
from loader.sources.base import MAX_RECORDS
from loader.sources.generators import generate

from . import usergen_example as ex

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_C = REPO / "generators" / "examples" / "scidb96_gen.c"
FAILING_C = """
#include <stdint.h>
#include <string.h>
int fill_until_3000(void *buf, uint64_t start, uint64_t n) {
    if (start + n > 3000) return 7;
    memset(buf, 0, n * 96);
    return 0;
}
"""


def records_of(uri) -> bytes:
    with loader.open(uri) as ds:
        assert ds.verify().ok
        return ds.read_records(0, ds.manifest.records).tobytes() if ds.manifest.records else b""


def compile_c(source: Path, out: Path) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.fail("no C compiler (gcc/cc): the C generator tests need one, as `pip install` does")
    subprocess.run(
        [gcc, "-O2", "-shared", "-fPIC", "-ffp-contract=off", "-Wall", "-Werror", "-o", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def example_lib(tmp_path_factory) -> Path:
    """generators/examples/scidb96_gen.c, compiled by this test."""
    d = tmp_path_factory.mktemp("cgen")
    return compile_c(EXAMPLE_C, d / "libscidb96_gen.so")


@pytest.fixture(scope="module")
def failing_lib(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cfail")
    src = d / "failing.c"
    src.write_text(FAILING_C)
    return compile_c(src, d / "libfailing.so")


def bulkload_in(cwd, *args, env=None):
    """`bulkload ARGS` run in directory ``cwd`` (where a user's module or library is)."""
    return subprocess.run(
        [tool("bulkload"), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=None if env is None else dict(os.environ, **env),
    )


@pytest.fixture(params=["lmdb", "rocksdb", "mem"])
def two_datasets(request, tmp_path):
    """Two fresh dataset URIs of one backend (mem:// ones removed afterwards)."""
    if request.param != "mem":
        yield f"{request.param}://{tmp_path}/a", f"{request.param}://{tmp_path}/b"
        return
    names = [f"test-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    yield tuple(f"mem://{n}" for n in names)
    for n in names:
        shutil.rmtree(f"/dev/shm/bulkload/{n}", ignore_errors=True)


# --- C ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, start", [(25_000, 0), (7_001, 2**32 - 3_000), (3_000, 2**53 - 1_500), (1_000, 2**63 - 1_000)]
)
def test_c_example_loads_what_gen_scidb96_loads(example_lib, two_datasets, n, start):
    user, builtin = two_datasets
    c_uri = f"gen://c:{example_lib}:scidb96_gen?n={n}&start={start}&layout=scidb96"
    rep = loader.load(c_uri, user, workers=2, shards=3, batch_records=999)
    loader.load(f"gen://scidb96?n={n}&start={start}", builtin, workers=1, shards=2)
    assert rep.records == n and rep.layout == "scidb96"
    assert records_of(user) == records_of(builtin) == generate("scidb96", start, n, impl="python").tobytes()


def test_c_generator_from_the_cli_relative_path_and_rerun(example_lib, tmp_path):
    lib = tmp_path / "lib" / "libgen.so"
    lib.parent.mkdir()
    shutil.copy(example_lib, lib)
    ds = f"rocksdb://{tmp_path}/ds"
    src = "gen://c:lib/libgen.so:scidb96_gen?n=12345&start=77&layout=scidb96"
    r = bulkload_in(tmp_path, "load", src, ds, "-q", "--workers", "2")
    assert r.returncode == 0, r.stderr
    assert records_of(ds) == generate("scidb96", 77, 12345).tobytes()
    again = bulkload_in(tmp_path, "load", src, ds)
    assert again.returncode == 0 and "already loaded" in again.stdout  # the same library: recognised
    other = f"rocksdb://{tmp_path}/other"  # the layout from --layout instead of the URI
    r = bulkload_in(tmp_path, "load", "gen://c:lib/libgen.so:scidb96_gen?n=100", other, "--layout", "scidb96", "-q")
    assert r.returncode == 0, r.stderr
    assert records_of(other) == generate("scidb96", 0, 100).tobytes()


def test_c_generator_error_code_names_the_range_and_commits_nothing(failing_lib, tmp_path):
    ds = f"lmdb://{tmp_path}/ds"
    loader.load("gen://scidb96?n=500", ds, shards=1)
    before = records_of(ds)
    r = run_cli(
        "load",
        f"gen://c:{failing_lib}:fill_until_3000?n=5000&layout=scidb96",
        ds,
        "--batch-records",
        "1000",
        "--workers",
        "1",
        "--shards",
        "1",
    )
    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert "fill_until_3000" in line and "returned 7" in line and "records [3000, 4000)" in line, line
    assert "nothing from this run was committed" in line and "Traceback" not in r.stderr
    assert records_of(ds) == before


@pytest.mark.parametrize(
    "source, message",
    [
        ("gen://c:{missing}:scidb96_gen?n=10&layout=scidb96", "cannot load the library"),
        ("gen://c:{lib}:no_such_symbol?n=10&layout=scidb96", "has no symbol 'no_such_symbol'"),
        ("gen://c:{lib}:scidb96_gen?n=10", "needs layout=NAME"),
        ("gen://c:{lib}:scidb96_gen?n=10&layout=no_such_layout", "unknown layout"),
        ("gen://c:{lib}:scidb96_gen?layout=scidb96", "needs n=COUNT"),
        ("gen://c:{lib}:scidb96_gen?n=10&layout=scidb96&seed=3", "unknown parameter(s) seed"),
        ("gen://no_such_module_xyz:records?n=10", "cannot import module 'no_such_module_xyz'"),
        ("gen://usergen_mod:no_such_function?n=10", "has no 'no_such_function'"),
        ("gen://usergen_mod:DTYPE?n=10", "not a function"),
        ("gen://usergen_mod:records?n=-1", "n must be a non-negative integer"),
        ("gen://usergen_mod:records?n=1e30", "n is too large"),
        ("gen://usergen_mod:records?n=10&start=18446744073709551615", "start is too large"),
    ],
)
def test_a_generator_that_cannot_be_found_is_a_usage_error(example_lib, tmp_path, source, message):
    (tmp_path / "usergen_mod.py").write_text("import numpy as np\nDTYPE = np.dtype([('x', '<i8')])\n")
    src = source.format(lib=example_lib, missing=tmp_path / "missing.so")
    r = bulkload_in(tmp_path, "load", src, f"lmdb://{tmp_path}/ds")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("bulkload: error: ") and message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "ds").exists()


# --- Python ------------------------------------------------------------------------------------


def test_module_from_the_working_directory_in_the_workers_too(tmp_path):
    """gen://MODULE:FUNCTION from the CLI: the module is a file in the working directory (not
    on sys.path of `bulkload`), imported by the coordinator and by every worker."""
    (tmp_path / "mygen.py").write_text(Path(ex.__file__).read_text())
    ds = f"lmdb://{tmp_path}/ds"
    r = bulkload_in(
        tmp_path,
        "load",
        "gen://mygen:records?n=30000&start=5",
        ds,
        "--workers",
        "2",
        "--shards",
        "4",
        "--batch-records",
        "1000",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert records_of(ds) == ex.records(5, 30000).tobytes()
    with loader.open(ds) as d:
        assert d.layout.name == "records" and d.layout.dtype == ex.DTYPE  # inferred from its records


def test_python_generator_rerun_is_already_loaded_and_changed_code_is_a_new_run(tmp_path):
    mod = tmp_path / "gen_mod.py"
    mod.write_text(Path(ex.__file__).read_text())
    ds = f"lmdb://{tmp_path}/ds"

    def status():
        r = bulkload_in(tmp_path, "load", "gen://gen_mod:records?n=2000", ds, "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["status"]

    assert status() == "loaded"
    assert status() == "already-loaded"
    mod.write_text(
        mod.read_text().replace('out["mod7"], out["flag"] = j % 7, j % 2', 'out["mod7"], out["flag"] = j % 5, j % 2')
    )
    assert status() == "loaded"  # another generator: its records are loaded as a new run
    with loader.open(ds) as d:
        assert d.manifest.records == 4000


def test_a_killed_load_of_a_python_generator_resumes(tmp_path):
    """Like gen://: the same generator is recognised, its interrupted run resumed, and the
    dataset is the one an uninterrupted load writes."""
    (tmp_path / "resgen.py").write_text(Path(ex.__file__).read_text())
    ds = f"rocksdb://{tmp_path}/ds"
    args = (
        "load",
        "gen://resgen:records?n=20000&start=3",
        ds,
        "--shards",
        2,
        "--workers",
        2,
        "--batch-records",
        500,
        "--json",
    )
    killed = bulkload_in(tmp_path, *args, env={"BULKLOAD_FAULT": "w0.flush:5", "BULKLOAD_CHECKPOINT_SECONDS": "0"})
    assert killed.returncode == 1 and "killed by signal 9" in killed.stderr
    again = bulkload_in(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["status"] == "resumed" and report["resumed_records"] > 0
    assert records_of(ds) == ex.records(3, 20000).tobytes()


def test_generator_function_from_python_with_a_declared_layout(store_uri):
    rep = loader.load(loader.generator(ex.scidb96, n=20_000, start=2**40), store_uri, workers=2, shards=2)
    assert rep.layout == "scidb96" and rep.source == f"gen://sources.usergen_example:scidb96?n=20000&start={2**40}"
    assert records_of(store_uri) == generate("scidb96", 2**40, 20_000).tobytes()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    workers=st.integers(1, 3),
    shards=st.integers(1, 5),
    batch=st.integers(1, 4000),
    n=st.integers(0, 9000),
    start=st.integers(0, MAX_RECORDS),
)
def test_python_generator_is_split_invariant(tmp_path_factory, workers, shards, batch, n, start):
    """Whatever the workers, shards and batch size, the records are fn(start, n)'s, in order."""
    d = tmp_path_factory.mktemp("split")
    uri = f"lmdb://{d}/ds"
    rep = loader.load(
        loader.generator(ex.records, n=n, start=start), uri, workers=workers, shards=shards, batch_records=batch
    )
    assert rep.records == n
    assert records_of(uri) == ex.records(start, n).tobytes()


@pytest.mark.parametrize(
    "fn, says",
    [
        (ex.raises_from_1000, "raised ValueError: no records past 999"),
        (ex.one_short, "returned an array of shape"),
        (ex.other_dtype, "field 'half' is float32"),
        (ex.not_an_array, "returned a value of type list"),
    ],
)
@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_a_misbehaving_python_generator_names_itself_and_the_range(tmp_path, fn, says, scheme):
    ds = f"{scheme}://{tmp_path}/ds"
    loader.load(loader.generator(ex.records, n=700), ds)  # committed before
    with pytest.raises((GeneratorError, WorkerError)) as e:
        loader.load(loader.generator(fn, n=3000, start=700, layout=None), ds, batch_records=500, workers=2)
    # found by the coordinator's probe call, or by the worker that called it (the pool's WorkerError)
    assert isinstance(e.value, GeneratorError) or isinstance(e.value.error, GeneratorError)
    msg = str(e.value)
    assert f"sources.usergen_example:{fn.__name__}" in msg and says in msg, msg
    assert "for records [" in msg and "nothing from this run was committed" in msg
    assert records_of(ds) == ex.records(0, 700).tobytes()


def test_a_misbehaving_generator_from_the_cli_is_one_line_exit_1(tmp_path):
    (tmp_path / "badgen.py").write_text(Path(ex.__file__).read_text())
    r = bulkload_in(
        tmp_path,
        "load",
        "gen://badgen:raises_from_1000?n=5000",
        f"lmdb://{tmp_path}/ds",
        "--batch-records",
        "1000",
        "--workers",
        "1",
    )
    assert r.returncode == 1
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "gen://badgen:raises_from_1000?n=5000&start=0 for records [1000, 2000)" in errors[0]
    assert "Traceback" not in r.stderr
    with loader.open(f"lmdb://{tmp_path}/ds") as d:
        assert d.manifest.records == 0


def test_records_that_are_no_layout_are_a_generator_error(tmp_path):
    with pytest.raises(GeneratorError) as e:
        loader.load(loader.generator(ex.strings, n=10, start=3), f"lmdb://{tmp_path}/ds")
    assert str(e.value).startswith(
        "generator gen://sources.usergen_example:strings?n=10&start=3 for records [3, 4) "
        "returned records that are no layout's: field 'name' has type <U3"
    )


def test_layout_given_is_checked_against_the_records(tmp_path):
    with pytest.raises(GeneratorError, match=r"field 0 is 'key', the layout's is 'd0'"):
        loader.load(loader.generator(ex.records, n=10, layout="scidb96"), f"lmdb://{tmp_path}/ds")
    assert not (tmp_path / "ds" / "manifest.json").exists()


def scaled(scale):
    """A closure: ex.records with half multiplied by ``scale``."""

    def gen(start, n):
        out = ex.records(start, n)
        out["half"] *= scale
        return out

    return gen


def test_a_closure_or_lambda_is_sent_to_the_workers_by_value(tmp_path):
    """A function the workers cannot import by name (a closure, a lambda) goes by value
    (cloudpickle), with the values it closes over: its records, in one run; a closure over
    another value is another generator (a new run), the same one a re-run (already loaded)."""
    uri = f"lmdb://{tmp_path}/ds"
    rep = loader.load(loader.generator(scaled(3), n=3000, start=5), uri, workers=2, shards=2, batch_records=700)
    assert rep.records == 3000
    assert rep.source == "gen://sources.test_user_generators:scaled.<locals>.gen?n=3000&start=5"
    assert loader.load(loader.generator(scaled(3), n=3000, start=5), uri, workers=2).status == "already-loaded"
    assert loader.load(loader.generator(scaled(4), n=3000, start=5), uri, workers=2).status == "loaded"
    rep = loader.load(loader.generator(lambda s, n: ex.records(s, n), n=500), uri)
    assert rep.records == 500 and rep.source.endswith("by_value.<locals>.<lambda>?n=500&start=0")
    want = b"".join(scaled(scale)(5, 3000).tobytes() for scale in (3, 4)) + ex.records(0, 500).tobytes()
    assert records_of(uri) == want


def test_a_generator_that_cannot_be_sent_is_a_usage_error(tmp_path):
    import threading

    lock = threading.Lock()

    def locked(start, n):
        with lock:
            return ex.records(start, n)

    with pytest.raises(UsageError, match=r"locked: cannot be sent to the workers \(TypeError: .*lock"):
        loader.generator(locked, n=10)
    with pytest.raises(UsageError, match="not a function"):
        loader.generator(42, n=10)
    with pytest.raises(UsageError, match="n must be a non-negative integer"):
        loader.generator(ex.records, n=-5)
    assert not (tmp_path / "ds").exists()


def test_load_help_shows_the_generator_forms():
    out = run_cli("load", "--help").stdout
    assert "gen://PKG.MODULE:FUNCTION" in out and "gen://c:PATH:SYMBOL" in out


def test_several_inputs_take_a_python_generators_own_layout(tmp_path):
    """Without --layout, a run of several inputs takes the layout the first input's records
    declare, as a lone source does (the source's records_layout decides for both)."""
    uri = f"lmdb://{tmp_path}/ds"
    rep = loader.load(
        ["gen://sources.usergen_example:records?n=300", "gen://sources.usergen_example:records?n=200&start=300"],
        uri,
        workers=2,
        shards=2,
        batch_records=64,
    )
    assert rep.layout == "records" and rep.records == 500
    assert records_of(uri) == ex.records(0, 500).tobytes()
