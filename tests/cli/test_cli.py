"""The CLI: one-line errors with the right exit codes, and the happy paths of each command."""

import json

import pytest
from helpers import run_cli

from loader.model.layouts import get_layout
from loader.sources.generators import generate

LAY = get_layout("scidb96")


def one_line_error(p, code: int, text: str) -> None:
    assert p.returncode == code, (p.returncode, p.stderr)
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert lines == [lines[0]] and lines[0].startswith("bulkload: error: "), p.stderr
    assert text in lines[0], lines[0]


@pytest.mark.parametrize(
    "args,code,text",
    [
        (["generate", "-1"], 2, "N must be a non-negative integer, got '-1'"),
        (["generate", "abc"], 2, "N must be a non-negative integer, got 'abc'"),
        (["generate", "1.5"], 2, "N must be a non-negative integer, got '1.5'"),
        (["generate", "1e30"], 2, "N is too large (1e30)"),
        (["generate", "5", "--start", "-3"], 2, "--start must be a non-negative integer"),
        (["generate", "5", "--start", str(2**64 - 2)], 2, "--start + N exceeds 2**64"),
        (["generate", "5", "--layout", "nope"], 2, "unknown layout 'nope'; known layouts: "),
        (["generate", "5", "--impl", "java"], 2, "--impl must be c or python"),
        (["generate", "5", "--out", "/nonexistent/dir/x.bin"], 2, "cannot write /nonexistent/dir/x.bin"),
        (["load", "foo://x", "lmdb:///tmp/never"], 2, "unknown source scheme in 'foo://x'"),
        (["load", "gen://scidb96?n=10", "s3://bucket/x"], 2, "unknown dataset scheme 's3'"),
        (["load", "gen://scidb96?n=10", "/tmp/plain/path"], 2, "has no scheme; use lmdb://PATH"),
        (["load", "gen://nope?n=10", "lmdb:///tmp/never"], 2, "unknown layout 'nope'"),
        (["load", "gen://scidb96", "lmdb:///tmp/never"], 2, "needs n=COUNT"),
        (["load", "gen://scidb96?n=-5", "lmdb:///tmp/never"], 2, "n must be a non-negative integer"),
        (["load", "/nonexistent/recs.bin", "lmdb:///tmp/never"], 2, "source file /nonexistent/recs.bin does not exist"),
        (["load", "gen://scidb96?n=10", "lmdb:///nonexistent/dir/ds"], 2, "directory /nonexistent/dir does not exist"),
        (["load", "gen://scidb96?n=10", "lmdb:///proc/ds"], 2, "cannot create dataset lmdb:///proc/ds"),
        (["load", "gen://scidb96?n=10", "lmdb:///tmp/never", "--format", "xml"], 2, "unknown format 'xml'"),
        (["load", "gen://scidb96?n=10", "lmdb:///tmp/never", "--compression", "gzip"], 2, "unknown compression 'gzip'"),
        (["load", "gen://scidb96?n=10", "lmdb:///tmp/never", "--workers", "0"], 2, "--workers must be at least 1"),
        (["load", "gen://scidb96?n=10", "lmdb:///tmp/never", "--layout", "nope"], 2, "unknown layout 'nope'"),
        (["info", "lmdb:///nonexistent/ds"], 2, "no dataset at lmdb:///nonexistent/ds"),
        (["verify", "mem://no-such-dataset-here"], 2, "no dataset at mem://no-such-dataset-here"),
    ],
)
def test_errors_are_one_line_with_exit_code(args, code, text):
    one_line_error(run_cli(*args), code, text)


def test_generate_to_file_and_stdout(tmp_path):
    out = tmp_path / "r.bin"
    p = run_cli("generate", "1234", "--start", "4294967290", "--out", out)
    assert p.returncode == 0, p.stderr
    want = generate(LAY, 4294967290, 1234, impl="c").tobytes()
    assert out.read_bytes() == want
    p = run_cli("generate", "1234", "--start", "4294967290", "--impl", "python", input=b"")
    assert p.returncode == 0 and p.stdout == want


def test_load_info_verify_json(tmp_path):
    uri = f"lmdb://{tmp_path}/ds?shards=2"
    p = run_cli("load", "gen://scidb96?n=3000", uri, "--batch-records", "1000", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["records"] == 3000 and rep["batches"] == 3 and rep["shards"] == 2
    assert rep["mb_per_s"] > 0 and rep["peak_rss_bytes"] > 0
    p = run_cli("info", f"lmdb://{tmp_path}/ds", "--json")
    info = json.loads(p.stdout)
    assert info["records"] == 3000 and info["layout"]["name"] == "scidb96"
    assert info["runs"][0]["status"] == "done"
    p = run_cli("info", f"lmdb://{tmp_path}/ds")
    assert p.returncode == 0 and "3,000 in 3 batches" in p.stdout
    p = run_cli("verify", f"lmdb://{tmp_path}/ds", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["ok"] is True


def test_progress_log_lines_when_not_a_terminal(tmp_path):
    p = run_cli("load", "gen://scidb96?n=2000", f"lmdb://{tmp_path}/ds")
    assert p.returncode == 0
    assert "load: 2,000/2,000 records" in p.stderr
    p = run_cli("--log-format", "json", "load", "gen://scidb96?n=2000&start=2000", f"lmdb://{tmp_path}/ds")
    ev = [json.loads(ln) for ln in p.stderr.splitlines() if ln.startswith("{")]
    assert ev and ev[-1]["records"] == 2000 and ev[-1]["stage"] == "load"
    p = run_cli("load", "gen://scidb96?n=2000&start=4000", f"lmdb://{tmp_path}/ds", "--quiet")
    assert p.returncode == 0 and p.stderr == "" and p.stdout == ""


def test_version_prints_the_package_version():
    from importlib.metadata import version

    p = run_cli("--version")
    assert p.returncode == 0 and p.stdout == f"bulkload {version('bulkload')}\n" and p.stderr == ""


@pytest.mark.parametrize(
    "option",
    [
        ["--log-format", "json"],
        ["--log-format=json"],
        ["--engine", "spark"],
        ["--engine=dask", "--scheduler", "nowhere"],
    ],
)
def test_group_options_are_accepted_after_the_command(tmp_path, option):
    """--log-format, --engine and --scheduler work after the subcommand as before it."""
    uri = f"lmdb://{tmp_path}/ds"
    before = run_cli(*option, "info", uri)
    after = run_cli("info", uri, *option)
    assert after.returncode == before.returncode == 2
    assert after.stderr == before.stderr or json.loads(after.stderr)["msg"] == json.loads(before.stderr)["msg"]
    assert "No such option" not in after.stderr
    if "--log-format" in option[0]:
        assert json.loads(after.stderr)["level"] == "error"
