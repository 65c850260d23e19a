"""Planning is arithmetic (loading/plan.py, task.py) and O(1) in N."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from loader.loading.commit import resume_points
from loader.loading.plan import Plan, Segment
from loader.loading.task import LoadTask
from loader.stores.base import parse_dataset_uri


def brute_rows(segments, b, k):
    """The old enumeration: seq -> (shard, first record, count) of every batch."""
    out = {}
    for seg in segments:
        for i in range(seg.nbatches(b)):
            seq = seg.first_seq + i
            out[seq] = (seq % k, seg.first_record + i * b, min(b, seg.count - i * b))
    return out


@settings(max_examples=300, deadline=None)
@given(b=st.integers(1, 7), k=st.integers(1, 6), first=st.integers(0, 5),
       counts=st.lists(st.integers(0, 30), max_size=4), data=st.data())
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
            assert got == [(q, *want[q][1:], 7 + (q - s.first_seq) * b)
                           for s in segments for q in range(s.first_seq, s.first_seq + s.nbatches(b))
                           if q % k % w == worker and q >= (res[q % k] if res else first)]


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
