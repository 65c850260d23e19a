"""Dataset URIs (stores/spec.py) and the options each backend declares (stores/options.py):
strict parsing, one UsageError naming what is wrong, nothing touched on disk."""

from __future__ import annotations

import os
import re
from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader.errors import UnknownSchemeError, UsageError
from loader.stores.options import LmdbOptions, RocksdbOptions
from loader.stores.registry import OPTIONS, SCHEMES, backend_for
from loader.stores.spec import MAX_SHARDS, MEM_NAME, MEM_ROOT, StoreSpec, is_mem_path, parse_dataset_uri

#: a value each backend option takes, and one it cannot use (with the text its error names)
GOOD = {
    "map_size": "1g",
    "writemap": "1",
    "readahead": "0",
    "max_dbs": "8",
    "compression": "zstd",
    "zstd_level": "5",
    "block_size": "16384",
}
BAD = {
    "map_size": ("abc", "not a size"),
    "writemap": ("maybe", "not a boolean"),
    "readahead": ("2", "not a boolean"),
    "max_dbs": ("0", "must be at least 1"),
    "compression": ("brotli", "is unknown"),
    "zstd_level": ("high", "not an integer"),
    "block_size": ("0", "out of range"),
}


def uri_of(scheme: str, tmp_path, query: str = "") -> str:
    return f"mem://uri-test{query}" if scheme == "mem" else f"{scheme}://{tmp_path}/ds{query}"


def test_unknown_scheme_messages():
    with pytest.raises(UnknownSchemeError) as ei:
        parse_dataset_uri("s3://bucket/x")
    assert "'s3'" in str(ei.value) and "lmdb://" in str(ei.value)
    with pytest.raises(UnknownSchemeError) as ei:
        parse_dataset_uri("plain/path")
    assert "no scheme" in str(ei.value)
    with pytest.raises(UnknownSchemeError):
        backend_for("zarr")
    with pytest.raises(UsageError):
        parse_dataset_uri("lmdb://x?shards=zero")


def test_every_declared_option_is_read_and_every_read_option_is_declared():
    """DECLARED (what the unknown-option error lists) and parse (what is checked) agree."""
    for cls in (LmdbOptions, RocksdbOptions):
        assert set(cls.DECLARED) == {f.name for f in fields(cls)}
        for name in cls.DECLARED:
            value, text = BAD[name]
            with pytest.raises(UsageError, match=re.escape(text)):
                cls.parse({name: value})
            assert getattr(cls.parse({name: GOOD[name]}), name) != getattr(cls(), name)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_bad_option_value_is_refused_naming_the_dataset_and_the_option(scheme, tmp_path):
    for name in OPTIONS[scheme].DECLARED:
        value, text = BAD[name]
        uri = uri_of(scheme, tmp_path, f"?{name}={value}")
        with pytest.raises(UsageError) as ei:
            parse_dataset_uri(uri)
        assert str(ei.value).startswith(f"dataset {uri!r}: ") and f"{name}=" in str(ei.value), ei.value
        assert text in str(ei.value)
    assert not (tmp_path / "ds").exists() and not os.path.exists(os.path.join(MEM_ROOT, "uri-test"))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_an_option_of_another_backend_is_unknown_and_the_known_ones_are_listed(scheme, tmp_path):
    foreign = sorted(set(GOOD) - set(OPTIONS[scheme].DECLARED))
    for name in [*foreign, "foo"]:
        with pytest.raises(UsageError) as ei:
            parse_dataset_uri(uri_of(scheme, tmp_path, f"?{name}=1"))
        msg = str(ei.value)
        assert f"unknown option(s) {name};" in msg and f"{scheme}:// takes shards (1..{MAX_SHARDS})" in msg
        assert all(f"{known} (" in msg for known in OPTIONS[scheme].DECLARED)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_an_option_given_twice_is_refused(scheme, tmp_path):
    for query in (
        "?shards=2&shards=2",
        f"?{next(iter(OPTIONS[scheme].DECLARED))}=1&{next(iter(OPTIONS[scheme].DECLARED))}=1",
    ):
        with pytest.raises(UsageError, match="is given more than once; give each option once"):
            parse_dataset_uri(uri_of(scheme, tmp_path, query))


@given(
    scheme=st.sampled_from(SCHEMES),
    shards=st.one_of(st.none(), st.integers(1, MAX_SHARDS)),
    chosen=st.sets(st.sampled_from(sorted(GOOD))),
)
def test_good_uris_parse_to_a_spec_that_names_the_same_dataset(scheme, shards, chosen):
    declared = OPTIONS[scheme].DECLARED
    opts = {n: GOOD[n] for n in chosen if n in declared}
    query = "&".join([f"shards={shards}"] * (shards is not None) + [f"{n}={v}" for n, v in opts.items()])
    where = "ds-1" if scheme == "mem" else "/data/ds-1"
    spec = parse_dataset_uri(f"{scheme}://{where}" + (f"?{query}" if query else ""))
    assert spec == StoreSpec(
        scheme, os.path.join(MEM_ROOT, "ds-1") if scheme == "mem" else "/data/ds-1", shards, tuple(sorted(opts.items()))
    )
    assert parse_dataset_uri(spec.uri).root == spec.root  # the URI a report prints opens the same
    OPTIONS[scheme].parse(dict(spec.options))  # what workers receive parses again


@pytest.mark.parametrize("shards", ["0", str(MAX_SHARDS + 1), "-1", "two", "1.5", ""])
def test_shards_must_be_a_whole_number_in_range(shards, tmp_path):
    with pytest.raises(UsageError, match="shards must be"):
        parse_dataset_uri(f"lmdb://{tmp_path}/ds?shards={shards}")


def test_paths_are_absolute_and_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert parse_dataset_uri("lmdb://rel/ds").root == str(tmp_path / "rel" / "ds")
    assert parse_dataset_uri("rocksdb://~/ds").root == str(tmp_path / "home" / "ds")
    assert parse_dataset_uri("lmdb://a/../b/./ds").root == str(tmp_path / "b" / "ds")


@pytest.mark.parametrize(
    "uri,text",
    [
        ("lmdb://", "has no path after lmdb://"),
        ("rocksdb://?shards=2", "has no path after rocksdb://"),
        ("lmdb://a\tb", "printable UTF-8"),
        ("lmdb://a\0b", "printable UTF-8"),
        ("lmdb://" + os.fsdecode(b"bad-\xff"), "printable UTF-8"),
    ],
)
def test_a_path_must_be_given_and_printable_utf8(uri, text):
    with pytest.raises(UsageError, match=re.escape(text)):
        parse_dataset_uri(uri)


@given(st.text(min_size=1, max_size=140))
def test_a_mem_name_is_one_plain_path_component(name):
    ok = MEM_NAME.fullmatch(name) is not None
    try:
        spec = parse_dataset_uri(f"mem://{name}")
    except UsageError as e:
        assert not ok or "?" in name or not name.isprintable(), (name, e)
        return
    assert ok or "?" in name, name
    assert os.path.dirname(spec.root) == MEM_ROOT and spec.uri == f"mem://{os.path.basename(spec.root)}"
    assert is_mem_path(spec.root) and not is_mem_path(MEM_ROOT + "-other/x")


@pytest.mark.parametrize("name", [".hidden", "a/b", "..", "x" * 129, "a b"])
def test_mem_names_that_are_not_plain_are_refused_with_an_example(name):
    with pytest.raises(UsageError, match=r"mem://NAME takes one plain name .* e.g. mem://scratch-1"):
        parse_dataset_uri(f"mem://{name}")
