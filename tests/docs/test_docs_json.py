"""The JSON directory source (loader/docs_json.py, loader/_docsio): listing, reading,
the fast path (one msgspec decode per batch) and the per-file path it must agree with."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.docs import _docsio
from loader.docs import json_dir as J
from loader.docs.batch import DocBatch, sort_by_id
from loader.docs.gen import generate_docs
from loader.docs.json_dir import (
    DirListing,
    FileError,
    id_from_name,
    parse_doc_json,
    parse_json_files,
    scan_json_dir,
    write_json_dir,
)
from loader.docs.sources import JsonDirSource, _load_plan, listing_fingerprint, save_plan
from loader.errors import BadFileError, InputError, UsageError

SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


# --- JSON directory source ------------------------------------------------------------------


def _write(d, name, content):
    p = d / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(p)


def test_json_dir_round_trip(tmp_path):
    b = generate_docs(11, 0, 40).take(np.arange(39, -1, -1))
    write_json_dir(b, tmp_path)
    entries, errors = scan_json_dir(tmp_path)
    assert errors == [] and [i for i, _ in entries] == list(range(40))
    got, errors = parse_json_files(entries)
    assert errors == [] and got.equals(sort_by_id(b))
    got2, _ = parse_json_files([p for _, p in entries])  # plain paths: ids from names
    assert got2.equals(got)


BAD_FILES = [
    ("1.json", '{"text": "a", "created_at": 1', "invalid JSON"),
    ("2.json", b'{"text": "caf\xe9", "created_at": 1}', "text is not valid UTF-8 (byte 13"),
    ("3.json", '{"text": "a"}', "missing field(s) 'created_at'"),
    ("4.json", '{"text": "a", "created_at": 1, "x": 2}', "unexpected field(s) 'x'"),
    ("5.json", '{"text": "a", "created_at": "2024"}', "'created_at' must be an integer (epoch seconds), got a string"),
    ("6.json", '{"text": 5, "created_at": 1}', "'text' must be a string, got an integer"),
    ("7.json", '{"text": "a", "created_at": 1.5}', "got a number with a fraction"),
    ("8.json", "[1, 2]", "expected a JSON object"),
    ("9.json", '{"text": "\\ud800", "created_at": 1}', "not valid UTF-8"),
    ("10.json", '{"text": "a", "created_at": true}', "got a boolean"),
    ("11.json", "", "invalid JSON"),
    (
        "12.json",
        '{"text": "a", "created_at": 18446744073709551616}',
        "'created_at' 18446744073709551616 is out of the int64 range",
    ),
    (
        "13.json",
        '{"text": "a", "created_at": -9223372036854775809}',
        "'created_at' -9223372036854775809 is out of the int64 range",
    ),
    (
        "14.json",
        '{"text": "a", "created_at": 9223372036854775808}',
        "'created_at' 9223372036854775808 is out of the int64 range",
    ),
    ("15.json", '{"text": "a", "created_at": 1e3}', "got 1000.0 (written with a decimal point or an exponent)"),
]


@pytest.mark.parametrize("name,content,reason", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_file_reasons(tmp_path, name, content, reason):
    _write(tmp_path, "100.json", orjson.dumps({"text": "ok", "created_at": 5}))
    bad = _write(tmp_path, name, content)
    entries, errors = scan_json_dir(tmp_path)
    batch, errors = parse_json_files(entries, on_bad_file="skip")
    assert batch.ids.tolist() == [100] and batch.text_of(0) == b"ok"
    assert len(errors) == 1 and errors[0].path == bad and reason in errors[0].reason, errors
    with pytest.raises(BadFileError, match="--on-bad-file skip") as e:
        parse_json_files(entries, on_bad_file="fail")
    assert isinstance(e.value, InputError) and reason in str(e.value)
    assert str(e.value).startswith(bad + ": ")


def test_bad_names_and_duplicates(tmp_path):
    ok = orjson.dumps({"text": "x", "created_at": 1})
    seven = _write(tmp_path, "7.json", ok)
    dup = _write(tmp_path, "007.json", ok)
    notid = _write(tmp_path, "abc.json", ok)
    neg = _write(tmp_path, "-3.json", ok)
    huge = _write(tmp_path, f"{2**64}.json", ok)
    _write(tmp_path, ".hidden", "ignored")
    (tmp_path / "sub").mkdir()
    entries, errors = scan_json_dir(tmp_path, on_bad_file="skip")
    assert [i for i, _ in entries] == [7]
    reasons = {e.path: e.reason for e in errors}
    # the first name in (id, name) order is kept: 007.json
    assert entries[0][1] == dup and reasons[seven] == f"duplicate id 7 (also in {dup})"
    assert "not an integer id" in reasons[notid] and "not an integer id" in reasons[neg]
    assert "out of range" in reasons[huge]
    with pytest.raises(BadFileError, match="and 3 more bad file"):
        scan_json_dir(tmp_path)
    # duplicates within one parse call, plain paths with a bad name
    batch, errors = parse_json_files([(7, seven), (7, dup), notid], on_bad_file="skip")
    assert batch.ids.tolist() == [7]
    assert [e.path for e in errors] == [dup, notid] and "duplicate id 7" in errors[0].reason
    with pytest.raises(UsageError, match="on-bad-file"):
        parse_json_files([], on_bad_file="ignore")


# --- the listing: C scanner vs the Python reference ------------------------------------------


def _scan_reference(directory):
    """The pure-Python listing scan_json_dir replaced (os.scandir, regex, sort of tuples)."""
    directory = os.fspath(directory)
    entries, errors = [], []
    with os.scandir(directory) as it:
        for e in it:
            if e.name.startswith(".") or not e.is_file():
                continue
            got = id_from_name(e.name)
            if isinstance(got, str):
                errors.append(FileError(e.path, got))
            else:
                entries.append((got, e.name, e.path))
    entries.sort()
    out, prev_id, prev_path = [], None, None
    for doc_id, _name, path in entries:
        if doc_id == prev_id:
            errors.append(FileError(path, f"duplicate id {doc_id} (also in {prev_path})"))
            continue
        out.append((doc_id, path))
        prev_id, prev_path = doc_id, path
    errors.sort(key=lambda f: f.path)
    return out, errors


OK = orjson.dumps({"text": "x", "created_at": 1})


def _odd_dir(d):
    """A directory with every kind of name and entry the listing must sort out."""
    names = [
        "0.json",
        "00.json",
        "1.json",
        "7.json",
        "007.json",
        "07.json",
        "7.json\n",
        "8.json\n",
        "abc.json",
        "-3.json",
        "1.JSON",
        "5.json.bak",
        " 5.json",
        "\uff15.json",
        "12a.json",
        ".json",
        "json",
        f"{2**64 - 1}.json",
        f"{2**64}.json",
        f"0{2**64 - 1}.json",
        "99999999999999999999999.json",
        "18446744073709551616.json",
        "100.json",
    ]
    for n in names:
        (d / n).write_bytes(OK)
    (d / os.fsdecode(b"\xff\xfe.json")).write_bytes(OK)  # not UTF-8: os.fsdecode's surrogates
    (d / "200.json").write_bytes(b"")  # empty: listed, bad when parsed
    for dot in (".5.json", ".hidden", ".007.json"):
        (d / dot).write_bytes(OK)
    (d / "9.json").mkdir()  # a directory named like a document: not listed
    (d / "sub").mkdir()
    (d / "sub" / "300.json").write_bytes(OK)  # not read
    os.symlink(d / "100.json", d / "10.json")  # a symlink to a file counts as the file
    os.symlink(d / "sub", d / "11.json")  # ... to a directory does not
    os.symlink(d / "nowhere.json", d / "12.json")  # dangling: not a file
    os.symlink(d / "100.json", d / "0100.json")  # a symlink with a leading-zero name: duplicate
    os.mkfifo(d / "13.json")  # not a regular file


def test_scan_matches_reference(tmp_path):
    _odd_dir(tmp_path)
    want, want_errors = _scan_reference(tmp_path)
    got, errors = scan_json_dir(tmp_path, on_bad_file="skip")
    assert isinstance(got, DirListing)
    assert list(got) == want and got == want and errors == want_errors
    assert [got[i] for i in range(len(got))] == want and got[-1] == want[-1]
    assert len(got.odd) > 0 and all(got.name_at(k) == os.path.basename(want[k][1]) for k in range(len(want)))
    ids, odd = _docsio.scan_dir(str(tmp_path))  # raw: canonical ids, every other name
    canon = sorted(np.frombuffer(ids, np.uint64).tolist())
    assert canon == [0, 1, 7, 10, 100, 200, 2**64 - 1]
    assert "007.json" in odd and "7.json\n" in odd and os.fsdecode(b"\xff\xfe.json") in odd
    assert not any(n.startswith(".") for n in odd) and "9.json" not in odd and "13.json" not in odd
    with pytest.raises(BadFileError) as e:
        scan_json_dir(tmp_path)
    assert e.value.args[0].startswith(str(want_errors[0]))


def test_scan_trailing_slash_and_empty(tmp_path):
    write_json_dir(generate_docs(1, 5, 3), tmp_path / "d")
    got, _ = scan_json_dir(str(tmp_path / "d") + "/")
    assert got == _scan_reference(str(tmp_path / "d") + "/")[0]
    (tmp_path / "e").mkdir()
    got, errors = scan_json_dir(tmp_path / "e")
    assert len(got) == 0 and list(got) == [] and errors == []
    assert parse_json_files(got)[0].equals(DocBatch.empty())


@SETTINGS
@given(
    names=st.lists(
        st.one_of(
            st.integers(0, 2**64 + 5).map(lambda i: f"{i}.json"),
            st.integers(0, 300).map(lambda i: f"0{i}.json"),
            st.text(st.sampled_from("0123456789.jsonJ-x\n "), min_size=1, max_size=8),
        ),
        max_size=25,
        unique=True,
    )
)
def test_scan_property(names):
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as d:
        for n in names:
            if n not in (".", ".."):
                with open(os.path.join(d, n), "wb") as f:
                    f.write(OK)
        want, want_errors = _scan_reference(d)
        got, errors = scan_json_dir(d, on_bad_file="skip")
        assert list(got) == want and errors == want_errors


def test_listing_slices_pickle_and_compare(tmp_path):
    _odd_dir(tmp_path)
    got, _ = scan_json_dir(tmp_path, on_bad_file="skip")
    ref = list(got)
    for s in (
        slice(None),
        slice(2, 5),
        slice(3, None),
        slice(-3, None),
        slice(5, 2),
        slice(None, None, 2),
        slice(None, None, -1),
    ):
        assert list(got[s]) == ref[s]
    assert isinstance(got[1:3], DirListing)
    back = pickle.loads(pickle.dumps(got))
    assert back == got and list(back) == ref
    assert got != ref[:-1] and (got == 5) is False
    with pytest.raises(IndexError):
        got[len(got)]


def test_listing_take_and_stat(tmp_path):
    _odd_dir(tmp_path)
    got, _ = scan_json_dir(tmp_path, on_bad_file="skip")
    ref = list(got)
    pos = [0, 2, len(ref) - 1]
    assert list(got.take(pos)) == [ref[p] for p in pos]
    assert list(got.take([])) == []
    there, sizes, mtimes = got.stat()  # in C, following symlinks as os.stat does
    assert list(there) == ref
    want = [os.stat(p) for _i, p in ref]
    assert sizes.tolist() == [st.st_size for st in want]
    assert mtimes.tolist() == [st.st_mtime_ns for st in want]
    os.remove(ref[1][1])  # gone since the listing: left out
    there, sizes, _ = got.stat()
    assert list(there) == ref[:1] + ref[2:] and len(sizes) == len(ref) - 1
    with pytest.raises(FileNotFoundError):
        _docsio.stat_batch(str(tmp_path / "nope"), np.zeros(1, np.uint64))


# --- the batched reader -------------------------------------------------------------------------


def test_read_batch_layout(tmp_path):
    contents = [b'{"text": "a", "created_at": 1}', b"", b"  {}\n", b"{", b" x ", b'\t{"a":1}\r\n', b"}{"]
    for i, c in enumerate(contents):
        (tmp_path / f"{i}.json").write_bytes(c)
    ids = np.arange(len(contents) + 1, dtype=np.uint64)  # the last one does not exist
    buf, spans, errnos, braced = _docsio.read_batch(str(tmp_path), ids)
    data = bytes(buf)
    spans = np.frombuffer(spans, np.int64).reshape(-1, 2)
    assert data == b"[" + b",\n".join(contents) + b",\n]"
    assert [data[a:z] for a, z in spans.tolist()][:-1] == contents
    assert np.frombuffer(errnos, np.int32).tolist() == [0] * len(contents) + [2]  # ENOENT
    assert list(braced) == [1, 0, 1, 0, 0, 1, 0, 0]
    # names: relative to dir, absolute, or None for <id>.json; a directory fd works too
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        got = _docsio.read_batch(fd, ids[:2], [None, str(tmp_path / "0.json")])
    finally:
        os.close(fd)
    assert bytes(got[0]) == b"[" + contents[0] + b",\n" + contents[0] + b"]"
    assert bytes(_docsio.read_batch(None, ids[:0])[0]) == b"[]"
    with pytest.raises(FileNotFoundError):
        _docsio.read_batch(str(tmp_path / "missing"), ids)
    with pytest.raises(TypeError):
        _docsio.read_batch(str(tmp_path), np.arange(3, dtype=np.int32))
    with pytest.raises(ValueError):
        _docsio.read_batch(str(tmp_path), ids[:2], [None])


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_read_without_noatime_permission(tmp_path):
    """O_NOATIME is refused for a file we do not own (without CAP_FOWNER): read it anyway."""
    docs = generate_docs(4, 0, 3)
    write_json_dir(docs, tmp_path)
    for p in tmp_path.iterdir():
        os.chown(p, 65534, 65534)
    code = (
        "import sys; from loader.docs.json_dir import parse_json_files, scan_json_dir; "
        "b, e = parse_json_files(scan_json_dir(sys.argv[1])[0]); print(b.ids.tolist(), e)"
    )
    p = subprocess.run(
        ["setpriv", "--inh-caps=-fowner", "--bounding-set=-fowner", sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and p.stdout.strip() == "[0, 1, 2] []", p.stderr


def test_large_empty_and_vanished_files(tmp_path):
    big = "".join(chr(32 + i % 90) for i in range(3 << 19)) + "\u00e9\u4e2d\U0001f600"  # > 1.5 MiB
    docs = DocBatch.from_records([(1, 5, big.encode()), (2, -(2**63), b""), (3, 2**63 - 1, b'\\"\n')])
    write_json_dir(docs, tmp_path)
    entries, _ = scan_json_dir(tmp_path)
    before = dict(J.PARSE_COUNTS)
    got, errors = parse_json_files(entries)
    assert errors == [] and got.equals(docs) and J.PARSE_COUNTS["fast"] == before["fast"] + 1
    (tmp_path / "4.json").write_bytes(b"")
    os.unlink(tmp_path / "2.json")  # removed between listing and reading
    entries = DirListing(str(tmp_path), np.array([1, 2, 3, 4], np.uint64))
    got, errors = parse_json_files(entries, on_bad_file="skip")
    assert got.ids.tolist() == [1, 3] and got.text_of(0) == big.encode()
    assert [(os.path.basename(e.path), e.reason.split(":")[0]) for e in errors] == [
        ("2.json", "cannot read"),
        ("4.json", "invalid JSON"),
    ]
    assert errors[0].reason == "cannot read: No such file or directory"
    (tmp_path / "5.json").mkdir()  # listed by hand: read(2) fails
    _, errors = parse_json_files([(5, str(tmp_path / "5.json"))], on_bad_file="skip")
    assert errors[0].reason == "cannot read: Is a directory"


def test_fast_path_is_used_for_good_input(tmp_path):
    b = generate_docs(3, 0, 500)
    write_json_dir(b, tmp_path)
    entries, _ = scan_json_dir(tmp_path)
    before = dict(J.PARSE_COUNTS)
    got, errors = parse_json_files(entries)
    assert errors == [] and got.equals(b)
    got2, _ = parse_json_files(list(entries))  # (id, path) pairs
    got3, _ = parse_json_files([p for _, p in entries][:100])  # plain paths
    assert got2.equals(b) and got3.equals(b.slice(0, 100))
    assert {"fast": before["fast"] + 3, "per_file": before["per_file"]} == J.PARSE_COUNTS
    # a duplicate within one call goes file by file, which keeps the first
    got, errors = parse_json_files([entries[0], entries[1], entries[0]], on_bad_file="skip")
    assert got.ids.tolist() == [0, 1] and "duplicate id 0" in errors[0].reason
    assert J.PARSE_COUNTS["per_file"] == before["per_file"] + 1


def test_chunks(tmp_path, monkeypatch):
    """Chunks of a call: good ones fast, one with a bad file file by file; errors in order."""
    monkeypatch.setattr(J, "CHUNK_FILES", 4)
    b = generate_docs(8, 0, 11)
    write_json_dir(b, tmp_path)
    (tmp_path / "5.json").write_bytes(b"{}")
    (tmp_path / "9.json").write_bytes(b"[]")
    entries, _ = scan_json_dir(tmp_path)
    before = dict(J.PARSE_COUNTS)
    got, errors = parse_json_files(entries, on_bad_file="skip")
    assert got.equals(b.take(np.array([0, 1, 2, 3, 4, 6, 7, 8, 10])))
    assert [os.path.basename(e.path) for e in errors] == ["5.json", "9.json"]
    assert {"fast": before["fast"] + 1, "per_file": before["per_file"] + 2} == J.PARSE_COUNTS
    with pytest.raises(BadFileError, match=r"5\.json: invalid document: missing field\(s\) 'created_at', 'text' "):
        parse_json_files(entries[1:], on_bad_file="fail")
    # a duplicate across chunks (given by hand): the whole call goes file by file
    pairs = list(entries)
    got, errors = parse_json_files(pairs[:5] + pairs[6:9] + [pairs[2]] + [pairs[10]], on_bad_file="skip")
    assert got.ids.tolist() == [0, 1, 2, 3, 4, 6, 7, 8, 10] and errors[0].reason.startswith("duplicate id 2 ")
    got, errors = parse_json_files([p for i, p in pairs if i not in (5, 9)])
    assert got.equals(b.take(np.array([0, 1, 2, 3, 4, 6, 7, 8, 10]))) and errors == []


def test_plan_round_trip_and_fingerprint(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("3.json", "007.json", "8.json\n", "12.json", os.fsdecode(b"1\xff.json")):
        (src / name).write_bytes(orjson.dumps({"text": ascii(name), "created_at": len(name)}))
    entries, errors = scan_json_dir(src, on_bad_file="skip")
    assert [i for i, _ in entries] == [3, 7, 8, 12] and len(errors) == 1  # 1\xff.json: not an id
    assert entries.odd == {1: "007.json", 2: "8.json\n"}
    (tmp_path / "ds").mkdir()  # the dataset directory (save_plan makes only .plans inside it)
    plan = str(tmp_path / "ds" / ".plans" / "r1.plan")
    save_plan(plan, entries)
    ids, pos, names = _load_plan(plan)
    assert ids.tolist() == [3, 7, 8, 12] and pos.tolist() == [1, 2] and names == ["007.json", "8.json\n"]
    source = JsonDirSource(str(src), "fail", plan)
    want, _ = parse_json_files(entries)
    assert DocBatch.concat([source.read_docs(0, 2)[0], source.read_docs(2, 2)[0]]).equals(want)
    assert source.read_docs(1, 2)[0].equals(want.slice(1, 3)) and source.id_at(3) == 12
    # a plain list of (id, path) plans and fingerprints the same
    save_plan(plan + "2", list(entries))
    assert [a.tolist() if hasattr(a, "tolist") else a for a in _load_plan(plan + "2")] == [
        ids.tolist(),
        pos.tolist(),
        names,
    ]
    fp = listing_fingerprint(entries)
    assert fp == listing_fingerprint(list(entries)) and fp.startswith("files=4;")
    renamed = [(i, p.replace("007.json", "7.json")) for i, p in entries]
    assert listing_fingerprint(renamed) != fp
    assert listing_fingerprint(list(entries)[:3]) != fp


# --- the fast path must never accept what the per-file path rejects -------------------------------

GOOD = b'{"text": "a", "created_at": 1}'

ADVERSARIAL = [
    # two bad files whose concatenation (with ",\n") is one valid document
    [b'{"text": "a"', b'"created_at": 1}'],
    [b'{"text": "a", ', b' "created_at": 1}'],
    # a file holding two documents next to an empty / blank file
    [GOOD + b"," + GOOD, b""],
    [GOOD + b", " + GOOD, b"  \n"],
    [b"", GOOD + b"," + GOOD],
    [GOOD + b"," + GOOD, GOOD, b"\n"],
    [GOOD + b"\n," + GOOD, GOOD],
    # array punctuation inside files
    [GOOD + b"]", b"[" + GOOD],
    [b"[" + GOOD + b"]", GOOD],
    [GOOD + b",", GOOD],
    [b"," + GOOD, GOOD],
    # a string spanning the separator
    [b'{"text": "a', b'b", "created_at": 1}'],
    [b'{"text": "}', b'", "created_at": 1}'],
    # nested values split over files
    [b'{"text": "a", "created_at": 1, "x": {', b"}}"],
    [b'{"text": "a", "created_at": 1, "x": [', b"]}"],
    # msgspec and orjson differ: only the per-file path may decide
    [b'{"text": 1, "text": "b", "created_at": 1}', GOOD],
    [b'{"text": "a", "created_at": 9223372036854775808}', GOOD],
    [b'{"text": "a", "created_at": -9223372036854775809}', GOOD],
    [b'{"text": "a", "created_at": 18446744073709551616}', GOOD],
    [b'{"text": "a", "created_at": 1.0}', GOOD],
    [b'{"text": "a", "created_at": true}', GOOD],
    [b'{"text": "\\ud800", "created_at": 1}', GOOD],
    [b'{"text": "\xed\xa0\x80", "created_at": 1}', GOOD],
    [b'{"text": "\xff", "created_at": 1}', GOOD],
    [b"\xef\xbb\xbf" + GOOD, GOOD],
    [GOOD + b"\x0c", GOOD],
    [GOOD + b"\x00", GOOD],
    [b'{"text": "a\tb", "created_at": 1}', GOOD],
    [b'{"text": "a", "created_at": 1,}', GOOD],
    [b'{"text": "a", "created_at": 01}', GOOD],
    [b'{"text": "a", "created_at": NaN}', GOOD],
    [b'{"text": "a", "created_at": 1} {"text": "b", "created_at": 2}', GOOD],
    [b'{"created_at": 1}', GOOD],
    [b'{"text": "a", "created_at": 1, "text2": "b"}', GOOD],
    # good files the fast path takes (or leaves to the per-file path: also right)
    [b'{"text": "a", "text": "b", "created_at": 1}', b' {"created_at": 2, "text": "}{\\"],"}\r\n'],
    [b'{"te\\u0078t": "\\ud83d\\ude00", "created_at": -0}', b'{"text": "a\\/b\\u0000", "created_at": 1 }'],
    [GOOD, GOOD, GOOD],
]


def _reference(contents):
    """What the per-file path makes of files with these contents (ids 0..n-1)."""
    recs, bad = [], []
    for i, c in enumerate(contents):
        got = parse_doc_json(c)
        if isinstance(got, str):
            bad.append((i, got))
        else:
            recs.append((i, got[0], got[1]))
    return DocBatch.from_records(recs), bad


def _check_agreement(d, contents):
    for i, c in enumerate(contents):
        with open(os.path.join(d, f"{i}.json"), "wb") as f:
            f.write(c)
    ids = np.arange(len(contents), dtype=np.uint64)
    want, bad = _reference(contents)
    read = J._Read.of(d, ids)
    fast = J.parse_batch_fast(read, ids)
    # defence in depth: even without the '{'...'}' check, count equality must hold the line
    unchecked = J.parse_batch_fast(dataclasses.replace(read, braced=np.ones(len(ids), np.uint8)), ids)
    for got in (fast, unchecked):
        if bad:
            assert got is None, (contents, bad)
        elif got is not None:
            assert got.equals(want), contents
    for chunk in (J.CHUNK_FILES, 2):  # whole, and in chunks (some fast, some file by file)
        with _chunk_files(chunk):
            batch, errors = parse_json_files(DirListing(d, ids), on_bad_file="skip")
        assert batch.equals(want)
        assert [(int(os.path.basename(e.path).split(".")[0]), e.reason) for e in errors] == bad
    return fast


@contextlib.contextmanager
def _chunk_files(n):
    old, J.CHUNK_FILES = J.CHUNK_FILES, n
    try:
        yield
    finally:
        J.CHUNK_FILES = old


@pytest.mark.parametrize("contents", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_fast_path_rejects_what_per_file_rejects(tmp_path, contents):
    fast = _check_agreement(str(tmp_path), contents)
    if contents == [GOOD] * 3:
        assert fast is not None


PIECES = [
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b" ",
    b"\n",
    b"\t",
    b'"',
    b'"text"',
    b'"created_at"',
    b'"x"',
    b'"a"',
    b'"\\n"',
    b'"}"',
    b'"{,\\"',
    b"1",
    b"-2",
    b"1.0",
    b"1e2",
    b"true",
    b"null",
    b"9223372036854775808",
    b"\xc3\xa9",
    b"\xff",
    b"\\ud800",
    GOOD,
    b'{"text": "b", "created_at": 2}',
]


def _doc(text, created):
    return orjson.dumps({"text": text, "created_at": created})


def _doc_any(text, created, ws):
    """Keys the other way round, any integer (also beyond int64), some whitespace."""
    return b'%s{"created_at":%s%d, "text": %s}%s' % (ws, ws, created, orjson.dumps(text), ws)


file_content = st.one_of(
    st.builds(_doc, st.text(max_size=12), st.integers(-(2**63), 2**63 - 1)),  # good
    st.builds(_doc_any, st.text(max_size=5), st.integers(-(2**65), 2**65), st.sampled_from([b"", b" ", b"\r\n\t"])),
    st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join),  # mostly bad
    st.tuples(st.builds(_doc, st.text(max_size=5), st.integers(0, 9)), st.integers(0, 40)).map(
        lambda t: t[0][: t[1]]
    ),  # a prefix of a good file
    st.tuples(st.builds(_doc, st.text(max_size=5), st.integers(0, 9)), st.integers(0, 40)).map(
        lambda t: t[0][t[1] :]
    ),  # a suffix
    st.lists(st.builds(_doc, st.text(max_size=3), st.integers(0, 9)), min_size=2, max_size=3).map(
        lambda ds: b",".join(ds)
    ),  # two or three documents in one file
    st.binary(max_size=12),
)


@SETTINGS
@given(st.lists(file_content, min_size=1, max_size=6))
def test_fast_path_agrees_with_per_file_path(contents):
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as d:
        _check_agreement(d, contents)
