"""The JSON directory source of layout ``docs``: ``bulkload load DIR --layout docs``.

`scan_json_dir` lists the files ``<id>.json`` of a directory, sorted by id, as a
`DirListing`; `parse_json_files` reads them into a DocBatch. A document file holds exactly
``{"text": "...", "created_at": 1727290164}``. Every bad file becomes a `FileError`
(path and reason): with ``on_bad_file="fail"`` the first one raises `BadFileError`,
with ``"skip"`` they are returned for the run report.

Both are built for a million files: the C extension `loader.docs._docsio` lists the directory
(one readdir pass; the ids of canonical names come back as one uint64 buffer) and reads a
batch of files into one buffer laid out as a JSON array, which msgspec decodes at once
(`parse_batch_fast` says why that cannot accept a bad file). A batch with a bad file is
parsed again file by file (`parse_doc_json`, orjson, from the same bytes), which words
the reasons. Reads only, but for `write_json_dir` (tests, benchmarks).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import orjson

from ..errors import BadFileError, MissingPathError, UsageError
from . import _docsio
from .batch import DocBatch

# --- the JSON directory source ------------------------------------------------------------

_ID_NAME = re.compile(r"^([0-9]+)\.json$")
_DOC_KEYS = ("created_at", "text")
ON_BAD_FILE = ("fail", "skip")


@dataclass(frozen=True)
class FileError:
    """One bad input file: its path and why (for the run report)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"

    def to_dict(self) -> dict:
        return {"path": self.path, "reason": self.reason}


def _check_on_bad_file(on_bad_file: str) -> None:
    if on_bad_file not in ON_BAD_FILE:
        raise UsageError(f"--on-bad-file {on_bad_file!r} is unknown; use fail or skip")


def bad_file_error(errors: list[FileError]) -> BadFileError:
    """The error that stops a load at the first bad file of ``errors`` (--on-bad-file fail)."""
    more = f" (and {len(errors) - 1} more bad file(s))" if len(errors) > 1 else ""
    return BadFileError(
        f"{errors[0]}{more}; nothing was loaded - fix or remove the file, "
        f"or pass --on-bad-file skip to load the others and list it in the run report",
        errors,
    )


def id_from_name(name: str) -> int | str:
    """The id of a file name ``<id>.json``, or the reason it is not one."""
    m = _ID_NAME.match(name)
    if not m:
        return "file name is not an integer id (expected <id>.json, e.g. 42.json)"
    v = int(m.group(1))
    if v >= 2**64:
        return f"file name id {m.group(1)} is out of range (ids are 0..{2**64 - 1})"
    return v


