"""The per-issue scripts in bench/ run: each answers --help, and the documents benchmark
(which nothing else imports) runs end to end on a tiny input - it had failed with an
AttributeError since docs/layout.py was split, unnoticed."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_a_bench_script_answers_help(script):
    p = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "usage" in p.stdout.lower()


def test_the_documents_benchmark_runs_on_a_tiny_input(tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            str(BENCH / "docs.py"),
            "--parts",
            "pipeline",
            "--n",
            "2000",
            "--repeats",
            "1",
            "--lookups",
            "20",
            "--dir",
            str(tmp_path / "work"),
            "--out",
            str(tmp_path / "docs.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "docs.json").stat().st_size > 0
