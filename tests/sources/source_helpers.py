"""Helpers of the source tests: scidb96 records, what a dataset holds, one-line errors."""

from __future__ import annotations

import subprocess

import numpy as np
from typer.testing import CliRunner

import loader
from loader.model.layouts import get_layout
from loader.sources.generators import generate

LAY = get_layout("scidb96")
RS = LAY.record_size


def records(start: int, n: int) -> np.ndarray:
    """Records start..start+n-1 of the scidb96 generator."""
    return generate(LAY, start, n, impl="c")


def snapshot(uri):
    """(batch rows, record bytes) after verify: what must be byte-identical."""
    with loader.open(uri) as ds:
        assert ds.verify().ok
        return [b.row() for b in ds.manifest.batches], ds.read_records().tobytes()


def cli(*args) -> subprocess.CompletedProcess:
    """`bulkload ARGS` in this process (fast: for errors found before any worker starts)."""
    from loader.cli.main import app

    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr)


def error_line(p, code: int, *texts: str) -> str:
    """The one error line of a finished `bulkload` (exit ``code``), holding ``texts``."""
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("bulkload: error: "), p.stderr
    for t in texts:
        assert t in lines[0], (t, lines[0])
    return lines[0]
