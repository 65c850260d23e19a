"""The ``block`` value format of documents (loader/docs_blocks.py): round trips, lookups,
page filling, corrupt values."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.docs._docsio import block_columns
from loader.docs.batch import DocBatch
from loader.docs.blocks import (
    HEADER_BYTES,
    LMDB_PAGE,
    LMDB_PAGE_HEADER,
    BlockReader,
    Packer,
    block_count,
    block_first_id,
    block_target,
)
from loader.docs.gen import generate_docs
from loader.errors import UsageError, VerifyError

I64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 60))
    start = draw(st.sampled_from([0, 1000, 2**32 - 3, 2**63 - 10, 2**64 - 200]))
    gaps = draw(st.lists(st.sampled_from([1, 1, 1, 2, 300, 2**20, 2**33]), min_size=n - 1, max_size=n - 1))
    ids = [start]
    for g in gaps:
        ids.append(min(ids[-1] + g, 2**64 - 1 - (n - len(ids)) + 1))
    ids = sorted(set(ids))
    texts = [draw(st.binary(max_size=draw(st.sampled_from([0, 10, 3000, 9000])))) for _ in ids]
    cas = draw(st.one_of(st.lists(I64, min_size=len(ids), max_size=len(ids)), st.just([7] * len(ids))))
    return DocBatch.from_records(zip(ids, cas, texts, strict=True))


def _reference_columns(batch: DocBatch, i: int, j: int, flags: int) -> bytes:
    """The header and columns of block i..j-1 as the module doc of docs_blocks lays them out."""

    def width(m):
        return 1 if m < 2**8 else 2 if m < 2**16 else 4 if m < 2**32 else 8

    ids = [int(x) for x in batch.ids[i:j]]
    cas = [int(x) for x in batch.created_at[i:j]]
    lens = [int(x) for x in np.diff(batch.offsets[i : j + 1])]
    deltas = [b - a for a, b in itertools.pairwise(ids)]
    wi = 0 if all(d == 1 for d in deltas) else width(max(deltas))
    wl = width(max(lens))
    base = min(cas)
    wc = 0 if max(cas) == base else width(max(cas) - base)
    out = struct.pack("<IBBBBQq", j - i, wi, wl, wc, flags, ids[0], base)
    out += b"".join(d.to_bytes(wi, "little") for d in deltas) if wi else b""
    out += b"".join(n.to_bytes(wl, "little") for n in lens)
    out += b"".join((c - base).to_bytes(wc, "little") for c in cas) if wc else b""
    return out


@settings(max_examples=40, deadline=None)
@given(batch=batches(), data=st.data())
def test_c_columns_match_the_documented_layout(batch, data):
    i = data.draw(st.integers(0, len(batch) - 1))
    j = data.draw(st.integers(i + 1, len(batch)))
    flags = data.draw(st.sampled_from([0, 1]))
    got = block_columns(batch.ids, batch.created_at, batch.offsets, i, j, flags)
    assert got == _reference_columns(batch, i, j, flags)


def test_c_columns_reject_bad_arguments():
    b = generate_docs(1, 0, 10)
    with pytest.raises(ValueError, match="bad block"):
        block_columns(b.ids, b.created_at, b.offsets, 5, 5, 0)
    with pytest.raises(ValueError, match="offsets holds"):
        block_columns(b.ids, b.created_at, b.offsets[:-1].copy(), 0, 5, 0)


def _unpack(blocks, reader):
    return DocBatch.concat([reader.decode(v) for _k, v in blocks])


@settings(max_examples=60, deadline=None)
@given(batch=batches(), compress=st.booleans(), pages=st.sampled_from([1, 2, 8]))
def test_round_trip_and_lookup(batch, compress, pages):
    blocks = Packer(compress=compress, pages=pages).pack(batch)
    r = BlockReader()
    assert _unpack(blocks, r).equals(batch)
    keys = [k for k, _ in blocks]
    assert keys == sorted(keys) and keys[-1] == int(batch.ids[-1])
    assert sum(block_count(v) for _k, v in blocks) == len(batch)
    pos = 0
    for k, v in blocks:
        m = block_count(v)
        assert block_first_id(v) == int(batch.ids[pos]) and k == int(batch.ids[pos + m - 1])
        pos += m
    for i, (doc_id, created, text) in enumerate(batch.records()):
        b = next(v for k, v in blocks if k >= doc_id)  # what a seek finds
        assert r.find(b, doc_id) == (created, text)
        if doc_id > 0 and (i == 0 or int(batch.ids[i - 1]) != doc_id - 1):
            assert r.find(b, doc_id - 1) is None  # an id in a gap


def test_blocks_fill_lmdb_pages():
    batch = generate_docs(1, 0, 6000)
    blocks = Packer().pack(batch)
    target = block_target()
    sizes = np.array([len(v) for _k, v in blocks])
    pages = -(-(sizes + LMDB_PAGE_HEADER) // LMDB_PAGE)
    assert sizes[:-1].max() <= target  # no block but the last spills onto an extra page
    fill = sizes.sum() / (pages.sum() * LMDB_PAGE)
    assert fill > 0.97, fill
    assert pages[:-1].min() >= 4  # no small blocks: half the target at least
    # deterministic: the cut depends on the batch alone
    assert Packer().pack(batch) == blocks
    # compressed close to the texts' entropy (random printable: ~0.83 of the text bytes)
    assert sizes.sum() < 0.85 * batch.text_nbytes


def test_a_document_larger_than_a_block():
    big = np.random.default_rng(0).bytes(100_000)  # incompressible
    batch = DocBatch.from_records([(1, 5, b"a"), (2, 6, big), (3, 7, b"c")])
    blocks = Packer(pages=2).pack(batch)
    assert _unpack(blocks, BlockReader()).equals(batch)
    assert any(block_count(v) == 1 and len(v) > block_target(2) for _k, v in blocks)


def test_corrupt_values_raise_verify_error():
    batch = generate_docs(2, 0, 50)
    ((_k, v),) = Packer().pack(batch)[:1]
    r = BlockReader()
    with pytest.raises(VerifyError, match="header alone"):
        r.decode(v[:10])
    with pytest.raises(VerifyError, match="do not fit"):
        r.decode(v[: HEADER_BYTES + 3])
    bad = bytearray(v)
    bad[4] = 3  # id width 3 does not exist
    with pytest.raises(VerifyError, match="corrupt document block header"):
        r.decode(bytes(bad))
    bad = bytearray(v)
    bad[-5] ^= 0xFF
    with pytest.raises(VerifyError, match="corrupt document block"):
        r.decode(bytes(bad))
    with pytest.raises(UsageError, match="at least 1"):
        block_target(0)