class DirListing(Sequence):
    """The document files of one directory in id order: a sequence of (id, path).

    Held as ``ids`` (uint64, ascending) and ``odd`` ({position: file name} for the files
    not named ``<id>.json``, e.g. ``007.json`` kept for id 7), so that a listing of a
    million files is one array, not a million tuples. Paths are made on access:
    ``os.path.join(directory, name)``, as os.scandir makes them. Slicing gives a
    DirListing; it pickles small; it equals a list of the same (id, path) pairs.
    """

    __slots__ = ("directory", "ids", "odd")

    def __init__(self, directory: str, ids: np.ndarray, odd: dict[int, str] | None = None):
        self.directory = directory
        self.ids = ids
        self.odd = odd or {}

    def name_at(self, i: int) -> str:
        return self.odd.get(i) or f"{int(self.ids[i])}.json"

    def names(self) -> list[str | None]:
        """Per file: its name when it is not ``<id>.json``, else None."""
        out: list[str | None] = [None] * len(self.ids)
        for i, name in self.odd.items():
            out[i] = name
        return out

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, positions) -> DirListing:
        """The files at the given positions (ascending), as a DirListing."""
        positions = np.asarray(positions, np.intp)
        odd = {}
        if self.odd:
            where = {int(p): k for k, p in enumerate(positions.tolist())}
            odd = {where[p]: nm for p, nm in self.odd.items() if p in where}
        return DirListing(self.directory, self.ids[positions], odd)

    def stat(self) -> tuple[DirListing, np.ndarray, np.ndarray]:
        """(the files still there, their sizes, their mtimes in ns): one stat(2) each, in C."""
        raw_sizes, raw_mtimes, errnos = _docsio.stat_batch(self.directory, self.ids, self.names() if self.odd else None)
        there = np.frombuffer(errnos, np.int32) == 0
        sizes, mtimes = np.frombuffer(raw_sizes, np.int64), np.frombuffer(raw_mtimes, np.int64)
        if there.all():
            return self, sizes, mtimes
        return self.take(np.flatnonzero(there)), sizes[there], mtimes[there]

    def __getitem__(self, i):
        n = len(self.ids)
        if isinstance(i, slice):
            a, z, step = i.indices(n)
            if step != 1:
                keep = range(a, z, step)
                pos = {p: k for k, p in enumerate(keep)}
                return DirListing(
                    self.directory,
                    self.ids[np.array(keep, np.intp)],
                    {pos[p]: nm for p, nm in self.odd.items() if p in pos},
                )
            z = max(a, z)
            return DirListing(self.directory, self.ids[a:z], {p - a: nm for p, nm in self.odd.items() if a <= p < z})
        i = range(n)[i]  # IndexError, negative indices
        return int(self.ids[i]), os.path.join(self.directory, self.name_at(i))

    def __iter__(self):
        ids = self.ids.tolist()
        prefix = os.path.join(self.directory, "")
        if not self.odd:
            return zip(ids, map(lambda i: f"{prefix}{i}.json", ids))
        odd = self.odd
        return ((i, prefix + (odd[k] if k in odd else f"{i}.json")) for k, i in enumerate(ids))

    def __eq__(self, other):
        if isinstance(other, DirListing):
            return self.directory == other.directory and np.array_equal(self.ids, other.ids) and self.odd == other.odd
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return DirListing, (self.directory, np.asarray(self.ids), self.odd)

    def __repr__(self) -> str:
        return f"DirListing({self.directory!r}, {len(self)} files, {len(self.odd)} not named <id>.json)"


def scan_json_dir(directory, on_bad_file: str = "fail") -> tuple[DirListing, list[FileError]]:
    """The document files of a directory: (`DirListing` of (id, path) sorted by id, [FileError]).

    Every regular file whose name does not start with '.' must be ``<id>.json``;
    subdirectories are not read (a symlink counts as what it points to). Two names for
    one id (``7.json``, ``07.json``) are a duplicate: the first name in (id, name) order
    is kept, the others are errors.

    The C scanner returns the ids of the canonical names (``<digits>.json``, no leading
    zero) as one buffer and every other name as a list; those few are classified here
    with `id_from_name`.
    """
    _check_on_bad_file(on_bad_file)
    directory = os.fsdecode(os.fspath(directory))
    if not os.path.isdir(directory):
        raise MissingPathError(f"{directory} is not a directory of <id>.json files")
    raw, odd_names = _docsio.scan_dir(directory)
    ids = np.sort(np.frombuffer(raw, np.uint64))  # canonical names: one per id
    errors: list[FileError] = []
    others: dict[int, list[str]] = {}  # id -> its non-canonical names
    for name in odd_names:
        got = id_from_name(name)
        if isinstance(got, str):
            errors.append(FileError(os.path.join(directory, name), got))
        else:
            others.setdefault(got, []).append(name)
    odd: dict[int, str] = {}
    if others:
        extra = np.fromiter(others, np.uint64, len(others))
        canonical = _contains(ids, extra)
        ids = np.sort(np.concatenate([ids, extra[~canonical]]))
        for doc_id, has_canonical in zip(others, canonical.tolist()):
            names = sorted(others[doc_id] + ([f"{doc_id}.json"] if has_canonical else []))
            kept = os.path.join(directory, names[0])
            errors.extend(
                FileError(os.path.join(directory, nm), f"duplicate id {doc_id} (also in {kept})") for nm in names[1:]
            )
            if names[0] != f"{doc_id}.json":
                odd[int(np.searchsorted(ids, np.uint64(doc_id)))] = names[0]
    errors.sort(key=lambda f: f.path)
    if errors and on_bad_file == "fail":
        raise bad_file_error(errors)
    return DirListing(directory, ids, odd), errors


