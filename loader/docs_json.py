"""The JSON directory source of layout ``docs``: ``bulkload load DIR --layout docs``.

`scan_json_dir` lists the files ``<id>.json`` of a directory, sorted by id;
`parse_json_files` reads them (orjson) into a DocBatch. A document file holds exactly
``{"text": "...", "created_at": 1727290164}``. Every bad file becomes a `FileError`
(path and reason): with ``on_bad_file="fail"`` the first one raises `BadFileError`,
with ``"skip"`` they are returned for the run report.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .docs import DocBatch
from .errors import BadFileError, UsageError


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


def _fail(errors: list[FileError]) -> BadFileError:
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


def scan_json_dir(directory, on_bad_file: str = "fail") -> tuple[list[tuple[int, str]], list[FileError]]:
    """The document files of a directory: ([(id, path)] sorted by id, [FileError]).

    Every regular file whose name does not start with '.' must be ``<id>.json``;
    subdirectories are not read. Two names for one id (``7.json``, ``07.json``) are a
    duplicate: the first name in (id, name) order is kept, the others are errors.
    """
    _check_on_bad_file(on_bad_file)
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        from .errors import MissingPathError

        raise MissingPathError(f"{directory} is not a directory of <id>.json files")
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
    out: list[tuple[int, str]] = []
    prev_id, prev_path = None, None
    for doc_id, _name, path in entries:
        if doc_id == prev_id:
            errors.append(FileError(path, f"duplicate id {doc_id} (also in {prev_path})"))
            continue
        out.append((doc_id, path))
        prev_id, prev_path = doc_id, path
    errors.sort(key=lambda f: f.path)
    if errors and on_bad_file == "fail":
        raise _fail(errors)
    return out, errors


def _read_file(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        first = os.read(fd, 1 << 20)
        if len(first) < 1 << 20:  # a regular file reads short only at its end: one read(2)
            return first
        chunks = [first]
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _utf8_reason(data: bytes) -> str | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not valid UTF-8 (byte {e.start}: {data[e.start:e.start + 1]!r})"
    return None


def parse_doc_json(data: bytes) -> tuple[int, bytes] | str:
    """(created_at, text UTF-8 bytes) of one document file's content, or the reason it is bad."""
    import orjson

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
        return f"invalid document: expected a JSON object {{\"text\": ..., \"created_at\": ...}}, got {type(obj).__name__}"
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


def _json_type(v) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number with a fraction", str: "a string",
            list: "an array", dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


def parse_json_files(paths: Iterable, on_bad_file: str = "fail") -> tuple[DocBatch, list[FileError]]:
    """Read and parse document files into a DocBatch (in the given order).

    ``paths``: (id, path) pairs, as from `scan_json_dir`, or plain paths (the id comes
    from the file name). A later file with an id already seen in this call is a
    duplicate. ``on_bad_file="fail"`` raises BadFileError at the first bad file;
    ``"skip"`` leaves bad files out and returns them.
    """
    _check_on_bad_file(on_bad_file)
    ids, cas, texts = [], [], []
    errors: list[FileError] = []
    seen: dict[int, str] = {}
    for item in paths:
        if isinstance(item, tuple):
            doc_id, path = int(item[0]), os.fspath(item[1])
        else:
            path = os.fspath(item)
            got = id_from_name(os.path.basename(path))
            if isinstance(got, str):
                errors.append(FileError(path, got))
                if on_bad_file == "fail":
                    raise _fail(errors)
                continue
            doc_id = got
        if doc_id in seen:
            reason: str | tuple = f"duplicate id {doc_id} (also in {seen[doc_id]})"
        else:
            try:
                data = _read_file(path)
            except OSError as e:
                reason = f"cannot read: {e.strerror or e}"
            else:
                reason = parse_doc_json(data)
        if isinstance(reason, str):
            errors.append(FileError(path, reason))
            if on_bad_file == "fail":
                raise _fail(errors)
            continue
        seen[doc_id] = path
        ids.append(doc_id)
        cas.append(reason[0])
        texts.append(reason[1])
    return DocBatch._from_lists(ids, cas, texts), errors


def doc_json(created_at: int, text: bytes) -> bytes:
    """The JSON file content of one document."""
    import orjson

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
