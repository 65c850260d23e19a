"""Progress shows the input as it flows: a slow stream (stdin, a FIFO) logs growing record
counts before it ends, a well-compressed load (lz4 on gen:// records: its workers write
one small group at the end) logs records before it ends, and a bar with no known total
shows the records counted, not 0.0 %. Real `bulkload` processes, log lines as JSON."""

import json
import os
import subprocess
import sys

import pytest
from helpers import tool

from loader.infra.progress import Progress

#: a writer of 10 x 1,000 scidb96 records, 0.3 s apart (about 3 s in all)
SLOW_WRITER = """
import sys, time
from loader.sources.generators import generate
out = open(sys.argv[1], "wb") if len(sys.argv) > 1 else sys.stdout.buffer
for i in range(10):
    out.write(generate("scidb96", 1000 * i, 1000).tobytes())
    out.flush()
    time.sleep(0.3)
"""


def progress_events(stderr: str) -> list[dict]:
    return [e for e in map(json.loads, filter(None, stderr.splitlines())) if "records_per_s" in e]


def bulkload(*args, stdin=None, seconds="0.2"):
    env = dict(os.environ, BULKLOAD_PROGRESS_SECONDS=seconds)
    return subprocess.Popen(
        [tool("bulkload"), "--log-format", "json", *map(str, args)],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("via", ["stdin", "fifo"])
def test_a_slow_stream_logs_growing_record_counts_before_it_ends(tmp_path, via):
    uri = f"lmdb://{tmp_path}/ds"
    if via == "fifo":
        fifo = tmp_path / "in.fifo"
        os.mkfifo(fifo)
        writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(fifo)])
        p = bulkload("load", fifo, uri)
    else:
        writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITER], stdout=subprocess.PIPE)
        p = bulkload("load", "-", uri, stdin=writer.stdout)
        writer.stdout.close()
    _, err = p.communicate(timeout=60)
    assert writer.wait(10) == 0 and p.returncode == 0, err
    counts = [e["records"] for e in progress_events(err)]
    assert counts[-1] == 10_000 and counts == sorted(counts), counts
    during = [c for c in counts if 0 < c < 10_000]
    assert len(set(during)) >= 2, counts  # growing while the stream flows (a batch is 10,000 records)
    assert all(e["total"] is None for e in progress_events(err))


def test_a_well_compressed_load_logs_records_before_it_ends(tmp_path):
    n = 4_000_000
    p = bulkload(
        "load",
        f"gen://scidb96?n={n}",
        f"lmdb://{tmp_path}/ds",
        "--workers",
        1,
        "--shards",
        1,
        "--compression",
        "lz4",
        "--json",
        seconds="0.05",
    )  # it lasts about 0.5 s
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert json.loads(out)["stored_bytes"] < 16 << 20  # one group per shard: written at the end
    counts = [e["records"] for e in progress_events(err)]
    assert counts[-1] == n and any(0 < c < n for c in counts), counts


def test_a_bar_without_a_total_shows_the_records_counted(capsys):
    with Progress("load", None, 96, mode="bar") as prog:
        prog.advance(1234)
    err = capsys.readouterr().err
    assert "1,234 records" in err and "0.0%" not in err, err
