"""Compressed datasets read, verify, export, finalize, compact and answer queries exactly as
uncompressed ones (issue 14: "Reads, verify, export, finalize and queries work on it
unchanged"): every compressed (format, compression) against the uncompressed capnp dataset of
the same records, on both stores; and a damaged compressed value is a verify problem, not a
crash."""

from __future__ import annotations

import pyarrow.feather as feather
import pytest
from helpers import run_cli

import loader
from loader.model.placement import batch_key
from loader.stores.registry import open_writer
from loader.stores.spec import parse_dataset_uri

N, DIMS, BOX = 6000, "i0:5,i1:1000", "i0=0:3,i1=100:2500"


def _build(uri: str, fmt: str, comp: str) -> None:
    loader.load(f"gen://scidb96?n={N}", uri, shards=2, workers=1, batch_records=700, format=fmt, compression=comp)
    loader.finalize(uri, dims=DIMS, workers=1)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    uri = f"lmdb://{tmp_path_factory.mktemp('plain')}/ds"
    _build(uri, "capnp", "none")
    return uri


@pytest.mark.parametrize(
    "store, fmt, comp",
    [("lmdb", "capnp", "lz4"), ("rocksdb", "capnp", "zstd"), ("rocksdb", "capnp", "lz4"), ("lmdb", "arrow", "lz4")],
)
def test_a_compressed_dataset_reads_as_the_plain_one(plain, tmp_path, store, fmt, comp):
    uri = f"{store}://{tmp_path}/ds"
    _build(uri, fmt, comp)
    info = loader.info(uri)
    assert (info["format"], info["compression"], info["records"]) == (fmt, comp, N)
    assert info["stored_bytes"] < loader.info(plain)["stored_bytes"] / (5 if fmt == "capnp" else 2)  # it compressed
    assert loader.verify(uri).ok
    assert loader.query(uri, BOX).equals(loader.query(plain, BOX))
    for ds in (uri, plain):
        loader.export(ds, str(tmp_path / f"{ds == plain}.arrow"), "arrow")
        loader.export(ds, str(tmp_path / f"{ds == plain}.capnp"), "capnp")
    assert feather.read_table(tmp_path / "False.arrow").equals(feather.read_table(tmp_path / "True.arrow"))
    # a Cap'n Proto export is standard messages whatever the dataset's format and compression
    assert (tmp_path / "False.capnp").read_bytes() == (tmp_path / "True.capnp").read_bytes()
    loader.compact(uri, target_batch_records=N)
    assert loader.verify(uri).ok and loader.query(uri, BOX).equals(loader.query(plain, BOX))


def test_a_damaged_compressed_value_is_a_verify_problem(tmp_path):
    uri = f"lmdb://{tmp_path}/ds"
    loader.load(f"gen://scidb96?n={N}", uri, shards=1, workers=1, batch_records=1000, compression="lz4")
    spec = parse_dataset_uri(uri)
    st = open_writer(spec, 0, {})
    try:
        value = bytearray(st.get(batch_key(2)))
        value[70:90] = b"\xff" * 20  # inside the compressed stream (after the 40-byte header and the 20-byte head)
        st.put_sorted([(batch_key(2), bytes(value))])
        st.sync()
    finally:
        st.close()
    rep = loader.verify(uri)
    assert not rep.ok and [(p["batch"], p["problem"]) for p in rep.problems] == [
        (2, "checksum mismatch (stored bytes changed)")
    ]
    out = run_cli("export", uri, "--out", str(tmp_path / "x.arrow"))  # reading it: an error, no traceback
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "shard 0 batch 2 (first record 2000)" in out.stderr and "checksum mismatch" in out.stderr, out.stderr
