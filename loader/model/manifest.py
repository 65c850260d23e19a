"""The manifest: the one place that says what a dataset holds.

Version 2 (this code writes): ``ROOT/manifest.json`` is a small pointer,
``{"version": 2, "catalog": "catalog", "dataset_id": ...}``, and the metadata lives in
the LMDB catalog ``ROOT/catalog/`` (catalog.py: why, and its tables). `load_manifest`
reads a snapshot of it (a read transaction: header and aggregates; the rows, runs and
files read on demand: catalog_rows.py); `Manifest.save` is the commit, one durable write
transaction of what changed (catalog_commit.py). A batch exists for readers only once a
commit lists it, so a crash at any point leaves the last committed state. Store keys of
batches at or above ``next_seq`` are uncommitted leftovers and are removed by the next
writer. A manifest.json of a higher version is refused (NewerFormatError), naming both.

Version 1 (older code): manifest.json holds everything. Such a dataset opens read-only
as it is (the tables in memory, as lists); its first save builds the catalog beside it,
renames it into place and then replaces manifest.json by the pointer (catalog_commit.py:
a kill at any step leaves a readable dataset: tests/model/test_catalog_upgrade.py).

Every write increments ``generation``. A writer that makes committed data unreachable for
new readers (compact, finalize, a documents compaction) lists it in ``garbage`` in the
same write (each entry stamped with that write's generation); maintain/garbage.py deletes
it once no reader pins an older generation (read/snapshots.py).

In memory every part is typed: batches are `BatchEntry` rows, runs `Run` objects
(runs.py), garbage entries `GarbageEntry` objects (garbage_entry.py); runs and entries
keep the order of their keys and any key a newer version wrote, so that a manifest read
and written again is the same JSON but for ``generation`` (tests/model/test_runs_typed.py).

Reading checks a version-1 file first (manifest_check.py): a manifest.json that is not
valid JSON or not a valid manifest raises ManifestError naming it and the problem, so no
command acts on it (a deleted ``batches`` must not read as "empty" and be written over);
a damaged catalog is DamagedDatasetError naming it (catalog.py).
"""

from __future__ import annotations

import io
import json
import os
import time
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import msgspec

from ..errors import (
    BulkloadError,
    DamagedDatasetError,
    DatasetMismatchError,
    DatasetNotFoundError,
    ManifestError,
    NewerFormatError,
    NotReadableError,
    StoreError,
)
from ..infra import faults
from ..infra.fsatomic import fsync_dir
from ..infra.paths import ARRAYS, MANIFEST
from ..infra.regular import MAX_METADATA_BYTES, open_regular_file, read_regular
from . import catalog as cg
from .catalog_rows import BatchRows, FileMap, RunList
from .garbage_entry import GarbageEntry
from .layouts import Layout
from .manifest_check import problem
from .runs import Run

VERSION = 2  # 1: everything in manifest.json; 2: manifest.json points at the catalog


class BatchEntry(msgspec.Struct, array_like=True):
    """One batch row. A msgspec Struct, not a dataclass: a load's coordinator receives one
    per batch from its workers (200,000 for 20M records at --batch-records 100) and builds
    one per row it reads; a Struct is created ~5 x and unpickled ~4 x faster."""

    seq: int
    shard: int
    first: int  # dataset record index of the batch's first record
    count: int
    checksum: int  # xxh3_64 of the stored value (keyed: of the batch's range scan, see record_kinds)
    nbytes: int  # stored value size (keyed: of all its values)
    # keyed records (layout docs) only: the batch's documents are one value each under
    # their ids lo..hi (inclusive) in `table` of its shard; `first`/`count` are then the
    # batch's place in the plan (files or generator records), `docs` the documents stored
    # (fewer than `count` when bad files were skipped), `text_bytes` their text
    lo: int | None = None
    hi: int | None = None
    docs: int | None = None
    table: str | None = None
    text_bytes: int | None = None

    @property
    def keyed(self) -> bool:
        return self.table is not None

    @property
    def records(self) -> int:
        """Records (documents) stored by this batch."""
        return self.count if self.docs is None else self.docs

    def row(self) -> list[int | str | None]:
        base: list[int | str | None] = [self.seq, self.shard, self.first, self.count, self.checksum, self.nbytes]
        if self.table is None:
            return base
        return [*base, self.lo, self.hi, self.docs, self.table, self.text_bytes]


