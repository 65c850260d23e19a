"""Dataset URIs and the picklable description of a dataset's storage (`StoreSpec`).

``lmdb://PATH``, ``rocksdb://PATH`` or ``mem://NAME`` (LMDB on /dev/shm:
``MEM_ROOT/NAME``), each with ``?shards=K&opt=v``. Only a `StoreSpec` (small, frozen,
picklable) ever crosses a process boundary; each process opens its own handles from it.

URIs are strict: each backend declares the options it takes (options.py, found through
the registry without importing the backend); an unknown or repeated option is a
UsageError listing the known ones, a value the backend cannot use is a UsageError naming
it, and a mem:// NAME is one plain path component (`MEM_NAME`). Pure parsing: nothing
here touches the filesystem.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UnknownSchemeError, UsageError
from ..infra.uri import query_options
from ..model.options import MAX_SHARDS
from .base import ShardStore
from .registry import SCHEMES, backend_for, options_for

MEM_ROOT = "/dev/shm/bulkload"

#: a mem:// name: one plain path component under MEM_ROOT (a leading dot is refused: it
#: would hide the dataset and could collide with a --replace build, ``.NAME.replacing``)
MEM_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class StoreSpec:
    """Picklable description of a dataset's storage: what workers receive."""

    scheme: str
    root: str
    shards: int | None = None  # None: not given in the URI
    options: tuple[tuple[str, str], ...] = field(default=())

    @property
    def uri(self) -> str:
        if self.scheme == "mem":
            return f"mem://{Path(self.root).name}"
        return f"{self.scheme}://{self.root}"

    def shard_path(self, i: int) -> str:
        return os.path.join(self.root, f"shard-{i:03d}")

    def with_shards(self, k: int) -> StoreSpec:
        return StoreSpec(self.scheme, self.root, k, self.options)

    @property
    def backend(self) -> type[ShardStore]:
        return backend_for(self.scheme)

    def open_shard(self, i: int, *, write: bool) -> ShardStore:
        return self.backend.open(self.shard_path(i), write=write, options=dict(self.options))


def is_mem_path(path: str) -> bool:
    """Whether ``path`` lies under MEM_ROOT (a mem:// shard), symbolic links resolved."""
    real, mem = os.path.realpath(path), os.path.realpath(MEM_ROOT)
    return real == mem or real.startswith(mem + os.sep)


def parse_dataset_uri(uri: str) -> StoreSpec:
    """``lmdb://PATH``, ``rocksdb://PATH`` or ``mem://NAME``, each with ``?shards=K&opt=v``.

    Relative paths are relative to the working directory. An option the backend does not
    take (options.py), an option given twice, or a value it cannot use is a UsageError, as
    is a mem:// NAME that is not one plain name (`MEM_NAME`).
    """
    scheme, path, query = _split_uri(uri)
    opts = query_options(query, f"dataset {uri!r}")
    declared = options_for(scheme)
    unknown = sorted(set(opts) - {"shards"} - set(declared.DECLARED))
    if unknown:
        known = "; ".join(f"{k} ({v})" for k, v in {"shards": f"1..{MAX_SHARDS}", **declared.DECLARED}.items())
        raise UsageError(f"dataset {uri!r}: unknown option(s) {', '.join(unknown)}; {scheme}:// takes {known}")
    shards = _shards(uri, opts.pop("shards", None))
    try:
        declared.parse(opts)
    except UsageError as e:
        raise UsageError(f"dataset {uri!r}: {e}") from None
    return StoreSpec(scheme, _root(uri, scheme, path), shards, tuple(sorted(opts.items())))


def _split_uri(uri: str) -> tuple[str, str, str]:
    """(scheme, path, query) of a dataset URI whose scheme is known and path usable."""
    if "://" not in uri:
        raise UnknownSchemeError(f"dataset {uri!r} has no scheme; use lmdb://PATH, rocksdb://PATH or mem://NAME")
    scheme, rest = uri.split("://", 1)
    if scheme not in SCHEMES:
        raise UnknownSchemeError(f"unknown dataset scheme {scheme!r} in {uri!r}; use lmdb://, rocksdb:// or mem://")
    path, _, query = rest.partition("?")
    if not path:
        raise UsageError(f"dataset {uri!r} has no path after {scheme}://")
    if "\0" in path or not path.isprintable() or not _utf8(path):
        raise UsageError(f"dataset {uri!r}: the path must be printable UTF-8 (the stores take UTF-8 paths)")
    return scheme, path, query


def _shards(uri: str, given: str | None) -> int | None:
    if given is None:
        return None
    try:
        shards = int(given)
    except ValueError:
        raise UsageError(f"dataset {uri!r}: shards must be an integer") from None
    if not 1 <= shards <= MAX_SHARDS:
        raise UsageError(f"dataset {uri!r}: shards must be between 1 and {MAX_SHARDS}")
    return shards


def _root(uri: str, scheme: str, path: str) -> str:
    """The dataset directory: MEM_ROOT/NAME for mem://, else the absolute path."""
    if scheme != "mem":
        return os.path.abspath(os.path.expanduser(path))
    if not MEM_NAME.fullmatch(path):
        raise UsageError(
            f"dataset {uri!r}: mem://NAME takes one plain name of 1 to 128 letters, digits, '.', '_' "
            f"or '-', not starting with '.' (it becomes {MEM_ROOT}/NAME), e.g. mem://scratch-1"
        )
    return os.path.join(MEM_ROOT, path)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # surrogate-escaped bytes of a non-UTF-8 argument
        return False
    return True
