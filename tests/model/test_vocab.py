"""The option vocabularies (model/vocab.py) agree with every runtime list of allowed values."""

from __future__ import annotations

from typing import get_args

from loader.arrays.finalize import STRATEGIES
from loader.arrays.spec import POLICIES
from loader.docs.kind import DocsKind
from loader.infra.env import ENGINES
from loader.kinds.fixed import FixedKind
from loader.loading.options import BAD_FILE_POLICIES
from loader.model import field_types, garbage_entry, run_retention, runs, vocab
from loader.read.export import EXPORT_FORMATS, SCAN_FORMATS
from loader.read.tables import QUERY_FORMATS
from loader.serializers import COMPRESSIONS, FORMATS
from loader.stores.options import ROCKSDB_COMPRESSIONS
from loader.stores.registry import SCHEMES


def test_each_vocabulary_tuple_is_its_literal_alias_values() -> None:
    assert vocab.RUN_KINDS == get_args(vocab.RunKind) == ("load", "ingest", "finalize", "compact")
    assert (*vocab.RUN_STATUSES, "replaced") == vocab.SHOWN_STATUSES
    assert vocab.RECORD_FORMATS == ("capnp", "arrow", "block", "raw")


def test_runtime_lists_of_allowed_values_match_the_vocabularies() -> None:
    assert FORMATS == FixedKind.formats == vocab.SERIALIZER_FORMATS
    assert DocsKind.formats == vocab.DOCUMENT_FORMATS
    assert COMPRESSIONS == vocab.COMPRESSIONS
    assert set(DocsKind.compressions) <= set(vocab.COMPRESSIONS)
    assert ROCKSDB_COMPRESSIONS == vocab.ROCKSDB_COMPRESSIONS
    assert SCHEMES == vocab.STORE_SCHEMES
    assert POLICIES == vocab.DUPLICATES_POLICIES
    assert STRATEGIES == vocab.FINALIZE_STRATEGIES
    assert BAD_FILE_POLICIES == vocab.BAD_FILE_POLICIES
    assert EXPORT_FORMATS == vocab.EXPORT_FORMATS
    assert SCAN_FORMATS == vocab.SCAN_FORMATS
    assert QUERY_FORMATS == vocab.QUERY_FORMATS
    assert garbage_entry.KINDS == vocab.GARBAGE_KINDS
    assert field_types.UNITS == vocab.TIME_UNITS
    assert run_retention.KINDS == vocab.RUN_KINDS
    assert run_retention.STATUSES == vocab.SHOWN_STATUSES
    assert runs.UNFINISHED == vocab.UNFINISHED_STATUSES
    assert ENGINES == vocab.ENGINE_NAMES