@dataclass
class Manifest:
    layout: dict[str, Any]
    format: str
    compression: str
    scheme: str
    shards: int
    batch_records: int
    batches: BatchRows = field(default_factory=BatchRows)
    runs: RunList = field(default_factory=RunList)
    arrays: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: FileMap = field(default_factory=FileMap)  # ingested inputs: name -> {size, xxh3, run, ...}
    dataset_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: float = field(default_factory=time.time)
    version: int = VERSION
    generation: int = 0  # incremented by every save: what readers pin (snapshots.py)
    garbage: list[GarbageEntry] = field(default_factory=list)  # kept for older readers (maintain/garbage.py)
    extra: dict[str, Any] = field(default_factory=dict)  # keys written by newer code: kept as they are
    if TYPE_CHECKING:  # set on a manifest read from a catalog (`attach`, `_from_catalog`), never fields
        _catalog: cg.Catalog | None = field(default=None, init=False)
        _snap: cg.Snap | None = field(default=None, init=False)
        _pointed: bool = field(default=False, init=False)
        _as_of: int | None = field(default=None, init=False)

    def __setattr__(self, name: str, value: Any) -> None:
        # the tables are always BatchRows / RunList / FileMap: a list or dict assigned whole
        # (a fresh manifest, compaction, pruning) is rewritten by the next commit
        if name == "batches" and not isinstance(value, BatchRows):
            value = BatchRows(value)
        elif name == "runs" and not isinstance(value, RunList):
            value = RunList(value)
        elif name == "files" and not isinstance(value, FileMap):
            value = FileMap(value)
        object.__setattr__(self, name, value)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a task's manifest): the fields; the tables as lists (their own
        reduce), never the catalog handle or its read transaction."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    # --- derived -------------------------------------------------------------
    @property
    def layout_obj(self) -> Layout:
        return Layout.from_dict(self.layout)

    @property
    def next_seq(self) -> int:
        last = self.batches.last
        return last.seq + 1 if last is not None else 0

    @property
    def records(self) -> int:
        return self.batches.agg.records

    @property
    def next_record(self) -> int:
        last = self.batches.last
        return last.first + last.count if last is not None else 0

    @property
    def stored_bytes(self) -> int:
        return self.batches.agg.stored_bytes

    @property
    def text_bytes(self) -> int:
        return self.batches.agg.text_bytes

    def header(self) -> dict[str, Any]:
        """The small fields (everything but batches, runs and files): the catalog's header."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", *_TABLES)}
        d["garbage"] = [g.to_dict() for g in self.garbage]
        return {**self.extra, **d, "placement": self.placement()}

    @property
    def keep_snapshots(self) -> int:
        """How many generations before the current one keep their data readable through
        compaction and finalize (`as_of`); 0: only pinned readers keep old data."""
        return int(self.extra.get("keep_snapshots", 0))

    def placement(self) -> list[str]:
        """Where each shard lives: a path relative to the dataset root (`placed_here`). Today
        always ``shard-NNN`` under it; a shared-nothing mode (shards on the workers' own
        disks) will write other entries here, with no new format."""
        return [f"shard-{i:03d}" for i in range(self.shards)]

    # --- persistence -----------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The JSON object of a version-1 manifest.json: keys written by newer code first,
        then every field in order; batches as rows, runs and garbage entries as their objects."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        d["batches"] = [b.row() for b in self.batches]
        d["runs"] = [r.to_dict() for r in self.runs]
        d["files"] = dict(self.files.items())
        d["garbage"] = [g.to_dict() for g in self.garbage]
        return {**self.extra, **d}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Manifest:
        """The manifest of a decoded manifest.json that manifest_check accepts."""
        d = dict(d)
        d["batches"] = [BatchEntry(*row) for row in d.get("batches", [])]
        d["runs"] = [Run.from_dict(r) for r in d.get("runs", [])]
        d["garbage"] = [GarbageEntry.from_dict(g) for g in d.get("garbage", [])]
        known = set(cls.__dataclass_fields__)
        extra = {k: d.pop(k) for k in list(d) if k not in known}
        return cls(**d, extra=extra)

    @classmethod
    def from_header(cls, head: dict[str, Any]) -> Manifest:
        """The manifest of a catalog header (`header`), without its tables; keys this
        version does not know go to ``extra``."""
        d = dict(head)
        d["garbage"] = [GarbageEntry.from_dict(g) for g in d.get("garbage", [])]
        known = set(cls.__dataclass_fields__)
        extra = {k: d.pop(k) for k in list(d) if k not in known}
        return cls(**d, extra=extra)

    def save(self, root: str | os.PathLike[str]) -> None:
        """The commit: one durable write transaction of the catalog (catalog_commit.py)
        with what changed; the first save of a version-1 dataset (or a new one) builds the
        catalog and then points manifest.json at it."""
        faults.hit("save")
        self.generation += 1
        for entry in self.garbage:  # new entries: unreferenced from this write on
            if not entry.has("generation"):
                entry.generation = self.generation
        self.version = VERSION
        from .catalog_commit import commit  # the writer's module: readers do without it

        commit(self, str(root))
        faults.hit("saved")

    def mark_arrays_stale(self) -> None:
        """Records were appended: the 2-D arrays no longer cover every record."""
        for summary in self.arrays.values():
            summary["stale"] = True


_TABLES = ("batches", "runs", "files")


def write_json_atomic(path: Path, obj: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(str(path.parent))
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise StoreError(
            f"could not write {path}: {e.strerror or e}; "
            "the previous manifest is intact - free space or fix permissions and retry"
        ) from e


def open_manifest(root: str | os.PathLike[str], uri: str | None = None) -> BinaryIO:
    """The manifest file, open for reading (binary): a regular file of plausible size
    (infra/regular.py). DatasetNotFoundError when there is none and the directory holds no
    bulkload data; DamagedDatasetError when it holds some (shards, arrays) but no readable
    manifest - nothing may treat that directory as a new dataset and write over it."""
    path = str(Path(root) / MANIFEST)
    try:
        return open_regular_file(path, MAX_METADATA_BYTES, advice=recovery(root))
    except FileNotFoundError:
        found = bulkload_data(root)
        first = _first_commit(root) if cg.CATALOG in found and not os.path.islink(path) else None
        if first is not None:
            return first
        if found:
            what = f"{MANIFEST} is a dangling link to {os.readlink(path)}" if os.path.islink(path) else f"no {MANIFEST}"
            raise DamagedDatasetError(
                f"dataset {uri or root} is damaged: it holds bulkload data ({', '.join(found)}) "
                f"but {what}; nothing was read or written - {recovery(root)}"
            ) from None
        raise DatasetNotFoundError(
            f"no dataset at {uri or root} (no {MANIFEST}); load one first with `bulkload load`"
        ) from None
    except NotADirectoryError:
        raise DatasetNotFoundError(
            f"no dataset at {uri or root}: {root} is a file, not a dataset directory; check the path"
        ) from None
    except PermissionError as e:
        raise NotReadableError(
            f"dataset {uri or root}: {path} cannot be read ({e.strerror}); fix its permissions or run as its owner"
        ) from None
    except OSError as e:
        raise _invalid(Path(path), f"it cannot be read ({e.strerror or e})", "$") from None


class _Pointer(io.BytesIO):
    """The pointer a first commit did not write (see `_first_commit`), as a file."""

    def __init__(self, path: str, dataset_id: str):
        super().__init__(msgspec.json.encode({"version": VERSION, "catalog": cg.CATALOG, "dataset_id": dataset_id}))
        self.name = path


def _first_commit(root: str | os.PathLike[str]) -> _Pointer | None:
    """A catalog without manifest.json that holds generation 1: the first commit of a new
    dataset, killed after its catalog was renamed into place and before manifest.json
    was written - that is the dataset (its next writer writes the pointer). Any other
    catalog without manifest.json is damage (manifest.json deleted): None."""
    try:
        m = catalog_manifest(os.path.join(str(root), cg.CATALOG))
    except BulkloadError:
        return None
    return _Pointer(str(Path(root) / MANIFEST), m.dataset_id) if m.generation == 1 else None


def recovery(root: str | os.PathLike[str]) -> str:
    """What to do about a dataset whose metadata is missing or unreadable."""
    root = str(root).rstrip("/")
    return (
        f"restore {root}/{MANIFEST} from a backup; or move the directory aside (mv {root} {root}.damaged) "
        f"and load into a new path; or rebuild it with `bulkload load SOURCE DATASET --replace`, which "
        "discards the shards"
    )


def bulkload_data(root: str | os.PathLike[str]) -> list[str]:
    """The entries of ``root`` that hold bulkload data (``shard-*``, ``arrays``, ``catalog``), sorted:
    what a directory without a readable manifest must not lose."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(n for n in names if n in (ARRAYS, cg.CATALOG) or (n.startswith("shard-") and n[6:].isdigit()))


