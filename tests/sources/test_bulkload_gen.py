"""The standalone `bulkload-gen N [START]` program installed with the package."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loader.sources.generators import generate

USAGE = "usage: bulkload-gen N [START]"
EXIT_CLOSED = 3  # documented in the usage text: output closed early


def find_bulkload_gen() -> str:
    p = Path(sys.executable).parent / "bulkload-gen"
    if p.exists():
        return str(p)
    found = shutil.which("bulkload-gen")
    if not found:
        pytest.fail("bulkload-gen is not installed (pip install . puts it next to python)")
    return found


GEN = find_bulkload_gen()


def run(*args, **kw):
    return subprocess.run([GEN, *map(str, args)], capture_output=True, timeout=60, **kw)


@pytest.mark.parametrize(
    "n, start",
    [
        (0, None),
        (1, None),
        (3, 0),
        (10922, 0),  # exactly one write block
        (10923, 5),  # one record more
        (25_000, 2**32 - 7),
        (40_000, 2**53 - 20_000),
        (1000, 2**63 - 500),
        (100, 2**64 - 100),  # ends at the last record index
        (1, 2**64 - 1),
    ],
)
def test_output_equals_in_process_generator(n, start):
    args = [n] if start is None else [n, start]
    r = run(*args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == b""
    assert r.stdout == generate("scidb96", start or 0, n, impl="python").tobytes()


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "missing N"),
        (["-1"], "N must be an unsigned decimal integer: '-1'"),
        (["abc"], "N must be an unsigned decimal integer: 'abc'"),
        (["10x"], "N must be an unsigned decimal integer: '10x'"),
        (["1.5"], "N must be an unsigned decimal integer: '1.5'"),
        ([""], "N must be an unsigned decimal integer: ''"),
        ([" 5"], "N must be an unsigned decimal integer: ' 5'"),
        (["+5"], "N must be an unsigned decimal integer: '+5'"),
        (["0x10"], "N must be an unsigned decimal integer: '0x10'"),
        (["18446744073709551616"], "N is too large: '18446744073709551616'"),
        (["99999999999999999999999"], "N is too large"),
        (["5", "-3"], "START must be an unsigned decimal integer: '-3'"),
        (["5", "7y"], "START must be an unsigned decimal integer: '7y'"),
        (["5", "18446744073709551616"], "START is too large"),
        (["2", "18446744073709551615"], "START+N-1 exceeds the largest record index"),
        (["18446744073709551615", "2"], "START+N-1 exceeds the largest record index"),
        (["1", "2", "3"], "too many arguments: '3'"),
    ],
)
def test_bad_arguments_exit_2_with_usage(args, message):
    r = run(*args)
    assert r.returncode == 2
    assert r.stdout == b""
    err = r.stderr.decode()
    assert err.startswith("bulkload-gen: ")
    assert message in err
    assert USAGE in err
    assert "3  output closed early" in err or "3 output closed early" in err


def test_help():
    r = run("--help")
    assert r.returncode == 0 and USAGE in r.stdout.decode() and r.stderr == b""


def test_closed_pipe_ends_quietly_with_documented_code():
    p = subprocess.Popen([GEN, "10000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = p.stdout.read(100)
    p.stdout.close()
    err = p.stderr.read()
    rc = p.wait(timeout=60)
    assert head == generate("scidb96", 0, 2).tobytes()[:100]
    assert rc == EXIT_CLOSED
    assert err == b""


def test_closed_pipe_in_a_shell_pipeline():
    bash = shutil.which("bash")
    if not bash:
        pytest.skip("no bash")
    r = subprocess.run(
        [bash, "-c", f"'{GEN}' 10000000 | head -c 100 | wc -c; echo rc=${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout.split() == ["100", f"rc={EXIT_CLOSED}"]
    assert r.stderr == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_write_error_exits_1_with_reason():
    with open("/dev/full", "wb") as full:
        r = subprocess.run([GEN, "1000"], stdout=full, stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 1
    assert r.stderr.decode().strip() == ("bulkload-gen: cannot write to standard output: No space left on device")


def test_write_to_a_file(tmp_path):
    out = tmp_path / "recs.bin"
    with open(out, "wb") as f:
        r = subprocess.run([GEN, "30000", "123"], stdout=f, stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 0 and r.stderr == b""
    assert out.read_bytes() == generate("scidb96", 123, 30000).tobytes()
