"""The docs layout's building blocks: Doc values, zdict (the JSON directory source: test_docs_json.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.docs import zdict
from loader.docs.batch import DocBatch, duplicate_ids, id_of_key, key_of, keys_of, sort_by_id
from loader.docs.gen import generate_docs
from loader.docs.layout import DOCS, capnp_module
from loader.docs.values import (
    decode_doc_capnp,
    decode_doc_raw,
    decode_values,
    encode_batch,
    encode_batch_buffer,
    encode_doc_capnp,
    encode_doc_raw,
)
from loader.errors import UsageError, VerifyError

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def test_layout_and_arrow():
    assert DOCS.name == "docs" and DOCS.names == ["id", "created_at", "text"]
    assert [str(f.type) for f in DOCS.arrow_schema] == ["uint64", "int64", "string"]
    b = generate_docs(3, 10, 50)
    rb = b.slice(5, 40).to_arrow()
    assert rb.schema.equals(DOCS.arrow_schema)
    assert rb.column("text")[0].as_py().encode() == b.text_of(5)
    assert DocBatch.from_arrow(rb).equals(b.slice(5, 40))


def test_sort_keys_and_duplicates():
    b = generate_docs(4, 0, 300)
    perm = np.random.default_rng(0).permutation(300)
    shuffled = b.take(perm)
    assert not shuffled.equals(b)
    assert sort_by_id(shuffled).equals(b)
    assert sort_by_id(b) is b
    ks = keys_of(b.ids)
    assert ks == sorted(ks) and ks[5] == key_of(5) == (5).to_bytes(8, "big")
    assert id_of_key(key_of(2**64 - 1)) == 2**64 - 1
    assert duplicate_ids(np.array([1, 2, 2, 3, 5, 5, 5], np.uint64)).tolist() == [2, 5]


# --- values ------------------------------------------------------------------------------

texts = st.text(max_size=300).map(lambda s: s.encode("utf-8", "surrogatepass").decode("utf-8", "replace").encode())


@SETTINGS
@given(doc_id=st.integers(0, 2**64 - 1), created=st.integers(-(2**63), 2**63 - 1), text=texts)
def test_capnp_doc_round_trip_and_pycapnp(doc_id, created, text):
    v = encode_doc_capnp(doc_id, created, text)
    assert len(v) % 8 == 0
    assert decode_doc_capnp(v) == (doc_id, created, text)
    Doc = capnp_module().Doc
    with Doc.from_bytes(v) as d:  # pycapnp reads our framing
        assert (d.id, d.createdAt, d.text.encode()) == (doc_id, created, text)
    built = Doc.new_message(id=doc_id, createdAt=created, text=text.decode())
    assert decode_doc_capnp(built.to_bytes()) == (doc_id, created, text)  # we read pycapnp's
    assert decode_doc_capnp(bytearray(v)) == (doc_id, created, text)


def test_capnp_reads_defaults_and_rejects_garbage():
    Doc = capnp_module().Doc
    assert decode_doc_capnp(Doc.new_message().to_bytes()) == (0, 0, b"")
    assert decode_doc_capnp(Doc.new_message(id=3).to_bytes()) == (3, 0, b"")
    v = encode_doc_capnp(1, 2, b"hello")
    with pytest.raises(VerifyError, match="Doc"):
        decode_doc_capnp(v[:-8])
    with pytest.raises(VerifyError):
        decode_doc_capnp(b"\x00" * 5)
    bad = bytearray(v)
    bad[32] = 0xFF  # not a byte-list pointer any more
    with pytest.raises(VerifyError):
        decode_doc_capnp(bytes(bad))


@SETTINGS
@given(created=st.integers(-(2**63), 2**63 - 1), text=texts)
def test_raw_round_trip(created, text):
    v = encode_doc_raw(created, text)
    assert len(v) == 8 + len(text)
    assert decode_doc_raw(v) == (created, text)


@pytest.mark.parametrize("fmt", ["capnp", "raw"])
def test_batch_encoding_matches_single(fmt):
    b = DocBatch.concat(
        [generate_docs(9, 0, 200), DocBatch.from_records([(10**6, -5, b""), (10**6 + 1, 7, "é\u20ac".encode())])]
    )
    vals = encode_batch(b, fmt)
    buf, off = encode_batch_buffer(b, fmt)
    for i, (doc_id, ca, t) in enumerate(b.records()):
        one = encode_doc_capnp(doc_id, ca, t) if fmt == "capnp" else encode_doc_raw(ca, t)
        assert vals[i] == one == buf[off[i] : off[i + 1]]
    assert decode_values(b.ids.tolist(), vals, fmt).equals(b)
    assert encode_batch(DocBatch.empty(), fmt) == []
    with pytest.raises(UsageError, match="format"):
        encode_batch(b, "json")


# --- zdict -------------------------------------------------------------------------------------


def test_zdict_round_trip_and_beats_plain():
    b = generate_docs(21, 0, 3000)
    values = encode_batch(b, "raw")
    train_on, test_on = values[:2000], values[2000:]
    d = zdict.train(zdict.sample(train_on, max_bytes=1 << 20), dict_size=8192)
    assert d and zdict.dict_id(d) != 0
    c = pickle.loads(pickle.dumps(zdict.Compressor(d, level=3)))
    dec = pickle.loads(pickle.dumps(zdict.Decompressor(d)))
    packed = c.compress_many(test_on)
    assert c.compress_many(test_on, threads=2) == packed
    assert dec.decompress_many(packed) == test_on
    plain = zdict.Compressor(b"", level=3).compress_many(test_on)
    assert zdict.Decompressor(b"").decompress(plain[0]) == test_on[0]
    assert sum(map(len, packed)) < 0.99 * sum(map(len, plain))
    # short values: the dictionary wins by more
    small = [v[:200] for v in test_on]
    ds = zdict.Compressor(d).compress_many(small)
    ps = zdict.Compressor(b"").compress_many(small)
    assert sum(map(len, ds)) < 0.9 * sum(map(len, ps))
    with pytest.raises(VerifyError, match="decompress"):
        dec.decompress(b"\x00garbage")


def test_zdict_too_little_to_train():
    assert zdict.train([b"abc"] * 3) == b""
    c = zdict.Compressor(zdict.train([]))
    assert zdict.Decompressor(b"").decompress(c.compress(b"hello" * 10)) == b"hello" * 10
    with pytest.raises(UsageError):
        zdict.Compressor(b"", level=99)