def load_manifest(root: str | os.PathLike[str], uri: str | None = None) -> Manifest:
    """The manifest of the dataset at ``root``, checked (manifest_check.py): a file that is
    not a valid manifest raises ManifestError naming it and the problem."""
    with open_manifest(root, uri) as f:
        return check_store(read_manifest(f), root, uri)


#: the store each scheme's shards are (mem:// is LMDB on /dev/shm)
_BACKEND = {"lmdb": "lmdb", "mem": "lmdb", "rocksdb": "rocksdb"}


def check_store(m: Manifest, root: str | os.PathLike[str], uri: str | None) -> Manifest:
    """``m``, unless ``uri`` names its dataset with the scheme of another store: opening
    RocksDB shards as LMDB ones (or the reverse) would call every shard damaged (an empty
    dataset may be redefined by a load: loading/options.check_compatible). A usage
    error (DatasetMismatchError, exit 2) naming the URI to use."""
    if uri is None or "://" not in uri:
        return m
    scheme, place = uri.split("://", 1)
    if not m.batches or _BACKEND.get(scheme) == _BACKEND.get(m.scheme, m.scheme):
        return m
    right = f"mem://{os.path.basename(str(root).rstrip('/'))}" if m.scheme == "mem" else f"{m.scheme}://{place}"
    raise DatasetMismatchError(
        f"dataset {uri} is a {m.scheme} dataset (its manifest says store {m.scheme!r}), not "
        f"{scheme}: nothing is wrong with it - open it as {right}"
    )


