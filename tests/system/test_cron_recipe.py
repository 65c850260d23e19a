"""Scheduled ingestion (README "Cron" / systemd recipes), issue 28 #15.

- ``--quiet`` means no progress, never no warnings: a bad file skipped by a quiet ingest
  (or a quiet pipeline) is a warning on stderr every run;
- with ``--log-format json`` every line on stderr is a JSON object: progress, warnings and
  the final error line (also a command-line parsing error, and the option given after
  the command);
- the README's cron line keeps the command's exit code through ``| logger``.
"""

import json
import subprocess
from pathlib import Path

import pytest
from helpers import run_cli, tool

from loader.model.layouts import get_layout
from loader.sources.generators import generate


def readme_recipe() -> tuple[str, str]:
    """The documented crontab lines (docs/guides/scheduled.md "Cron": the SHELL= line and the
    job's line), as a user pastes them; /srv/bulkload is the working directory."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "scheduled.md").read_text()
    block = text.split("## Cron", 1)[1].split("```", 2)[1]
    lines = [ln for ln in block.splitlines() if ln.strip()]
    shell = next(ln for ln in lines if ln.startswith("SHELL="))
    job = next(ln for ln in lines if ln.startswith("*/5 "))
    return shell, job


RECIPE = readme_recipe()


def incoming(tmp_path, bad: bool = True):
    """tmp_path/incoming with a good file of 1,000 scidb96 records and (bad) a partial record."""
    d = tmp_path / "incoming"
    d.mkdir()
    (d / "a.bin").write_bytes(generate(get_layout("scidb96"), 0, 1000, impl="c").tobytes())
    if bad:
        (d / "b.bin").write_bytes(b"x" * 100)
    (tmp_path / "data").mkdir()
    return d


def json_lines(stderr: str) -> list[dict]:
    lines = stderr.splitlines()
    assert lines, "nothing on stderr"
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON line on stderr: {line!r}")
    return out


def test_a_quiet_ingest_warns_of_a_bad_file_every_run(tmp_path):
    d = incoming(tmp_path)
    uri = f"lmdb://{tmp_path}/data/ds"
    for _ in range(2):  # the second run has nothing new: the bad file is still reported
        p = run_cli("ingest", uri, "--from", d, "--pattern", "*.bin", "--on-bad-file", "skip", "--quiet")
        assert p.returncode == 0, p.stderr
        assert p.stdout == "" and len(p.stderr.splitlines()) == 1  # quiet: no progress
        assert "skipping bad file b.bin" in p.stderr
    pipe = tmp_path / "p.toml"
    pipe.write_text(f'[job]\ndataset = "{uri}"\n[ingest]\nfrom = "{d}"\npattern = "*.bin"\non_bad_file = "skip"\n')
    p = run_cli("run", pipe, "--quiet")
    assert p.returncode == 0 and "skipping bad file b.bin" in p.stderr, p.stderr


def test_json_log_format_makes_every_stderr_line_json(tmp_path):
    d = incoming(tmp_path)
    uri = f"lmdb://{tmp_path}/data/ds"
    # progress (not quiet)
    p = run_cli("--log-format", "json", "load", "gen://scidb96?n=2000", f"lmdb://{tmp_path}/data/g", "--shards", "1")
    assert p.returncode == 0, p.stderr
    assert any(r.get("stage") == "load" and r["level"] == "info" for r in json_lines(p.stderr))
    # a warning, quiet
    p = run_cli("--log-format", "json", "ingest", uri, "--from", d, "--pattern", "*.bin", "--on-bad-file", "skip", "-q")
    assert p.returncode == 0, p.stderr
    assert [r["file"] for r in json_lines(p.stderr) if r["level"] == "warning"] == ["b.bin"]
    # errors: the command's, a parsing error, and the option given after the command
    for args, code in (
        (["--log-format", "json", "ingest", uri, "--from", d, "--on-bad-file", "fail"], 1),
        (["--log-format", "json", "info", f"lmdb://{tmp_path}/nope"], 2),
        (["--log-format", "json", "load", "--no-such-option"], 2),
        (["info", f"lmdb://{tmp_path}/nope", "--log-format", "json"], 2),
        (["--log-format", "json", "--engine", "spark", "info", uri], 2),
    ):
        p = run_cli(*args)
        assert p.returncode == code, (args, p.stderr)
        last = json_lines(p.stderr)[-1]
        assert last["level"] == "error" and last["exit_code"] == code and last["msg"], last


@pytest.mark.parametrize("bad_option, code", [(None, 0), ("--on-bad-file=fail", 1), ("--shards=0", 2)])
def test_the_cron_recipe_keeps_the_exit_code(tmp_path, bad_option, code):
    """The crontab line, run by the shell cron runs it with, exits with bulkload's code."""
    incoming(tmp_path, bad=code == 1)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "bulkload").symlink_to(tool("bulkload"))
    shell = RECIPE[0].split("=", 1)[1]
    line = RECIPE[1].split(" ", 5)[5].replace("/srv/bulkload", str(tmp_path))
    if bad_option:
        line = line.replace(" --quiet", f" --quiet {bad_option}")
    p = subprocess.run([shell, "-c", line], capture_output=True, text=True, timeout=120)
    assert p.returncode == code, p.stderr
