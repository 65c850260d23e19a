"""Record kinds (loader/kinds): the registry, plug-ins found on a miss, batch limits, and
what a kind says about a stored batch - on real stores."""

from __future__ import annotations

import subprocess
import sys

import pytest
import xxhash

import loader
from loader.errors import UsageError
from loader.kinds import FixedKind, kind_class, kind_for
from loader.kinds.base import MAX_BATCH_BYTES
from loader.model.layouts import Layout, get_layout
from loader.model.placement import batch_key
from loader.serializers import get_serializer
from loader.stores.spec import parse_dataset_uri

SCIDB = get_layout("scidb96")


def test_fixed_layouts_get_the_builtin_kind_without_importing_plugins():
    code = (
        "import sys; from loader.kinds import kind_for; from loader.model.layouts import get_layout; "
        "print(kind_for(get_layout('scidb96')).name, 'loader.docs' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["fixed", "False"]


def test_the_documents_kind_is_found_by_loading_its_plugin():
    code = (
        "import sys; from loader.kinds import kind_for; from loader.model.layouts import get_layout; "
        "print(kind_for(get_layout('docs')).name, 'loader.docs' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["docs", "True"]


def test_a_kind_no_plugin_provides_is_a_usage_error():
    class OddLayout(Layout):
        kind = "nosuchkind"

    odd = OddLayout("odd", SCIDB.fields)
    with pytest.raises(UsageError, match="layout 'odd' needs the record kind 'nosuchkind', which no installed"):
        kind_class(odd)


@pytest.mark.parametrize("fmt,comp", [("capnp", "none"), ("capnp", "lz4"), ("arrow", "none"), ("arrow", "zstd")])
def test_max_batch_records_is_the_smaller_of_memory_and_format_limits(fmt, comp):
    kind = kind_for(SCIDB, fmt, comp)
    assert isinstance(kind, FixedKind) and kind.record_bytes() == 96
    fmt_limit = get_serializer(fmt, SCIDB, comp).max_records
    assert kind.max_batch_records() == min(MAX_BATCH_BYTES // 96, fmt_limit or MAX_BATCH_BYTES)
    assert kind.max_batch_records() * 96 <= MAX_BATCH_BYTES


def test_a_batch_over_the_limit_is_refused_by_name():
    top = kind_for(SCIDB, "capnp", "none").max_batch_records()
    with pytest.raises(UsageError, match="--batch-records must be at least 1 and at most"):
        loader.load("gen://scidb96?n=10", "mem://kinds-limit", batch_records=top + 1)


@pytest.mark.parametrize("scheme", ["lmdb", "rocksdb"])
def test_stored_problem_names_each_damage(tmp_path, scheme):
    uri = f"{scheme}://{tmp_path}/ds"
    loader.load("gen://scidb96?n=2000", uri, shards=1, workers=1, batch_records=1000)
    with loader.open(uri) as ds:
        entries = list(ds.manifest.batches)
    kind = kind_for(SCIDB, "capnp", "none")
    spec = parse_dataset_uri(uri).with_shards(1)
    st = spec.open_shard(0, write=True)
    try:
        assert [kind.stored_problem(st, e) for e in entries] == [None, None]
        value = bytes(st.get(batch_key(entries[0].seq)))
        st.put_sorted([(batch_key(entries[0].seq), value[:-8])])
        st.delete_range(batch_key(entries[1].seq), batch_key(entries[1].seq + 1))
        assert kind.stored_problem(st, entries[1]) == "missing from the store"
        problem = kind.stored_problem(st, entries[0])
        assert problem == f"size {len(value) - 8} != {len(value)} in the manifest"
        flipped = bytearray(value)
        flipped[-1] ^= 0xFF
        st.put_sorted([(batch_key(entries[0].seq), bytes(flipped))])
        assert xxhash.xxh3_64_intdigest(bytes(flipped)) != entries[0].checksum
        assert kind.stored_problem(st, entries[0]) == "checksum mismatch (stored bytes changed)"
    finally:
        st.close()
