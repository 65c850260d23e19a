"""bulkload: a parallel bulk loader for fixed-size binary records.

Python API (see loader/api/__init__.py for every function and its report)::

    import loader
    report = loader.load("gen://scidb96?n=1000000", "lmdb://data/x")
    loader.finalize("lmdb://data/x", dims="i0:10,i1:100000")
    with loader.open("lmdb://data/x") as ds:
        ds.read_records(0, 10)

The functions are loader/api/public.py's, resolved on first use so that ``import loader``
(and a worker's start-up) stays light; type checkers and IDEs see them through the
``TYPE_CHECKING`` imports below.
"""

# ruff: noqa: F405 - the names of __all__ come from api/public.py, lazily (or by the import below)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs ~2 ms of every start-up

__version__ = "0.1.0"

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

if TYPE_CHECKING:
    from .api.public import *  # noqa: F403 - the names of __all__

else:  # a type checker sees the names above, and no __getattr__ that would accept any other

    def __getattr__(name: str) -> object:  # lazy: keep `import loader` (and worker start-up) light
        if name in __all__:
            from .api import public

            value = getattr(public, name)
            globals()[name] = value
            return value
        raise AttributeError(f"module 'loader' has no attribute {name!r}")