def read_manifest(f: BinaryIO) -> Manifest:
    """The manifest in the open (binary) file ``f``, checked (see `load_manifest`): a
    version-2 pointer opens the catalog beside it (a snapshot of its last commit); a
    version-1 manifest is read whole - unless the catalog an upgrade built from it is
    complete beside it (the upgrade was killed before it wrote the pointer): that one is
    the dataset (its generation is newer)."""
    path = Path(f.name)
    try:
        data = f.read()
    except OSError as e:
        raise _invalid(path, f"it cannot be read ({e.strerror or e})", "$") from None
    try:
        obj = msgspec.json.decode(data)  # twice as fast as json.loads, the same objects
    except msgspec.DecodeError:  # json's messages (and what only json reads: NaN, a BOM, UTF-16)
        obj = _loads(path, data)
    newer = obj.get("version") if isinstance(obj, dict) else None
    if isinstance(newer, int) and newer > VERSION:
        raise NewerFormatError(
            f"{path} is a version-{newer} manifest, written by a newer bulkload; this bulkload "
            f"reads versions 1 and {VERSION}: nothing was read or written - upgrade bulkload"
        )
    if isinstance(obj, dict) and "catalog" in obj:
        return _from_catalog(path, obj)
    found = problem(obj)
    if found is not None:
        raise _invalid(path, *found)
    m = Manifest.from_json(obj)
    upgraded = _upgraded(path.parent, m)
    return m if upgraded is None else upgraded


def _from_catalog(path: Path, pointer: dict[str, Any]) -> Manifest:
    name = pointer.get("catalog")
    if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
        raise _invalid(path, "its `catalog` is not a directory name", "$.catalog")
    m = catalog_manifest(str(path.parent / name))
    if pointer.get("dataset_id") != m.dataset_id:
        raise cg.damaged(
            str(path.parent / name), f"it holds dataset {m.dataset_id}, {path} names {pointer.get('dataset_id')}"
        )
    object.__setattr__(m, "_pointed", True)
    return m


