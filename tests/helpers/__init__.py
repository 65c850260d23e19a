"""Helpers shared by the tests (fixtures stay in tests/conftest.py): the installed `bulkload`
command and tools (`run_cli`, `run_measured`, `tool`, `compact_peak_rss`), a dataset's metadata as JSON (`manifest_json`,
`write_manifest_json`), documents and shards (`stored_docs`, `each_shard`, `shard_tables`)
and `wait_until`, the poll with a deadline that replaces fixed sleeps."""

from .cli import BIN, compact_peak_rss, run_cli, run_measured, tool
from .datasets import each_shard, manifest_json, shard_tables, stored_docs, write_manifest_json
from .waiting import wait_until

__all__ = [
    "BIN",
    "compact_peak_rss",
    "each_shard",
    "manifest_json",
    "run_cli",
    "run_measured",
    "shard_tables",
    "stored_docs",
    "tool",
    "wait_until",
    "write_manifest_json",
]
