"""loader/docs/ledger.py: a ledger file reads back as written; any damaged, cut or missing
file reads as None (so it only costs re-reading, never a wrong "already ingested"); the
newest entry of an id wins; the manifest's exclusions apply; a run's ledger reuses an
earlier attempt's stats of the same plan and deletes the files no manifest names."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader.docs.layout import DOCS
from loader.docs.ledger import (
    LEDGER_DIR,
    LEDGER_KEY,
    Ledger,
    StatOf,
    load_ledger,
    read_ledger,
    write_ledger,
    write_run_ledger,
)
from loader.model.manifest import Manifest

u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


def manifest(refs) -> Manifest:
    return Manifest(DOCS.to_dict(), "block", "zstd", "lmdb", 1, 100, extra={LEDGER_KEY: refs})


@given(st.lists(st.tuples(u64, i64, i64), max_size=40), st.data())
def test_a_ledger_reads_back_as_written(tmp_path_factory, rows, data):
    path = str(tmp_path_factory.mktemp("led") / "x.ledger")
    ids, sizes, mtimes = (np.array([r[k] for r in rows], dt) for k, dt in enumerate((np.uint64, np.int64, np.int64)))
    n_plan = data.draw(st.integers(0, len(rows)))
    write_ledger(path, ids, sizes, mtimes, n_plan)
    led, got_plan = read_ledger(path)
    assert got_plan == n_plan
    assert (led.ids.tolist(), led.sizes.tolist(), led.mtimes.tolist()) == (
        ids.tolist(),
        sizes.tolist(),
        mtimes.tolist(),
    )
    assert os.listdir(os.path.dirname(path)) == ["x.ledger"]  # no temporary file left


def test_every_damaged_or_cut_ledger_reads_as_none(tmp_path):
    path = str(tmp_path / "x.ledger")
    write_ledger(path, np.array([3, 7, 9], np.uint64), np.array([10, 20, 30]), np.array([1, 2, 3]), 2)
    good = Path(path).read_bytes()
    assert read_ledger(path) is not None and len(good) == 32 + 3 * 24
    for at in range(len(good)):  # one bit flipped anywhere
        with open(path, "wb") as f:
            f.write(good[:at] + bytes([good[at] ^ 0x10]) + good[at + 1 :])
        assert read_ledger(path) is None, at
    for cut in (0, 8, 31, 32, len(good) - 1):  # cut short
        with open(path, "wb") as f:
            f.write(good[:cut])
        assert read_ledger(path) is None, cut
    with open(path, "wb") as f:  # one entry more than it says
        f.write(good + bytes(24))
    assert read_ledger(path) is None
    os.unlink(path)
    assert read_ledger(path) is None


def test_the_newest_entry_of_an_id_wins_and_unchanged_compares_all_three():
    old = Ledger(np.array([1, 5, 9], np.uint64), np.array([10, 50, 90]), np.array([1, 5, 9]))
    new = Ledger(np.array([5, 7], np.uint64), np.array([55, 70]), np.array([6, 7]))
    led = Ledger.latest([old, new])
    assert (led.ids.tolist(), led.sizes.tolist(), led.mtimes.tolist()) == ([1, 5, 7, 9], [10, 55, 70, 90], [1, 6, 7, 9])
    ids = np.array([1, 5, 5, 7, 8, 9, 10], np.uint64)
    got = led.unchanged(ids, np.array([10, 55, 50, 70, 0, 90, 0]), np.array([1, 6, 5, 8, 0, 9, 0]))
    assert got.tolist() == [True, True, False, False, False, True, False]
    assert Ledger.latest([]).unchanged(ids, np.zeros(7), np.zeros(7)).tolist() == [False] * 7


def test_load_ledger_applies_exclusions_and_skips_damaged_files(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, LEDGER_DIR))
    at = lambda name: os.path.join(root, LEDGER_DIR, name)
    write_ledger(at("a.ledger"), np.arange(10, dtype=np.uint64), np.full(10, 1), np.full(10, 1), 10)
    write_ledger(at("b.ledger"), np.arange(5, 15, dtype=np.uint64), np.full(10, 2), np.full(10, 2), 10)
    with open(at("c.ledger"), "wb") as f:
        f.write(b"BLDOCLG1" + bytes(40))  # damaged
    refs = [
        {"file": "a.ledger", "exclude": [[2, 4]]},
        {"file": "b.ledger", "exclude": [[0, 1], [9, 10]]},
        {"file": "c.ledger"},
        {"file": "gone.ledger"},
    ]
    led = load_ledger(root, manifest(refs))
    assert led.ids.tolist() == [0, 1, 4, *range(5, 14)]  # a minus 2, 3; b minus 5 and 14 -> a's 5
    assert led.sizes.tolist() == [1, 1, 1, 1] + [2] * 8
    assert load_ledger(root, None).ids.tolist() == []


def test_a_runs_ledger_reuses_an_attempts_stats_and_deletes_unnamed_files(tmp_path):
    root = str(tmp_path)
    listed = np.arange(20, dtype=np.uint64)
    stat_of = StatOf(listed, np.arange(20) * 10, np.arange(20) * 100)
    plan, verified = np.arange(10, 20, dtype=np.uint64), [3, 1]
    name, mine = write_run_ledger(root, None, "files=10;names=ab", plan, verified, stat_of)
    assert mine.ids.tolist() == [*list(range(10, 20)), 1, 3]
    assert mine.sizes.tolist() == [i * 10 for i in range(10, 20)] + [10, 30]
    assert read_ledger(os.path.join(root, LEDGER_DIR, name))[1] == 10
    # a second attempt at the same plan (files touched since): the first attempt's stats stay
    newer = StatOf(listed, np.arange(20) * 10 + 1, np.arange(20) * 100 + 1)
    open(os.path.join(root, LEDGER_DIR, "stray.ledger"), "wb").close()
    name2, mine2 = write_run_ledger(root, None, "files=10;names=ab", plan, [], newer)
    assert name2 == name and mine2.sizes.tolist() == [i * 10 for i in range(10, 20)]
    assert os.listdir(os.path.join(root, LEDGER_DIR)) == [name]  # the stray file is deleted
    # another plan: now's stats; a file the manifest names is kept, never overwritten
    m = manifest([{"file": name}])
    name3, mine3 = write_run_ledger(root, m, "files=10;names=cd", plan, [], newer)
    assert name3 != name and mine3.sizes.tolist() == [i * 10 + 1 for i in range(10, 20)]
    assert sorted(os.listdir(os.path.join(root, LEDGER_DIR))) == sorted([name, name3])
    name4, _ = write_run_ledger(root, manifest([{"file": name}, {"file": name3}]), "files=10;names=cd", plan, [], newer)
    assert name4 not in (name, name3) and name4.startswith(name3[:-7] + "-")


@pytest.mark.parametrize("n", [0, 1])
def test_an_empty_or_tiny_ledger(tmp_path, n):
    path = str(tmp_path / "x.ledger")
    write_ledger(path, np.arange(n, dtype=np.uint64), np.zeros(n), np.zeros(n), n)
    led, n_plan = read_ledger(path)
    assert (len(led.ids), n_plan) == (n, n)
