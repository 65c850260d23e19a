"""Workers never import or run the caller's ``__main__`` (infra/mainless.py, issue 28 item 4).

A script without an ``if __name__ == "__main__":`` guard, ``python -c``, a script on stdin,
``python -m MODULE`` and a guarded script each load exactly once: one ``done`` run of
exactly the records asked for, exit 0, no traceback - in-process (the default for a small
load), with one worker and with two.
"""

import json
import subprocess
import sys

import pytest
from conftest import run_cli

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
    return subprocess.run([sys.executable, *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=120)


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
    code = ("from loader.infra import mainless\n"
            "d = mainless.preparation_data('w')\n"
            "print(sorted(set(d) & set(mainless.MAIN_KEYS)), d['sys_argv'])\n")
    (tmp_path / "script.py").write_text(code)
    p = python(["script.py"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[] ['script.py']"


@pytest.mark.parametrize("how", ["script", "stdin"])
def test_generator_defined_in_main_is_refused_with_advice(tmp_path, how):
    uri = f"lmdb://{tmp_path}/ds"
    code = ("import numpy as np, loader\n"
            "def gen(start, n):\n"
            "    return np.zeros(n, dtype=loader.layout('scidb96').dtype)\n"
            f"loader.load(loader.generator(gen, n={N}), {uri!r}, workers=2)\n")
    if how == "script":
        (tmp_path / "script.py").write_text(code)
        p = python(["script.py"], tmp_path)
    else:
        p = python(["-"], tmp_path, stdin=code)
    assert p.returncode == 1
    assert "UsageError: generator __main__:gen is defined in the program being run (__main__)" in p.stderr
    assert "move the function into a module" in p.stderr
    assert "loaded" not in p.stdout and not (tmp_path / "ds" / "manifest.json").exists()


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
