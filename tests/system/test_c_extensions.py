"""The C extensions as a whole (issue 32): each one's source lies beside the package that
imports it and is named for its import path, each has a ``.pyi`` stub that matches what the
module holds at runtime (mypy's stubtest), and every C source compiles without a warning
under ``-Wall -Wextra`` (the test build, ``make install``, makes warnings errors)."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXTENSIONS = [
    "loader.stores._lmdbnode",
    "loader.stores._preads",
    "loader.serializers._shuffle",
    "loader.docs._docsio",
    "loader.sources._gen",
]
#: stub-only names stubtest cannot see at runtime: C types declare ``__buffer__`` only on 3.12+
STUBTEST_ALLOWLIST = ["loader.docs._docsio.Buffer.__buffer__"]


def _source(name: str) -> Path:
    return REPO / (name.replace(".", "/") + "module.c")


@pytest.mark.parametrize("name", EXTENSIONS)
def test_each_extension_lies_beside_its_package_named_for_its_import_path(name):
    package, _, module = name.rpartition(".")
    mod = importlib.import_module(name)
    assert mod.__name__ == name  # the PyModuleDef's name: what tracebacks and pickles show
    assert Path(mod.__file__).parent == Path(importlib.import_module(package).__file__).parent
    assert _source(name).is_file(), f"the C source of {name} is not beside its package"
    assert _source(name).with_name(f"{module}.pyi").is_file(), f"{name} has no .pyi stub beside it"
    for fn in vars(mod).values():  # each function says its signature (inspect, stubtest)
        if callable(fn) and not isinstance(fn, type):
            assert fn.__text_signature__, f"{name}.{fn.__name__} has no text signature"


def test_stubs_match_what_each_extension_holds_at_runtime(tmp_path):
    """stubtest imports each module and compares it with its stub: every name on both
    sides, every function's parameters (from its text signature). The stubs are checked
    alone (copied with empty package stubs), so that errors elsewhere in loader/ do not
    count here."""
    for name in EXTENSIONS:
        stub = _source(name).with_name(name.rpartition(".")[2] + ".pyi")
        dest = tmp_path / "stubs" / stub.relative_to(REPO)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(stub, dest)
        for parent in dest.relative_to(tmp_path / "stubs").parents[:-1]:
            (tmp_path / "stubs" / parent / "__init__.pyi").touch()
    allow = tmp_path / "allowlist.txt"
    allow.write_text("\n".join(STUBTEST_ALLOWLIST) + "\n")
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "--concise",
            "--mypy-config-file",
            str(tmp_path / "mypy.ini"),
            "--allowlist",
            str(allow),
            *EXTENSIONS,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"MYPYPATH": str(tmp_path / "stubs"), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert got.returncode == 0, got.stdout + got.stderr


def test_every_c_source_compiles_without_a_warning():
    """-Wall -Wextra with Python's own flags and headers, each extension and the
    generator library and program: what ``make install`` builds with -Werror."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    flags = (sysconfig.get_config_var("CFLAGS") or "").split()
    include = [
        "-I",
        sysconfig.get_paths()["include"],
        "-I",
        str(REPO / "generators"),
        "-I",
        str(REPO / "third_party/lz4"),
        "-I",
        str(REPO / "third_party/xxhash"),
    ]
    sources = sorted(REPO.glob("loader/*/*.c")) + sorted(REPO.glob("generators/*.c"))
    assert len(sources) >= 5 + 4
    for src in sources:
        got = subprocess.run(
            [*cc, *flags, *include, "-O3", "-ffp-contract=off", "-Wall", "-Wextra", "-fsyntax-only", str(src)],
            capture_output=True,
            text=True,
        )
        assert got.returncode == 0 and not got.stderr, f"{src.relative_to(REPO)}:\n{got.stderr}"
