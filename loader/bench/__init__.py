"""The benchmark stage: `bulkload bench` measures bulkload's throughput (loads, finalize,
box queries, peak RSS) against the machine's own limits and against peer libraries, all in
one run, and writes the result as JSON, Markdown and plots. It sits above every other stage
but the CLI: it may import the API and everything below it (read, arrays, loading, model,
sources, infra), and reaches the product mostly through the `bulkload` programs it runs;
the CLI imports it. Optional heavy peers (ArcticDB, TileDB, pandas) and matplotlib are
imported only in `peers` and `plots`, when used.

Python API (kept from the single-module suite): ``loader.bench.run("full", out=DIR)``,
``loader.bench.validate(result)``, ``loader.bench.write_outputs(result, DIR)`` - imported
lazily, so that a child benchmark process (``python -m loader.bench.child``) imports only
what it measures.
"""

__all__ = ["run", "validate", "write_outputs"]


def __getattr__(name):  # lazy: keep the child benchmark processes' import (and RSS) small
    if name == "run":
        from .suite import run  # lazy: see above

        return run
    if name in ("validate", "write_outputs"):
        from . import report  # lazy: see above

        return getattr(report, name)
    raise AttributeError(name)
