"""The options each store backend takes, read into typed values.

A dataset URI's ``?opt=v`` (and a Python caller's ``options`` dict) hold strings or plain
Python values; each backend declares the names it takes (``DECLARED``: name -> what it
takes, listed in the UsageError for an unknown one) and reads them into a frozen
dataclass (``parse``), so that a value it cannot use is a UsageError naming the option
before anything is opened. Nothing here imports lmdb or rocksdict: a URI is checked
without loading its backend.

Pure parsing: nothing here touches the filesystem.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, SupportsIndex, SupportsInt

from ..errors import UsageError

DEFAULT_MAP_SIZE = 64 << 20
DEFAULT_MAX_DBS = 1024
SIZE_SUFFIXES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bool(name: str, value: object) -> bool:
    """A boolean option: a bool, or 1/0, true/false, yes/no, on/off ("" is false)."""
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off", ""):
        return False
    raise UsageError(f"store option {name}={value!r} is not a boolean; use 1/0, true/false")


def parse_size(name: str, value: object) -> int:
    """A positive size in bytes: an int, or a number with an optional k/m/g/t suffix
    (``64m``, ``1.5g``, ``2GiB``)."""
    if isinstance(value, int):
        n = value
    else:
        s = str(value).strip().lower().removesuffix("b").removesuffix("i")
        mult = SIZE_SUFFIXES.get(s[-1:], 1)
        if mult != 1:
            s = s[:-1]
        try:
            n = int(float(s) * mult)
        except (ValueError, OverflowError):
            raise UsageError(f"store option {name}={value!r} is not a size (e.g. 64m, 2g)") from None
    if n <= 0:
        raise UsageError(f"store option {name}={value!r} must be positive")
    return n


def parse_count(name: str, value: object) -> int:
    """A whole number of at least 1."""
    try:
        n = int(str(value).strip())
    except ValueError:
        raise UsageError(f"store option {name}={value!r} is not a whole number") from None
    if n < 1:
        raise UsageError(f"store option {name}={value!r} must be at least 1")
    return n


def parse_int32(name: str, value: object, minimum: int = -(1 << 31)) -> int:
    """A RocksDB integer option: minimum .. 2**31-1."""
    try:
        if not isinstance(value, (str, bytes, SupportsInt, SupportsIndex)):
            raise TypeError(value)
        n = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"rocksdb option {name}={value!r} is not an integer") from None
    if not minimum <= n < 1 << 31:
        raise UsageError(f"rocksdb option {name}={n} is out of range ({minimum} .. {(1 << 31) - 1})")
    return n


@dataclass(frozen=True)
class LmdbOptions:
    """``lmdb://`` and ``mem://`` options (see lmdb_store.py for what each one does)."""

    map_size: int = DEFAULT_MAP_SIZE  # initial map (the writer's size hint); a larger data.mdb wins
    writemap: bool = False  # MDB_WRITEMAP + MDB_MAPASYNC instead of pwrite
    readahead: bool = True  # False: OS readahead off (random reads)
    max_dbs: int = DEFAULT_MAX_DBS  # most tables per shard

    DECLARED: ClassVar[dict[str, str]] = {
        "map_size": "initial map size, e.g. 64m",
        "writemap": "1 maps the file writable, 0 (default) writes with pwrite",
        "readahead": "0 turns OS readahead off",
        "max_dbs": f"most tables per shard, default {DEFAULT_MAX_DBS}",
    }

    @classmethod
    def parse(cls, options: Mapping[str, object]) -> LmdbOptions:
        size = options.get("map_size")
        return cls(
            map_size=DEFAULT_MAP_SIZE if size is None else parse_size("map_size", size),
            writemap=parse_bool("writemap", options.get("writemap", False)),
            readahead=parse_bool("readahead", options.get("readahead", True)),
            max_dbs=parse_count("max_dbs", options.get("max_dbs", DEFAULT_MAX_DBS)),
        )


ROCKSDB_COMPRESSIONS = ("none", "lz4", "zstd", "zstd-dict")


@dataclass(frozen=True)
class RocksdbOptions:
    """``rocksdb://`` options (see rocksdb_store.py for what each one does)."""

    compression: str = "none"  # one of ROCKSDB_COMPRESSIONS
    zstd_level: int = 3  # with compression=zstd-dict
    block_size: int | None = None  # bytes per table block; None: RocksDB's default (4 KiB)

    DECLARED: ClassVar[dict[str, str]] = {
        "compression": "none (default), lz4, zstd or zstd-dict",
        "zstd_level": "zstd level with compression=zstd-dict, default 3",
        "block_size": "bytes per table block, default 4096",
    }

    @classmethod
    def parse(cls, options: Mapping[str, object]) -> RocksdbOptions:
        compression = str(options.get("compression", "none")).lower()
        if compression not in ROCKSDB_COMPRESSIONS:
            raise UsageError(f"rocksdb option compression={compression!r} is unknown; use none, lz4, zstd or zstd-dict")
        zstd_level = parse_int32("zstd_level", options.get("zstd_level", 3))
        block_size = parse_int32("block_size", options["block_size"], minimum=1) if "block_size" in options else None
        return cls(compression, zstd_level, block_size)
