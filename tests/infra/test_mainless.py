"""Workers never import or run the caller's ``__main__`` (infra/mainless.py, issue 28 item 4).

A script without an ``if __name__ == "__main__":`` guard, ``python -c``, a script on stdin,
``python -m MODULE`` and a guarded script each load exactly once: one ``done`` run of
exactly the records asked for, exit 0, no traceback - in-process (the default for a small
load), with one worker and with two. A generator defined in such a program is sent to the
workers by value (sources/user_gen.py), so it loads once too.
"""

import json
import subprocess
import sys

import pytest
from helpers import run_cli, tool

N = 1000


def load_call(uri: str, workers: int | None) -> str:
    w = "" if workers is None else f", workers={workers}"
    return f"import loader\nreport = loader.load('gen://scidb96?n={N}', {uri!r}, shards=2{w})\nprint(report.records)\n"


def runs_of(uri: str) -> tuple[int, list[tuple[str, str]]]:
    p = run_cli("info", uri, "--json", check=True)
    info = json.loads(p.stdout)
    return info["records"], [(r["kind"], r["status"]) for r in info["runs"]]


def assert_loaded_once(p: subprocess.CompletedProcess, uri: str) -> None:
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(N)]
    assert runs_of(uri) == (N, [("load", "done")])


def python(args: list[str], cwd, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("workers", [None, 1, 2])
def test_script_without_main_guard_loads_once(tmp_path, workers):
    uri = f"lmdb://{tmp_path}/ds"
    (tmp_path / "script.py").write_text(load_call(uri, workers))
    assert_loaded_once(python(["script.py"], tmp_path), uri)


@pytest.mark.parametrize("how", ["-c", "stdin", "-m", "guarded"])
def test_every_kind_of_main_program_loads_once(tmp_path, how):
    uri = f"lmdb://{tmp_path}/ds"
    code = load_call(uri, 2)
    if how == "-c":
        p = python(["-c", code], tmp_path)
    elif how == "stdin":
        p = python(["-"], tmp_path, stdin=code)
    elif how == "-m":
        (tmp_path / "loadmod.py").write_text(code)
        p = python(["-m", "loadmod"], tmp_path)
    else:
        body = "".join(f"    {line}\n" for line in code.splitlines())
        (tmp_path / "script.py").write_text(f"if __name__ == '__main__':\n{body}")
        p = python(["script.py"], tmp_path)
    assert_loaded_once(p, uri)


def test_worker_processes_have_no_main_module_of_the_caller(tmp_path):
    """The preparation data a worker gets names no main module (the mechanism itself)."""
    code = (
        "from loader.infra import mainless\n"
        "d = mainless.preparation_data('w')\n"
        "print(sorted(set(d) & set(mainless.MAIN_KEYS)), d['sys_argv'])\n"
    )
    (tmp_path / "script.py").write_text(code)
    p = python(["script.py"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[] ['script.py']"


#: a program whose generator is defined in it (``__main__``): it says when its top-level code
#: runs, and its generator fails if the worker calling it has imported the caller's program
GEN_PROGRAM = """\
import sys
import numpy as np
import loader
SCRIPT_MARK = True
print("top-level code ran", flush=True)
def gen(start, n):
    if getattr(sys.modules["__main__"], "SCRIPT_MARK", False):
        raise RuntimeError("this worker imported the caller's __main__")
    j = np.arange(start, start + n, dtype=np.uint64)
    out = np.empty(n, dtype=[("key", "<u8"), ("half", "<f8")])
    out["key"], out["half"] = j, j / 2 + BODY
    return out
"""


def reference(start: int, n: int, body: int = 0):
    """What GEN_PROGRAM's gen(start, n) returns (numpy, in the test's process)."""
    import numpy as np

    j = np.arange(start, start + n, dtype=np.uint64)
    out = np.empty(n, dtype=[("key", "<u8"), ("half", "<f8")])
    out["key"], out["half"] = j, j / 2 + body
    return out


def run_gen_program(
    tmp_path, how: str, uri: str, workers: int | None = 2, body: int = 0, start: int = 0, extra: str = ""
) -> subprocess.CompletedProcess:
    """GEN_PROGRAM loading gen(start, N) into ``uri``, run as ``how``: a script with or without
    the ``__main__`` guard, ``python -c`` or a script on stdin; it prints the report."""
    w = "" if workers is None else f", workers={workers}"
    load = (
        f"r = loader.load(loader.generator(gen, n={N}, start={start}), {uri!r}, shards=2{w}{extra})\n"
        "print(r.status, r.records, r.source)\n"
    )
    prog = GEN_PROGRAM.replace("BODY", str(body))
    if how == "guarded":
        prog += "if __name__ == '__main__':\n" + "".join(f"    {line}\n" for line in load.splitlines())
    else:
        prog += load
    if how in ("guarded", "unguarded"):
        (tmp_path / "script.py").write_text(prog)
        return python(["script.py"], tmp_path)
    return python(["-c", prog], tmp_path) if how == "-c" else python(["-"], tmp_path, stdin=prog)


def records_in(uri: str):
    import loader

    with loader.open(uri) as ds:
        assert ds.verify().ok
        return ds.read_records(0, ds.manifest.records)


@pytest.mark.parametrize("workers", [None, 2])
@pytest.mark.parametrize("how", ["guarded", "unguarded", "-c", "stdin"])
def test_generator_defined_in_main_loads_exactly_once(tmp_path, how, workers):
    """A generator defined in the program being run is sent to the workers by value
    (cloudpickle): one run of exactly its records; the program's top-level code runs once
    and no worker imports it (gen fails in a process whose __main__ is the program)."""
    uri = f"lmdb://{tmp_path}/ds"
    p = run_gen_program(tmp_path, how, uri, workers, start=7)
    assert "Traceback" not in p.stderr and p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["top-level code ran", f"loaded {N} gen://__main__:gen?n={N}&start=7"]
    assert runs_of(uri) == (N, [("load", "done")])
    assert records_in(uri).tobytes() == reference(7, N).tobytes()


@pytest.mark.parametrize("how", ["unguarded", "-c"])
def test_generator_in_main_rerun_is_already_loaded_and_a_changed_body_is_a_new_run(tmp_path, how):
    """The fingerprint of a generator sent by value is the same in every run of the same
    program (the script's file; without one, the function's code), so a re-run loads
    nothing more; a changed function body is another generator: a new run."""
    uri = f"lmdb://{tmp_path}/ds"
    said = [run_gen_program(tmp_path, how, uri, body=body) for body in (0, 0, 1)]
    for p in said:
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert [p.stdout.splitlines()[-1].split()[:2] for p in said] == [
        ["loaded", str(N)],
        ["already-loaded", "0"],
        ["loaded", str(N)],
    ]
    assert runs_of(uri) == (2 * N, [("load", "done"), ("load", "done")])
    assert records_in(uri).tobytes() == reference(0, N).tobytes() + reference(0, N, body=1).tobytes()


def test_the_copied_launch_is_cpythons_but_for_the_preparation_data():
    """mainless._Popen._launch is CPython's popen_forkserver.Popen._launch with one call
    changed: a Python whose _launch differs fails here, not in a user's script."""
    import ast
    import inspect
    import textwrap
    from multiprocessing import popen_forkserver

    from loader.infra import mainless

    def body(fn) -> str:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        tree.body = [s for s in tree.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        return ast.unparse(tree)

    ours = body(mainless._Popen._launch).replace("mp_context.set_spawning_popen", "set_spawning_popen")
    assert ours == body(popen_forkserver.Popen._launch).replace("spawn.get_preparation_data(", "preparation_data(")


SHADOWS = ("loader", "lmdb", "numpy", "xxhash")


@pytest.mark.parametrize("shadow", SHADOWS)
def test_workers_never_import_a_module_of_the_current_directory(tmp_path, shadow):
    """The forkserver runs ``python -c``, which puts the current directory first on its
    path: a package there named like one the workers import (a user's ``loader/``, another
    checkout of bulkload, a stray ``numpy.py``) replaced the real one in every worker."""
    cwd = tmp_path / "cwd"
    marker = tmp_path / "imported"
    pkg = cwd / shadow
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise RuntimeError('shadow')\n")
    uri = f"lmdb://{tmp_path}/ds"
    p = subprocess.run(
        [str(tool("bulkload")), "load", f"gen://scidb96?n={N}", uri, "--workers", "2", "--shards", "2", "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["in_process"] is False
    assert not marker.exists()
    assert runs_of(uri) == (N, [("load", "done")])
