"""Typed messages between load workers and their coordinator (loading/messages.py,
infra/pool.py): progress, checkpoints, free slots, receipts - through real processes."""

from __future__ import annotations

import numpy as np

from loader.infra.pool import Pool, Progress
from loader.kinds import FixedKind
from loader.loading.commit import Committer, Unit, pending_entries, pending_rows
from loader.loading.execute import Work, execute
from loader.loading.job import Checkpoints, RunSettings
from loader.loading.messages import Checkpoint, FreeSlot, LoadReceipt, StageTimes
from loader.loading.options import fresh_manifest, prepare_root
from loader.loading.plan import Plan, Segment
from loader.model import manifest as mf
from loader.model.layouts import get_layout
from loader.model.runs import new_run
from loader.sources import GenSource
from loader.stores.spec import parse_dataset_uri

SCIDB = get_layout("scidb96")


def chatty_worker(task, outbox):
    """Sends every kind of message the pool handles, then returns its task."""
    outbox.put(5)  # a plain int: what arrays/ and docs/compact.py workers still send
    outbox.put(np.int64(7))
    outbox.put(Progress(3, 30))
    outbox.put(Checkpoint(task, (mf.BatchEntry(task, 0, 0, 1, 2, 3),)))
    outbox.put(FreeSlot(task))
    return task


def test_the_pool_delivers_progress_and_messages_in_order():
    progress, messages = [], []
    got = Pool(chatty_worker, [0, 1], on_progress=lambda *a: progress.append(a), on_message=messages.append).run()
    assert got == [0, 1]
    assert sorted(progress) == sorted([(5,), (7,), (3, 30)] * 2)
    for w in (0, 1):
        mine = [msg for msg in messages if (msg.worker if isinstance(msg, Checkpoint) else msg.slot) == w]
        assert mine == [Checkpoint(w, (mf.BatchEntry(w, 0, 0, 1, 2, 3),)), FreeSlot(w)]


def test_pending_rows_round_trip_both_kinds_of_entries():
    fixed = mf.BatchEntry(3, 1, 300, 100, 99, 9600)
    keyed = mf.BatchEntry(1, 1, 100, 100, 7, 5000, lo=10, hi=90, docs=80, table="docs-x", text_bytes=4000)
    rows = pending_rows([fixed, keyed])
    assert rows == [keyed.row(), fixed.row()]  # in seq order, as the manifest stores them
    assert pending_entries(rows) == [keyed, fixed] and pending_entries(None) == []


def test_workers_checkpoint_and_return_typed_receipts(store_uri):
    """A real run through execute(): every checkpoint arrives as BatchEntry objects and
    commits the unit as soon as it is durable; the receipts hold the same entries, each
    matching its stored value."""
    n, b, k = 3_000, 250, 3
    spec = parse_dataset_uri(store_uri).with_shards(k)
    settings = RunSettings(
        layout=SCIDB,
        format="capnp",
        compression="none",
        shards=k,
        workers=2,
        batch_records=b,
        checkpoints=Checkpoints(0.0, 0),
    )  # a checkpoint per batch
    prepare_root(spec)
    m = fresh_manifest(None, spec, settings, b)
    run = new_run("load", source="gen")
    m.runs.append(run)
    plan = Plan((Segment(GenSource("scidb96", n), n, 0, 0),), b, k)
    committer = Committer(spec.root, m, run, [Unit("gen", 0, plan.end, 0, n)], [])
    receipts = execute(spec, m, committer, Work(settings, plan, settings.nworkers, "load"))
    assert committer.complete  # committed by the workers' checkpoints, before their receipts
    assert len(receipts) == 2 and all(isinstance(rc, LoadReceipt) for rc in receipts)
    assert all(isinstance(rc.times, StageTimes) and rc.max_rss > 0 for rc in receipts)
    entries = sorted((e for rc in receipts for e in rc.batches), key=lambda e: e.seq)
    assert [rc.worker for rc in receipts] == [0, 1]
    assert all([e.seq for e in rc.batches] == sorted(e.seq for e in rc.batches) for rc in receipts)
    assert {e.shard % 2 for e in receipts[1].batches} == {1}  # worker w writes the shards s mod W == w
    on_disk = mf.load_manifest(spec.root)
    assert on_disk.batches == entries == m.batches and len(entries) == n // b
    check = FixedKind(SCIDB, "capnp", "none").stored_problem
    for s in range(k):
        st = spec.open_shard(s, write=False)
        try:
            assert all(check(st, e) is None for e in entries if e.shard == s)
        finally:
            st.close()