def _contains(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per element of ids: is it in sorted_ids."""
    at = np.minimum(np.searchsorted(sorted_ids, ids), max(len(sorted_ids) - 1, 0))
    return sorted_ids[at] == ids if len(sorted_ids) else np.zeros(len(ids), bool)


def _utf8_reason(data: bytes) -> str | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not valid UTF-8 (byte {e.start}: {data[e.start : e.start + 1]!r})"
    return None


def parse_doc_json(data: bytes) -> tuple[int, bytes] | str:
    """(created_at, text UTF-8 bytes) of one document file's content, or the reason it is bad."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        bad = _utf8_reason(data)
        if bad is not None:
            return f"text is {bad}"
        if "surrogate" in str(e):  # a \\uD800-style escape that is no character
            return f"text is not valid UTF-8 ({e})"
        return f"invalid JSON: {e}"
    if type(obj) is not dict:
        return f'invalid document: expected a JSON object {{"text": ..., "created_at": ...}}, got {type(obj).__name__}'
    if len(obj) != 2 or "text" not in obj or "created_at" not in obj:
        missing = [k for k in _DOC_KEYS if k not in obj]
        extra = sorted(k for k in obj if k not in _DOC_KEYS)
        parts = []
        if missing:
            parts.append("missing field(s) " + ", ".join(repr(k) for k in missing))
        if extra:
            parts.append("unexpected field(s) " + ", ".join(repr(k) for k in extra))
        return "invalid document: " + "; ".join(parts) + " (a document has exactly 'text' and 'created_at')"
    text, created = obj["text"], obj["created_at"]
    if type(created) is float:  # orjson reads an integer beyond 64 bits as a float: the file says which
        created = _exact_number(data, created)
    if type(created) is float and created.is_integer():
        return (
            f"invalid document: 'created_at' must be an integer (epoch seconds), got {created!r} (written "
            "with a decimal point or an exponent); write it without one"
        )
    if type(created) is not int:
        return f"invalid document: 'created_at' must be an integer (epoch seconds), got {_json_type(created)}"
    if not -(2**63) <= created < 2**63:
        return f"invalid document: 'created_at' {created} is out of the int64 range"
    if type(text) is not str:
        return f"invalid document: 'text' must be a string, got {_json_type(text)}"
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"text is not valid UTF-8 (unpaired surrogate \\u{ord(text[e.start]):04x} at character {e.start})"
    return created, raw


def _exact_number(data: bytes, parsed: float):
    """The 'created_at' of a document as the standard library reads it (integers exactly,
    however large), ``parsed`` if that fails."""
    try:
        return json.loads(data)["created_at"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return parsed


def _json_type(v) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number with a fraction",
        str: "a string",
        list: "an array",
        dict: "an object",
        type(None): "null",
    }.get(type(v), type(v).__name__)


# --- reading and parsing a batch of files --------------------------------------------------


@dataclass(frozen=True)
class _Read:
    """A batch of files as read by ``_docsio.read_batch``: their bytes one after the
    other in ``buffer`` (a JSON array ``[f1,\\nf2,\\n...]``), per file its (start, end)
    in it, the errno of a failed open/read (0 if none) and whether its content is braced
    (first and last non-whitespace bytes ``{`` and ``}``)."""

    buffer: object
    spans: np.ndarray
    errnos: np.ndarray
    braced: np.ndarray

    @classmethod
    def of(cls, directory, ids: np.ndarray, names=None) -> _Read:
        buf, spans, errnos, braced = _docsio.read_batch(directory, np.ascontiguousarray(ids, np.uint64), names)
        return cls(
            buf,
            np.frombuffer(spans, np.int64).reshape(-1, 2),
            np.frombuffer(errnos, np.int32),
            np.frombuffer(braced, np.uint8),
        )

    def content(self, k: int) -> bytes:
        a, z = self.spans[k].tolist()
        return bytes(memoryview(self.buffer)[a:z])


class JsonDoc(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A document file as msgspec decodes it: exactly ``text`` and ``created_at``."""

    text: str
    created_at: int


@functools.cache
def _decoder():
    """The msgspec decoder of a JSON array of documents (built on first use)."""
    return msgspec.json.Decoder(list[JsonDoc])


#: How many chunks (CHUNK_FILES files) `parse_json_files` took on the fast path / file by file.
PARSE_COUNTS = {"fast": 0, "per_file": 0}


def parse_batch_fast(read: _Read, ids: np.ndarray) -> DocBatch | None:
    """The DocBatch of a batch read by `_Read.of`, decoded at once; None when any file may
    be bad (then `parse_json_files` parses file by file, which says why).

    The batch is accepted only if no file failed to read, every file is braced ('{' ...
    '}'), msgspec decodes the whole buffer as a list of `JsonDoc` (a Struct of exactly
    ``text: str`` and ``created_at: int``, unknown fields forbidden), the list has one
    element per file, the texts encode to UTF-8 and every created_at fits int64.

    Why that cannot accept a bad file (the per-file path's rules, one file at a time):
    files are joined by ``,\\n`` and a raw newline is illegal inside a JSON string, so
    the last '}' of every file is structural (a string holding it would have to close
    after it, but only whitespace, ',' and the newline follow). A decoded JsonDoc holds only a
    string and an integer, so its only structural '}' is its end: no element spans two
    files (its first structural '}' comes at the latest at its file's last '}'), and each
    file's last '}' ends an element. So every file ends at least one element, and count
    equality means exactly one per file: each file is whitespace, one object, whitespace,
    i.e. a valid JSON document on its own, which msgspec accepted as a JsonDoc. What msgspec
    accepts as a JsonDoc orjson accepts with the same values (checked by tests/docs/test_docs_json.py:
    duplicate keys keep the last value in both; msgspec rejects invalid UTF-8, lone
    surrogate escapes, floats such as 1.0, booleans, null; it also type-checks an earlier
    duplicate that orjson would overwrite, which only sends a good file to the slow path);
    integers beyond int64, which msgspec decodes, are refused here.
    """
    n = len(ids)
    if n == 0:
        return DocBatch.empty()
    if read.errnos.any() or not read.braced.all():
        return None
    try:
        docs = _decoder().decode(read.buffer)
    except ValueError:  # msgspec.DecodeError, UnicodeDecodeError
        return None
    if len(docs) != n:
        return None
    texts = [d.text for d in docs]
    joined = "".join(texts)
    try:
        raw = joined.encode()
        created = np.array([d.created_at for d in docs], np.int64)
    except (UnicodeEncodeError, OverflowError):
        return None
    if len(raw) == len(joined):  # all ASCII: one byte per character
        lengths = np.fromiter(map(len, texts), np.int64, n)
    else:
        lengths = np.fromiter(map(len, map(str.encode, texts)), np.int64, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return DocBatch(np.array(ids, np.uint64), created, offsets, np.frombuffer(raw, np.uint8))


def _unique(ids: np.ndarray) -> bool:
    return len(ids) < 2 or bool((ids[1:] > ids[:-1]).all()) or len(np.unique(ids)) == len(ids)


#: Files read and decoded at a time: about 1 MB of 1 KB documents, so that the read buffer
#: is still in the CPU cache when msgspec decodes it (and the C reader reuses it for the
#: next chunk). Batches of 10,000: 0.3-0.4 us less per file than one read of all of them.
CHUNK_FILES = 1024


class _Chunks:
    """The files of one parse_json_files call, read CHUNK_FILES at a time (on demand, the
    last chunk kept: the per-file path walks the files in order)."""

    def __init__(self, directory, ids: np.ndarray, names: list | None):
        self.directory, self.ids, self.names = directory, ids, names
        self._at, self._read = -1, None

    def chunk(self, c: int) -> _Read:
        if c != self._at:
            a, z = c * CHUNK_FILES, (c + 1) * CHUNK_FILES
            self._read = None  # let the C reader reuse its buffer
            self._read = _Read.of(self.directory, self.ids[a:z], None if self.names is None else self.names[a:z])
            self._at = c
        return self._read

    def reason_or_content(self, k: int) -> str | bytes:
        read = self.chunk(k // CHUNK_FILES)
        err = int(read.errnos[k % CHUNK_FILES])
        return f"cannot read: {os.strerror(err)}" if err else read.content(k % CHUNK_FILES)


def parse_json_files(paths: Iterable, on_bad_file: str = "fail") -> tuple[DocBatch, list[FileError]]:
    """Read and parse document files into a DocBatch (in the given order).

    ``paths``: a `DirListing` (as from `scan_json_dir`, or a slice of one), (id, path)
    pairs, or plain paths (the id comes from the file name). A later file with an id
    already seen in this call is a duplicate. ``on_bad_file="fail"`` raises BadFileError
    at the first bad file; ``"skip"`` leaves bad files out and returns them.

    The files are read by the C reader, CHUNK_FILES at a time; a chunk without a bad file
    is decoded at once (`parse_batch_fast`), any other file by file from the same bytes.
    """
    _check_on_bad_file(on_bad_file)
    if isinstance(paths, DirListing):
        ids = paths.ids
        chunks = _Chunks(paths.directory, ids, paths.names() if paths.odd else None)
        items = None  # made per chunk, only for a chunk parsed file by file
        clean = True
    else:
        items = []  # (id | bad-name reason, path, index into the read files | None)
        read_ids: list[int] = []
        read_paths: list[str] = []
        for item in paths:
            if isinstance(item, tuple):
                doc_id, path = int(item[0]), os.fspath(item[1])
            else:
                path = os.fspath(item)
                doc_id = id_from_name(os.path.basename(path))
                if isinstance(doc_id, str):
                    items.append((doc_id, path, None))
                    continue
            items.append((doc_id, path, len(read_ids)))
            read_ids.append(doc_id)
            read_paths.append(path)
        ids = np.array(read_ids, np.uint64)
        chunks = _Chunks(None, ids, read_paths)
        clean = len(items) == len(read_ids)  # no bad name: item k is file k
    if not (clean and _unique(ids)):  # bad names or duplicates: all file by file
        return _parse_each(
            items if items is not None else _listing_items(paths, 0, len(paths)), chunks, on_bad_file, [], {}
        )
    parts: list[DocBatch] = []
    errors: list[FileError] = []
    for c, a in enumerate(range(0, len(ids), CHUNK_FILES)):
        z = min(a + CHUNK_FILES, len(ids))
        batch = parse_batch_fast(chunks.chunk(c), ids[a:z])
        if batch is not None:
            PARSE_COUNTS["fast"] += 1
        else:  # the ids are unique: no duplicate can span chunks
            batch, _ = _parse_each(
                items[a:z] if items is not None else _listing_items(paths, a, z), chunks, on_bad_file, errors, {}
            )
        parts.append(batch)
    return DocBatch.concat(parts), errors


def _listing_items(listing: DirListing, a: int, z: int):
    prefix = os.path.join(listing.directory, "")
    for k, i in enumerate(listing.ids[a:z].tolist(), a):
        yield i, prefix + listing.name_at(k), k


def _parse_each(
    items: Iterable, chunks: _Chunks, on_bad_file: str, errors: list[FileError], seen: dict[int, str]
) -> tuple[DocBatch, list[FileError]]:
    """The per-file path: ``items`` (id | bad-name reason, path, index of the file read)."""
    PARSE_COUNTS["per_file"] += 1
    ids, cas, texts = [], [], []
    for doc_id, path, k in items:
        if isinstance(doc_id, str):
            reason: str | tuple = doc_id
        elif doc_id in seen:
            reason = f"duplicate id {doc_id} (also in {seen[doc_id]})"
        else:
            got = chunks.reason_or_content(k)
            reason = got if isinstance(got, str) else parse_doc_json(got)
        if isinstance(reason, str):
            errors.append(FileError(path, reason))
            if on_bad_file == "fail":
                raise bad_file_error(errors)
            continue
        seen[doc_id] = path
        ids.append(doc_id)
        cas.append(reason[0])
        texts.append(reason[1])
    return DocBatch.from_lists(ids, cas, texts), errors


def doc_json(created_at: int, text: bytes) -> bytes:
    """The JSON file content of one document."""
    return orjson.dumps({"text": text.decode("utf-8"), "created_at": int(created_at)})


def write_json_dir(batch: DocBatch, directory) -> int:
    """Write each document as ``<id>.json`` into directory (tests, benchmarks); bytes written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    total = 0
    for doc_id, created, text in batch.records():
        data = doc_json(created, text)
        with open(directory / f"{doc_id}.json", "wb") as f:
            f.write(data)
        total += len(data)
    return total
