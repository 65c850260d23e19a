"""The README's reading examples (examples/reading/*.py, quoted in its "Reading" section)
run as saved: each a complete script, in a fresh directory, twice (a second run replaces
its dataset), with real Polars and DuckDB."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "reading").glob("*.py"))


def test_there_are_reading_examples():
    assert {p.name for p in EXAMPLES} >= {"scan.py", "box.py", "polars_filter.py", "duckdb_query.py"}


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_each_reading_example_runs_as_saved(script, tmp_path):
    for _ in range(2):
        p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() and "Traceback" not in p.stderr
