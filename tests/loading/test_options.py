"""Option resolution (loading/options.py, job.py): explicit > URI > existing dataset >
defaults, every count checked; compatibility with the dataset; the dataset directory."""

from __future__ import annotations

import os

import pytest

from loader.errors import DatasetMismatchError, MissingPathError, NestedDatasetError, UsageError
from loader.kinds.base import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_RECORDS
from loader.loading.job import Checkpoints, LoadJob, Request, RunSettings
from loader.loading.options import (
    check_compatible,
    checkpoint_settings,
    fresh_manifest,
    prepare_root,
    resolve_options,
)
from loader.model import manifest as mf
from loader.model.layouts import get_layout
from loader.model.options import MAX_SHARDS, MAX_WORKERS, default_workers
from loader.model.runs import new_run
from loader.stores.spec import parse_dataset_uri

SCIDB = get_layout("scidb96")


def manifest(
    *, batches: bool = True, format="arrow", compression="lz4", shards=5, batch_records=777, scheme="lmdb"
) -> mf.Manifest:
    """A manifest of a dataset holding one batch (or none) with these options."""
    m = mf.Manifest(
        layout=SCIDB.to_dict(),
        format=format,
        compression=compression,
        scheme=scheme,
        shards=shards,
        batch_records=batch_records,
    )
    if batches:
        m.batches.append(mf.BatchEntry(0, 0, 0, 10, 123, 960))
    return m


def resolved(uri: str, existing=None, layout=None, **given) -> tuple:
    settings, spec = resolve_options(parse_dataset_uri(uri), existing, layout, Request(**given))
    assert spec.shards == settings.shards
    return (
        settings.format,
        settings.compression,
        settings.shards,
        settings.workers,
        settings.batch_records,
        settings.batch_records_given,
    )


CPUS = default_workers()


@pytest.mark.parametrize(
    "uri, existing, given, want",
    [
        # nothing given, no dataset: the kind's defaults (Cap'n Proto: lz4), a shard and a worker per core
        ("lmdb:///x/ds", None, {}, ("capnp", "lz4", min(CPUS, MAX_SHARDS), CPUS, DEFAULT_BATCH_RECORDS, False)),
        # the default compression is the format's: Arrow's is none
        (
            "lmdb:///x/ds",
            None,
            dict(format="arrow"),
            ("arrow", "none", min(CPUS, MAX_SHARDS), CPUS, DEFAULT_BATCH_RECORDS, False),
        ),
        # explicit options
        (
            "lmdb:///x/ds",
            None,
            dict(format="arrow", compression="zstd", shards=3, workers=2, batch_records=50),
            ("arrow", "zstd", 3, 2, 50, True),
        ),
        # the URI's shards; the same number given explicitly agrees with it
        ("rocksdb:///x/ds?shards=3", None, {}, ("capnp", "lz4", 3, CPUS, DEFAULT_BATCH_RECORDS, False)),
        ("rocksdb:///x/ds?shards=3", None, dict(shards=3), ("capnp", "lz4", 3, CPUS, DEFAULT_BATCH_RECORDS, False)),
        # an existing dataset's options, unless given
        ("lmdb:///x/ds", manifest(), {}, ("arrow", "lz4", 5, CPUS, 777, False)),
        ("lmdb:///x/ds", manifest(), dict(batch_records=50, workers=1), ("arrow", "lz4", 5, 1, 50, True)),
        ("lmdb:///x/ds?shards=2", manifest(), {}, ("arrow", "lz4", 2, CPUS, 777, False)),
        # an empty dataset is redefined: its options are not inherited
        (
            "lmdb:///x/ds",
            manifest(batches=False),
            {},
            ("capnp", "lz4", min(CPUS, MAX_SHARDS), CPUS, DEFAULT_BATCH_RECORDS, False),
        ),
    ],
)
def test_resolution_order(uri, existing, given, want):
    assert resolved(uri, existing, **given) == want


def test_the_layout_comes_from_the_argument_the_dataset_or_the_default():
    spec, request = parse_dataset_uri("lmdb:///x/ds"), Request()
    assert resolve_options(spec, None, None, request)[0].layout == SCIDB
    docs = get_layout("docs")
    m = mf.Manifest(
        layout=docs.to_dict(), format="msgpack", compression="zstd", scheme="lmdb", shards=2, batch_records=100
    )
    settings = resolve_options(spec, m, None, request)[0]
    assert settings.layout.name == "docs" and settings.kind().keyed
    assert settings.format == settings.kind().default_format  # an empty docs dataset: the kind's defaults


