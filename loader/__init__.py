"""bulkload: a parallel bulk loader for fixed-size binary records.

Python API (see loader/api/__init__.py for every function and its report)::

    import loader
    report = loader.load("gen://scidb96?n=1000000", "lmdb://data/x")
    loader.finalize("lmdb://data/x", dims="i0:10,i1:100000")
    with loader.open("lmdb://data/x") as ds:
        ds.read_records(0, 10)
"""

import importlib

__all__ = [
    "__version__",
    "compact",
    "export",
    "finalize",
    "generator",
    "info",
    "ingest",
    "load",
    "open",
    "prune_runs",
    "query",
    "run",
    "runs",
    "verify",
]


def __getattr__(name):  # lazy: keep `import loader` (and worker start-up) light
    if name == "__version__":  # the installed distribution's, from pyproject.toml's version
        from importlib.metadata import version

        return version("bulkload")
    api = importlib.import_module("loader.api")
    if name in api.PUBLIC:
        return getattr(api, name)
    raise AttributeError(f"module 'loader' has no attribute {name!r}")
