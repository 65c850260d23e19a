"""A real `Bench` for the benchmark tests (real bulkload-gen, real bulkload, real stores) on a
small N in a temporary directory, its work directory and mem:// datasets removed afterwards.
(A helper module, not a conftest.py: that module name would shadow tests/conftest.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loader.bench.plan import make_plan
from loader.bench.runner import Bench


@contextmanager
def opened_bench(tmp_path: Path, n: int = 1000, repeats: int = 1, only=None, **kw) -> Iterator[Bench]:
    plan = make_plan("quick", n=n, repeats=repeats, out=tmp_path / "out", only=only, **kw)
    b = Bench(plan, log=lambda s: None)
    b.open_work()
    try:
        yield b
    finally:
        b.close_work()
