"""Type-check a snippet of code that uses the package, as a user's checker would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def mypy_lines(snippet: str, tmp_path: Path) -> list[str]:
    """What mypy (default options, the package read but not reported on) says of
    ``snippet``: one ``LINE: error|note: ...`` entry each, the file name left out."""
    path = tmp_path / "use.py"
    path.write_text(snippet)
    options = ["--config-file", "/dev/null", "--cache-dir", str(tmp_path / "cache"), "--follow-imports=silent"]
    p = subprocess.run(
        [sys.executable, "-m", "mypy", *options, "--ignore-missing-imports", "--no-error-summary", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    lines = [line.split("use.py:", 1)[1] for line in p.stdout.splitlines() if "use.py:" in line]
    if not lines and p.returncode != 0:
        raise AssertionError(p.stdout + p.stderr)
    return lines
