"""Planning is arithmetic (loading/plan.py, task.py) and O(1) in N; resuming keeps, per
shard, exactly the intact prefix of a crashed run's pending batches (commit.resume_points),
on every store."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

import loader
from loader.loading.commit import resume_points
from loader.loading.plan import Plan, Segment
from loader.loading.task import LoadTask
from loader.model.placement import batch_key
from loader.stores.spec import parse_dataset_uri


def brute_rows(segments, b, k):
    """The old enumeration: seq -> (shard, first record, count) of every batch."""
    out = {}
    for seg in segments:
        for i in range(seg.nbatches(b)):
            seq = seg.first_seq + i
            out[seq] = (seq % k, seg.first_record + i * b, min(b, seg.count - i * b))
    return out


@settings(max_examples=300, deadline=None)
@given(
    b=st.integers(1, 7),
    k=st.integers(1, 6),
    first=st.integers(0, 5),
    counts=st.lists(st.integers(0, 30), max_size=4),
    data=st.data(),
)
def test_plan_matches_the_enumeration(b, k, first, counts, data):
    segments, seq, rec = [], first, 3 * first
    for c in counts:
        segments.append(Segment(None, c, seq, rec, offset=7))
        seq, rec = seq + -(-c // b), rec + c
    plan, want = Plan(tuple(segments), b, k, first_seq=first), brute_rows(segments, b, k)
    assert plan.end == (max(want) + 1 if want else None)
    assert all(plan.row(q) == want.get(q) for q in range(seq + 3))
    assert all(list(plan.shard_seqs(s)) == sorted(q for q in want if q % k == s) for s in range(k))
    resume = tuple(data.draw(st.lists(st.integers(0, seq + 2), min_size=k, max_size=k)))
    for res in ((), resume):
        assert plan.records_from(res) == sum(r[2] for q, r in want.items() if not res or q >= res[q % k])
    w = data.draw(st.integers(1, k))
    for worker in range(w):
        for res in ((), resume):  # (): every worker starts at the plan's first seq
            task = LoadTask(worker=worker, workers=w, plan=plan, write=None, resume=res)
            got = [(q, f, c, off) for q, f, c, _src, off in task.planned_batches()]
            assert got == [
                (q, *want[q][1:], 7 + (q - s.first_seq) * b)
                for s in segments
                for q in range(s.first_seq, s.first_seq + s.nbatches(b))
                if q % k % w == worker and q >= (res[q % k] if res else first)
            ]


def test_planning_a_huge_plan_is_instant(tmp_path):
    n, b, k = 10**12, 10_000, 16
    spec = parse_dataset_uri(f"lmdb://{tmp_path}/ds").with_shards(k)
    t0 = time.perf_counter()
    plan = Plan((Segment(None, n, 0, 0),), b, k)
    assert plan.end == n // b
    assert plan.row(n // b - 1) == ((n // b - 1) % k, n - b, b)
    assert plan.records_from(tuple(range(k))) == n
    assert plan.records_from(tuple([2 * k] * k)) == n - 2 * k * b
    pending = [[s, s % k, s * b, b, 0, 0] for s in range(3)]  # not stored: resume from the start
    res, keep = resume_points(spec, plan, pending)
    assert res == tuple(range(k)) and keep == []
    task = LoadTask(worker=1, workers=4, plan=plan, write=None)
    it = task.planned_batches()
    assert [next(it)[0] for _ in range(3)] == [1, 5, 9]
    assert time.perf_counter() - t0 < 0.5


def test_a_plan_drops_empty_segments_and_orders_them_by_seq():
    a, empty, c = Segment("a", 5, 0, 0), Segment("e", 0, 2, 5), Segment("c", 3, 2, 5)
    plan = Plan((c, empty, a), 3, 2)
    assert plan.segments == (a, c) and plan.end == 3
    assert [row[:4] for row in plan.batches_of([0, 1], ())] == [(0, 0, 3, "a"), (1, 3, 2, "a"), (2, 5, 3, "c")]


def test_resume_keeps_each_shards_intact_prefix(store_uri):
    """Pending rows are kept per shard up to the first one that is not planned as such, is
    missing from its store, or whose stored value does not match (checksum, size)."""
    n, b, k = 2_000, 100, 3  # 20 batches: shard s holds seqs s, s + 3, ...
    loader.load(f"gen://scidb96?n={n}", store_uri, shards=k, workers=1, batch_records=b)
    with loader.open(store_uri) as ds:
        entries = list(ds.manifest.batches)
    spec = parse_dataset_uri(store_uri).with_shards(k)
    plan = Plan((Segment(None, n, 0, 0),), b, k)
    rows = [e.row() for e in entries]
    res, keep = resume_points(spec, plan, rows)
    assert res == (20, 20, 20) and keep == entries  # all intact: nothing to rewrite

    rows[4][4] ^= 1  # shard 1: seq 4's checksum is not the stored value's
    rows[11][5] += 1  # shard 2: seq 11's size
    rows[6][3] -= 1  # shard 0: seq 6 is not the planned batch 6 (count)
    res, keep = resume_points(spec, plan, rows)
    assert res == (6, 4, 11)
    assert [e.seq for e in keep] == [0, 1, 2, 3, 5, 8]

    del rows[3]  # shard 0: seq 3 was never reported durable
    res, keep = resume_points(spec, plan, rows)
    assert res == (3, 4, 11) and [e.seq for e in keep] == [0, 1, 2, 5, 8]

    st = spec.open_shard(2, write=True)
    try:
        st.delete_range(batch_key(5), batch_key(6))  # shard 2: seq 5 is gone from the store
    finally:
        st.close()
    res, keep = resume_points(spec, plan, rows)
    assert res == (3, 4, 5) and [e.seq for e in keep] == [0, 1, 2]


def test_with_nothing_pending_each_shard_resumes_at_its_first_planned_batch(lmdb_uri):
    """Seqs 7 and 8 on 4 shards: shards 3 and 0 start at them, shards without a batch of
    the plan at its end (no store is opened: nothing is pending)."""
    spec = parse_dataset_uri(lmdb_uri).with_shards(4)
    plan = Plan((Segment(None, 15, 7, 700),), 10, 4, first_seq=7, first_record=700)
    res, keep = resume_points(spec, plan, [])
    assert res == (8, 9, 9, 7) and keep == []
    assert plan.records_from(res) == 15
