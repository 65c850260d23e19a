"""`--memory-budget` bounds each finalize worker's whole process: its peak RSS (interpreter,
libraries, windows, sort keys, chunk values), for both strategies, on records that need
several windows or spill runs per worker under that budget."""

import pytest

import loader
from loader.arrays.finalize import finalize

MIB = 1 << 20
N = 3_000_000  # 144 MB per shard: more than one window of a 128 MiB budget


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    root = tmp_path_factory.mktemp("budget")
    uri = f"lmdb://{root}/flat"
    loader.load(f"gen://scidb96?n={N}", uri, shards=2, workers=2)
    return root, uri


@pytest.mark.parametrize("strategy", ["direct", "spill"])
@pytest.mark.parametrize("budget_mib", [128, 192])
def test_workers_stay_within_the_budget(flat, strategy, budget_mib):
    _root, uri = flat
    rep = finalize(
        uri,
        dims="i0:10,i1:100000",
        array=f"{strategy}{budget_mib}",
        workers=2,
        strategy=strategy,
        memory_budget=budget_mib * MIB,
        compact=False,
    )
    assert rep.records == N and rep.strategy == strategy
    assert (rep.windows or rep.spill_runs) > 2  # the budget, not the data, sized the buffers
    assert 0 < rep.worker_max_rss_bytes <= budget_mib * MIB, (
        f"a worker peaked at {rep.worker_max_rss_bytes / MIB:.0f} MiB under a {budget_mib} MiB budget"
    )
    assert rep.worker_peak_rss_bytes >= rep.worker_max_rss_bytes
