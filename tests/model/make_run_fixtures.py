"""Write the golden files of tests/model/test_runs_typed.py: the manifests (and what
`bulkload info --json` printed of their runs and garbage) that the scenarios of
run_scenarios.py leave, made by the code that runs this script.

They were made by main's code from before runs were typed (commit 1c2a27c), so that the
tests prove today's code reads and writes that format unchanged:

    git archive 1c2a27c | tar -x -C /tmp/old   # plus the built .so files of loader/
    PYTHONPATH=/tmp/old .venv/bin/python tests/model/make_run_fixtures.py tests/model/fixtures/runs

Re-make them only on purpose (a deliberate, versioned format change).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from run_scenarios import BULKLOAD, run_all

from loader.stores.spec import parse_dataset_uri


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    base = Path(tempfile.mkdtemp(prefix="run-fixtures-"))

    def snap(name: str, uri: str) -> None:
        root = Path(parse_dataset_uri(uri).root)
        (out / f"{name}.manifest.json").write_bytes((root / "manifest.json").read_bytes())
        p = subprocess.run([BULKLOAD, "info", uri, "--json"], capture_output=True, text=True, check=True)
        info = json.loads(p.stdout)
        (out / f"{name}.info.json").write_text(json.dumps({k: info[k] for k in ("runs", "garbage")}, indent=1))
        print(name, file=sys.stderr)

    try:
        run_all(base, snap)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
