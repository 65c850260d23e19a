"""Checked types (issue 32): the stores and serializers stages type-check strictly (their
ShardStore / Serializer interfaces check every backend and format), and the sources,
arrays and maintain stages with ``check_untyped_defs``, under the project's mypy
configuration (pyproject.toml).

Only errors whose cause lies outside these packages are let through, each named below with
the owner that removes it; an error of any other kind in them fails the test.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["loader/stores", "loader/serializers", "loader/sources", "loader/arrays", "loader/maintain"]

#: (file, error code, what the message says): errors caused outside these packages
PENDING = [
    # loader.model: Layout.capnp_module is unannotated; Manifest.batches / .runs are declared
    # BatchRows / RunList but also hold plain lists (the model's types fix them)
    ("loader/serializers/capnp_framing.py", "no-untyped-call", '"capnp_module"'),
    ("loader/maintain/compact.py", "assignment", '"BatchRows"'),
    ("loader/maintain/run_prune.py", "assignment", '"RunList"'),
]

ERROR = re.compile(r"^(?P<file>[^:]+):\d+: error: (?P<msg>.*)  \[(?P<code>[a-z-]+)\]$")


def _pending(file: str, code: str, msg: str) -> bool:
    return any(file == f and code == c and what in msg for f, c, what in PENDING)


def test_stores_serializers_sources_arrays_maintain_have_no_type_errors():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", *PACKAGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [m for m in map(ERROR.match, done.stdout.splitlines()) if m]
    assert errors or done.returncode == 0, done.stdout + done.stderr  # mypy itself ran
    unexpected = [m.group(0) for m in errors if not _pending(m["file"], m["code"], m["msg"])]
    assert not unexpected, "\n".join(unexpected)
