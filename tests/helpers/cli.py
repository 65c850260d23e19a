"""The installed `bulkload` command and the tools beside it in the test's virtualenv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    """The path of an installed command (the virtualenv's first, then PATH's)."""
    p = BIN / name
    return str(p) if p.exists() else (shutil.which(name) or name)


def run_cli(
    *args: object,
    input: str | bytes | None = None,
    check: bool = False,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[Any]:
    """Run the installed `bulkload` command; returns CompletedProcess (text output)."""
    e = dict(os.environ, **(env or {}))
    return subprocess.run(
        [tool("bulkload"), *map(str, args)],
        input=input,
        capture_output=True,
        timeout=timeout,
        check=check,
        env=e,
        text=not isinstance(input, bytes),
    )
