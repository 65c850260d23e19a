"""The public API is visible to type checkers (issue 32): `loader.load` and the others are
real functions with every keyword in their signature (engine, keep_runs: none added by a
wrapper), `loader.__all__` names only what exists, and the package is marked typed."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import loader

REPO = Path(__file__).resolve().parents[2]

SNIPPET = """\
import loader

report = loader.load("gen://scidb96?n=10", "lmdb://x", keep_runs=2, engine="local", batch_records=5)
reveal_type(report)
reveal_type(loader.finalize("lmdb://x", dims="i0:1,i1:2", memory_budget="1g", scheduler="local:2"))
reveal_type(loader.runs("lmdb://x", limit=3))
loader.load("gen://scidb96?n=10", "lmdb://x", batch_record=5)
loader.no_such_command
"""


def test_a_type_checker_sees_every_public_function_and_keyword(tmp_path):
    (tmp_path / "use.py").write_text(SNIPPET)
    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "/dev/null", "--cache-dir", str(tmp_path / "cache")]
        + ["--follow-imports=silent", "--ignore-missing-imports", "--no-error-summary", str(tmp_path / "use.py")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    lines = [line.split("use.py:", 1)[1] for line in p.stdout.splitlines() if "use.py:" in line]
    assert lines == [
        '4: note: Revealed type is "loader.loading.report.LoadReport"',
        '5: note: Revealed type is "loader.arrays.report.FinalizeReport"',
        '6: note: Revealed type is "list[loader.model.runs.Run]"',
        '7: error: Unexpected keyword argument "batch_record" for "load"; did you mean "batch_records"?  [call-arg]',
        '7: note: "load" defined in "loader.api.public"',
        '8: error: Module has no attribute "no_such_command"  [attr-defined]',
    ], p.stdout + p.stderr


def test_every_name_of_all_exists_and_the_package_is_marked_typed():
    for name in loader.__all__:
        assert getattr(loader, name) is not None
    assert (REPO / "loader" / "py.typed").is_file()
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["loader"]  # installed with the package
