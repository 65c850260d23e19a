"""bulkload: a parallel bulk loader for fixed-size binary records."""

__version__ = "0.1.0"
