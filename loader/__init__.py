"""bulkload: a parallel bulk loader for fixed-size binary records.

Python API::

    import loader
    report = loader.load("gen://scidb96?n=1000000", "lmdb://data/x")
    ds = loader.open("lmdb://data/x")
    ds.read_records(0, 10)
"""

__version__ = "0.1.0"

__all__ = ["load", "open", "__version__"]


def __getattr__(name):  # lazy: keep `import loader` (and worker start-up) light
    if name == "load":
        from .loading.load import load

        return load
    if name == "open":
        from .read.dataset import open

        return open
    raise AttributeError(name)