def _upgraded(root: Path, m: Manifest) -> Manifest | None:
    """The complete catalog of an upgrade of ``m`` killed before its pointer, or None."""
    if not (root / cg.CATALOG).is_dir():
        return None
    try:
        upgraded = catalog_manifest(str(root / cg.CATALOG))
    except ManifestError:
        return None  # not a catalog we can read: the next write sets it aside
    if upgraded.dataset_id != m.dataset_id or upgraded.generation <= m.generation:
        return None
    return upgraded


def catalog_manifest(path: str) -> Manifest:
    """The manifest of the catalog at ``path``: header and aggregates, the tables on a
    snapshot (catalog_rows.py)."""
    cat = cg.open_catalog(path)
    try:
        snap = cat.snapshot()  # holds the catalog open from here on
    finally:
        cat.unref()
    head = snap.header()
    agg = snap.aggregates()
    try:
        m = Manifest.from_header(head)
        Layout.from_dict(m.layout)
    except (BulkloadError, TypeError, ValueError, KeyError, AttributeError) as e:
        raise cg.damaged(path, f"its header is not valid ({e})") from None
    placed_here(m, path)
    attach(m, cat, snap, agg)
    return m


def placed_here(m: Manifest, path: str) -> None:
    """Refuse a catalog whose shards live elsewhere than this code reads them (a newer
    bulkload's placement): NewerFormatError naming the shard and its place, nothing read."""
    given = m.extra.pop("placement", None)
    if given is None:
        return
    for i, (at, here) in enumerate(zip(given, m.placement())):
        if at != here:
            raise NewerFormatError(
                f"the catalog {path} places shard {i} at {at!r}, not in the dataset directory "
                f"({here}): a newer bulkload wrote it; nothing was read - read it with that "
                "bulkload"
            )


def attach(m: Manifest, cat: cg.Catalog, snap: cg.Snap, agg: cg.Aggregates) -> None:
    """Back ``m``'s tables by ``snap`` (a read transaction of ``cat``) and ``agg``."""
    m.batches = BatchRows(snap=snap, agg=agg)
    m.runs = RunList(snap=snap, agg=agg)
    m.files = FileMap(snap=snap)
    object.__setattr__(m, "_catalog", cat)
    object.__setattr__(m, "_snap", snap)


def _loads(path: Path, data: bytes) -> object:
    try:
        return json.loads(data)
    except UnicodeDecodeError as e:
        raise _invalid(path, "it is not UTF-8 text", f"byte {e.start}") from None
    except json.JSONDecodeError as e:
        raise _invalid(path, f"invalid JSON: {e.msg}", f"line {e.lineno} column {e.colno}") from None


def _invalid(path: Path, what: str, where: str) -> ManifestError:
    return DamagedDatasetError(
        f"{path} is not a valid bulkload manifest: {what} (at {where}); nothing was "
        "written - restore the file from a backup (or re-create the dataset with --replace)"
    )


def read_dataset_id(root: str | os.PathLike[str]) -> str | None:
    """The id of the dataset now at ``root`` (changes when --replace swaps in a new one)."""
    try:
        ident = json.loads(read_regular(str(Path(root) / MANIFEST))).get("dataset_id")  # not an object: AttributeError
        return ident if isinstance(ident, str) else None
    except FileNotFoundError:
        first = _first_commit(root)
        return None if first is None else str(json.loads(first.getvalue())["dataset_id"])
    except (OSError, ValueError, AttributeError):  # DamagedDatasetError is a ValueError
        return None


def read_pointer(root: str | os.PathLike[str]) -> str | None:
    """The dataset id of the version-2 pointer at ``root``, or None (none, or version 1)."""
    try:
        obj = msgspec.json.decode(read_regular(str(Path(root) / MANIFEST)))
    except (OSError, ValueError, msgspec.DecodeError):
        return None
    ident = obj.get("dataset_id") if isinstance(obj, dict) and "catalog" in obj else None
    return ident if isinstance(ident, str) else None


def exists(root: str | os.PathLike[str]) -> bool:
    """Is there a dataset at ``root`` - or something that must be read as one: a manifest
    in any form (a FIFO, a dangling link: `load_manifest` names what is wrong), or bulkload
    data without one (damaged: never a new dataset to write over)."""
    return os.path.lexists(Path(root) / MANIFEST) or bool(bulkload_data(root))