@pytest.mark.parametrize(
    "option, value",
    [
        ("shards", 0),
        ("shards", MAX_SHARDS + 1),
        ("shards", -1),
        ("shards", 1.5),
        ("shards", True),
        ("shards", "3"),
        ("workers", 0),
        ("workers", MAX_WORKERS + 1),
        ("workers", 2.0),
        ("batch_records", 0),
        ("batch_records", 10**12),
    ],
)
def test_bad_counts_are_refused_naming_the_option(option, value):
    flag = "--" + option.replace("_", "-")
    with pytest.raises(UsageError, match=f"^{flag} must be at least 1 and at most"):
        resolved("lmdb:///x/ds", **{option: value})


@pytest.mark.parametrize(
    "layout, want",
    [
        ("scidb96", DEFAULT_BATCH_RECORDS),  # 96 bytes: 960,000 bytes a batch
        ("ticks", DEFAULT_BATCH_BYTES // 41),  # 41 bytes: 10,000 x (96/41)^2 = 54,824, over 1.92 MB
        ("docs", DEFAULT_BATCH_RECORDS),  # documents: a count, whatever their sizes
    ],
)
def test_a_default_batch_of_small_records_holds_as_many_bytes(layout, want):
    lay = get_layout(layout)
    settings = resolve_options(parse_dataset_uri("lmdb:///x/ds"), None, lay, Request())[0]
    assert settings.batch_records == want and not settings.batch_records_given
    given = resolve_options(parse_dataset_uri("lmdb:///x/ds"), None, lay, Request(batch_records=7))[0]
    assert given.batch_records == 7  # given: as given


def test_smaller_records_get_more_of_them_a_batch_without_a_jump(tmp_path):
    counts = []
    for size in (1, 3, 8, 24, 41, 48, 64, 90, 95, 96, 97, 500, 4000):
        f = tmp_path / f"b{size}.toml"
        f.write_text(f'name = "b{size}"\n[fields]\nb = "bytes[{size}]"\n')
        lay = get_layout(str(f))
        assert lay.record_size == size
        settings = resolve_options(parse_dataset_uri("lmdb:///x/ds"), None, lay, Request())[0]
        n = settings.batch_records
        assert n <= settings.kind().max_batch_records()
        if size >= 96:
            assert n == DEFAULT_BATCH_RECORDS, size
        else:
            assert n > DEFAULT_BATCH_RECORDS and n * size <= DEFAULT_BATCH_BYTES, size
        counts.append(n)
    assert counts == sorted(counts, reverse=True)  # fewer records a batch as they grow
    assert counts[counts.index(DEFAULT_BATCH_RECORDS) - 1] < 1.1 * DEFAULT_BATCH_RECORDS  # 95 bytes: no jump


def test_a_tiny_record_default_batch_stays_under_the_format_limit(tmp_path):
    one = tmp_path / "one.toml"
    one.write_text('name = "one"\n[fields]\nb = "uint8"\n')
    settings = resolve_options(parse_dataset_uri("lmdb:///x/ds"), None, get_layout(str(one)), Request())[0]
    kind = settings.kind()
    assert settings.batch_records == min(DEFAULT_BATCH_BYTES, kind.max_batch_records())


def test_batch_records_is_bounded_by_the_format():
    kind = resolve_options(parse_dataset_uri("lmdb:///x/ds"), None, None, Request())[0].kind()
    top = kind.max_batch_records()
    assert resolved("lmdb:///x/ds", batch_records=top)[4] == top
    with pytest.raises(UsageError, match=f"--batch-records must be at least 1 and at most {top:,}"):
        resolved("lmdb:///x/ds", batch_records=top + 1)


@pytest.mark.parametrize(
    "given, message",
    [
        (dict(format="parquet"), "unknown format 'parquet'; use one of capnp, arrow"),
        (dict(compression="brotli"), "unknown compression 'brotli'"),
    ],
)
def test_unknown_or_unsupported_formats(given, message):
    with pytest.raises(UsageError, match=message):
        resolved("lmdb:///x/ds", **given)


def test_a_compression_the_kind_does_not_take():
    with pytest.raises(UsageError, match="compression"):
        resolved("lmdb:///x/ds", layout=get_layout("docs"), compression="lz4")


def test_shards_contradicting_the_uri():
    with pytest.raises(UsageError, match=r"--shards 4 contradicts \?shards=3 in rocksdb:///x/ds"):
        resolved("rocksdb:///x/ds?shards=3", shards=4)


def settings_of(**kw) -> RunSettings:
    base = dict(layout=SCIDB, format="arrow", compression="lz4", shards=5, workers=8, batch_records=777)
    return RunSettings(**(base | kw))


def test_compatible_datasets_and_the_mismatch_message():
    spec = parse_dataset_uri("lmdb:///x/ds")
    check_compatible(manifest(), spec, settings_of())
    check_compatible(manifest(batches=False, format="capnp"), spec, settings_of())  # empty: redefined
    wrong = settings_of(layout=get_layout("docs"), format="capnp", compression="zstd", shards=2)
    with pytest.raises(DatasetMismatchError) as e:
        check_compatible(manifest(), parse_dataset_uri("rocksdb:///x/ds"), wrong)
    assert str(e.value) == (
        "dataset rocksdb:///x/ds already holds records with layout 'scidb96' (not 'docs'), format 'arrow' (not "
        "'capnp'), compression 'lz4' (not 'zstd'), 5 shards (not 2), store lmdb (not rocksdb); load into a new "
        "dataset, or drop the conflicting option to append"
    )


def test_settings_derive_workers_kind_and_run_options():
    assert settings_of(workers=8, shards=5).nworkers == 5  # one writer per shard at most
    assert settings_of(workers=2, shards=5).nworkers == 2
    s = settings_of()
    assert s.run_options() == dict(format="arrow", compression="lz4", layout="scidb96", shards=5)
    assert (s.kind().format, s.kind().compression, s.kind().keyed) == ("arrow", "lz4", False)
    job = LoadJob(s, planned=None)
    assert (job.mode, job.replace, job.replaces, job.new_run) == ("load", False, None, False)
    with pytest.raises(AttributeError):
        job.mode = "ingest"  # frozen: a job travels whole, unchanged


def test_checkpoint_settings(monkeypatch):
    monkeypatch.delenv("BULKLOAD_CHECKPOINT_SECONDS", raising=False)
    monkeypatch.delenv("BULKLOAD_CHECKPOINT_BYTES", raising=False)
    assert checkpoint_settings() == Checkpoints(10.0, 1 << 30)
    monkeypatch.setenv("BULKLOAD_CHECKPOINT_SECONDS", "0")
    monkeypatch.setenv("BULKLOAD_CHECKPOINT_BYTES", "4096")
    assert checkpoint_settings() == Checkpoints(0.0, 4096)
    assert checkpoint_settings(2.5, 7) == Checkpoints(2.5, 7)  # explicit > environment
    for seconds, nbytes in ((-1, None), (float("inf"), None), (None, -1)):
        with pytest.raises(UsageError, match=r"checkpoint interval .* both must be >= 0"):
            checkpoint_settings(seconds, nbytes)


def test_a_fresh_manifest_keeps_the_datasets_identity_and_history():
    old = manifest(batches=False)
    old.runs.append(new_run("load", source="x"))
    old.extra["future"] = 1
    spec = parse_dataset_uri("rocksdb:///x/ds?shards=2")
    m = fresh_manifest(old, spec, settings_of(format="capnp", compression="none", shards=2), 99)
    assert (m.dataset_id, m.created, m.runs, m.extra) == (old.dataset_id, old.created, old.runs, old.extra)
    assert (m.format, m.compression, m.shards, m.batch_records, m.scheme) == ("capnp", "none", 2, 99, "rocksdb")
    assert fresh_manifest(None, spec, settings_of(), 99).dataset_id != old.dataset_id


def test_prepare_root(tmp_path):
    spec = parse_dataset_uri(f"lmdb://{tmp_path}/ds")
    assert prepare_root(spec) is True and os.path.isdir(tmp_path / "ds")
    assert prepare_root(spec) is False  # already there
    with pytest.raises(MissingPathError, match=f"directory {tmp_path}/no does not exist .* mkdir -p {tmp_path}/no"):
        prepare_root(parse_dataset_uri(f"lmdb://{tmp_path}/no/ds"))
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(UsageError, match=f"{tmp_path}/file is not a directory"):
        prepare_root(parse_dataset_uri(f"lmdb://{tmp_path}/file/ds"))
    with pytest.raises(UsageError, match=f"dataset path {tmp_path}/file exists and is not a directory"):
        prepare_root(parse_dataset_uri(f"lmdb://{tmp_path}/file"))
    mf.Manifest(
        layout=SCIDB.to_dict(), format="capnp", compression="none", scheme="lmdb", shards=1, batch_records=10
    ).save(tmp_path / "ds")
    with pytest.raises(NestedDatasetError, match="lies inside"):
        prepare_root(parse_dataset_uri(f"lmdb://{tmp_path}/ds/inner"))
    assert not os.path.exists(tmp_path / "ds" / "inner")
