"""Sources of records: generators, files and streams (stdin, FIFOs).

A source spec is small and picklable; workers open it themselves and produce the
records of the batches they own straight into the serializer's buffer (``fill``), so
record bytes never travel through pipes. Only a stream, which cannot be split, is read
by the coordinator into shared memory (streams.py).

- ``gen://LAYOUT?n=N&start=S``: records S..S+N-1 of the layout's generator.
- ``PATH``: a file of raw records (its size must be a whole number of records). A
  character or block device, a socket, or a file on procfs/sysfs is refused
  (`refuse_pseudo_file`): their sizes say nothing about what reading them yields.
- ``-``, a FIFO, /dev/stdin, /dev/fd/N, /proc/self/fd/N: a stream (``StreamSource``), read
  once by the coordinator into shared memory (streams.py); not replayable.

Documents (layout ``docs``, variable-length keyed records; see loader/docs.py, docs_gen.py, docs_json.py):

- ``gen://docs?n=N&seed=S&start=A``: documents A..A+N-1 of the deterministic document
  stream S (id = the record index), generated in the workers by record range.
- ``DIR`` (with ``--layout docs``): a directory of ``<id>.json`` files. The coordinator
  lists it (sorted by id) and writes the listing as the run's *plan* file in the dataset
  directory; workers read and parse their batches' files.

Keyed sources have ``read_docs(offset, count) -> (DocBatch, [FileError])`` instead of ``fill``.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import (
    MissingPathError,
    PartialRecordError,
    SourceTypeError,
    SourceVanishedError,
    UnreadableInputError,
    UsageError,
)
from ..infra.uri import query_options
from ..model.layouts import Layout, get_layout

MAX_RECORDS = 2**63 - 1


@dataclass(frozen=True)
class GenSource:
    layout: str
    n: int
    start: int = 0
    impl: str = "c"

    @property
    def uri(self) -> str:
        return f"gen://{self.layout}?n={self.n}&start={self.start}"

    def count(self, layout: Layout) -> int:
        return self.n

    def fingerprint(self, layout: Layout) -> str:
        """What identifies the records this source yields (for resume / already loaded)."""
        return self.uri

    def fill(self, records: np.ndarray, offset: int) -> None:
        """Fill records with source records offset.. (offset relative to the source)."""
        from .generators import fill

        fill(records, self.start + offset, impl=self.impl, layout=self.layout)


@dataclass(frozen=True)
class GenDocsSource:
    """``gen://docs?n=N&seed=S&start=A``: documents A..A+N-1 (ids A..A+N-1)."""

    n: int
    start: int = 0
    seed: int = 0
    layout: str = "docs"

    @property
    def uri(self) -> str:
        return f"gen://docs?n={self.n}&start={self.start}&seed={self.seed}"

    def count(self, layout=None) -> int:
        return self.n

    def fingerprint(self, layout=None) -> str:
        return self.uri

    def id_span(self) -> tuple[int, int] | None:
        """(lowest, highest) id this source yields, or None when empty."""
        return (self.start, self.start + self.n - 1) if self.n else None

    def ids(self) -> np.ndarray:
        return np.arange(self.start, self.start + self.n, dtype=np.uint64)

    def id_at(self, offset: int) -> int:
        return self.start + offset

    def read_docs(self, offset: int, count: int):
        from ..docs.gen import generate_docs

        return generate_docs(self.seed, self.start + offset, count), []


@dataclass(frozen=True)
class JsonDirSource:
    """A directory of ``<id>.json`` documents (``bulkload load DIR --layout docs``).

    The coordinator lists the directory once (`listing`); the plan (ids in order, and the
    names of the few files not named ``<id>.json``) is saved in ``plan_path`` (set by the
    coordinator, inside the dataset) so that a worker reads only its batches' entries and
    a resumed run reuses the plan.
    """

    path: str
    on_bad_file: str = "fail"
    plan_path: str = ""

    @property
    def uri(self) -> str:
        return self.path

    def listing(self):
        """(DirListing: (id, path) sorted by id, [FileError] for badly named or duplicate files)."""
        from ..docs.json_dir import scan_json_dir

        return scan_json_dir(self.path, self.on_bad_file)

    def id_at(self, offset: int) -> int:
        return int(_load_plan(self.plan_path)[0][offset])

    def read_docs(self, offset: int, count: int):
        """The documents of plan entries offset..offset+count: the ids go straight to the C
        reader (`DirListing` slice), no path string is made per file."""
        from ..docs.json_dir import DirListing, parse_json_files

        ids, odd_pos, odd_names = _load_plan(self.plan_path)
        a, z = np.searchsorted(odd_pos, np.array([offset, offset + count], np.uint64)).tolist()
        odd = {int(p) - offset: nm for p, nm in zip(odd_pos[a:z].tolist(), odd_names[a:z])}
        return parse_json_files(DirListing(self.path, ids[offset:offset + count], odd), self.on_bad_file)


def _plan_parts(entries) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Of a directory listing (a DirListing or [(id, path)]): ids (uint64, in order), and
    the positions (uint64) and names of the files not named ``<id>.json``."""
    from ..docs.json_dir import DirListing

    if isinstance(entries, DirListing):
        pos = sorted(entries.odd)
        return (np.asarray(entries.ids, np.uint64), np.array(pos, np.uint64),
                [entries.odd[p] for p in pos])
    ids = np.fromiter((i for i, _ in entries), np.uint64, len(entries))
    pos, names = [], []
    for k, (i, p) in enumerate(entries):
        name = os.path.basename(p)
        if name != f"{i}.json":
            pos.append(k)
            names.append(name)
    return ids, np.array(pos, np.uint64), names


def listing_fingerprint(entries) -> str:
    """Of a directory listing [(id, path)]: the count and an xxh3 of the names in id order.

    The names are ``<id>.json`` but for a few (e.g. ``007.json``), so what is hashed is
    the ids (8 bytes each, little-endian), then for each other name its position (8
    bytes) and the name, NUL-terminated: one pass over a buffer, no loop over the files.
    """
    import xxhash

    ids, pos, names = _plan_parts(entries)
    h = xxhash.xxh3_64()
    h.update(ids.astype("<u8").tobytes())
    for p, name in zip(pos.tolist(), names):
        h.update(p.to_bytes(8, "little") + os.fsencode(name) + b"\0")
    return f"files={len(ids)};names={h.hexdigest()}"


def save_plan(path: str, entries) -> None:
    """Write a directory plan atomically: n, the n ids (u64 little-endian, in id order),
    m, the positions (u64) of the m files not named ``<id>.json``, their names
    (os.fsencode'd, each NUL-terminated)."""
    from ..infra.fsatomic import fsync_dir

    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    ids, pos, names = _plan_parts(entries)
    with open(tmp, "wb") as f:
        f.write(len(ids).to_bytes(8, "little"))
        f.write(ids.astype("<u8").tobytes())
        f.write(len(pos).to_bytes(8, "little"))
        f.write(pos.astype("<u8").tobytes())
        f.write(b"".join(os.fsencode(nm) + b"\0" for nm in names))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


_PLANS: dict[str, tuple] = {}


def _load_plan(path: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(ids, positions of the files not named <id>.json, their names) of a saved plan."""
    got = _PLANS.get(path)
    if got is None:
        with open(path, "rb") as f:
            data = f.read()
        n = int.from_bytes(data[:8], "little")
        ids = np.frombuffer(data, "<u8", n, 8).astype(np.uint64, copy=False)
        at = 8 + 8 * n
        m = int.from_bytes(data[at:at + 8], "little")
        pos = np.frombuffer(data, "<u8", m, at + 8).astype(np.uint64, copy=False)
        names = [os.fsdecode(b) for b in data[at + 8 + 8 * m:].split(b"\0")[:m]]
        got = _PLANS[path] = (ids, pos, names)
    return got


@dataclass(frozen=True)
class FileSource:
    path: str

    @property
    def uri(self) -> str:
        return self.path

    def count(self, layout: Layout) -> int:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            raise MissingPathError(f"source file {self.path} does not exist") from None
        except PermissionError:
            raise MissingPathError(f"source file {self.path} is not readable (permission denied)") from None
        rs = layout.record_size
        if size % rs:
            n = size // rs
            raise PartialRecordError(self.path, n * rs, rs, size - n * rs)
        return size // rs

    def fingerprint(self, layout: Layout, records: int | None = None) -> str:
        """Of the file's first ``records`` records (default: all): their size in bytes plus
        an xxh3 of 16 sampled 64 KiB blocks of them (head, tail and evenly between).

        Cheap for any file size. Bytes after the prefix do not count, so a file that was
        only appended to keeps the fingerprint of what was loaded of it (file_runs.py); a
        file truncated or rewritten has another one - when the rewrite touches a sampled
        block (rewriting only bytes between the samples goes unnoticed). The prefix of a
        whole file is the file: fingerprints of earlier versions stay valid. (Directory
        ingestion hashes whole files instead.)
        """
        import xxhash

        if records is None:
            records = self.count(layout)
        size = records * layout.record_size
        h = xxhash.xxh3_64()
        block = 64 << 10
        with open_input(self.path) as f:
            offs = sorted({min(max(0, size - block), i * max(0, size - block) // 15) for i in range(16)})
            for off in offs:
                h.update(os.pread(f.fileno(), min(block, size - off), off))
        return f"size={size};sample={h.hexdigest()}"

    def fill(self, records: np.ndarray, offset: int) -> None:
        rs = records.dtype.itemsize
        view = memoryview(records).cast("B")
        with open_input(self.path) as f:
            pos, want = offset * rs, view.nbytes
            got = 0
            while got < want:
                try:
                    k = os.preadv(f.fileno(), [view[got:]], pos + got)
                except OSError as e:
                    raise UnreadableInputError(f"{self.path}: read failed at byte offset {pos + got}: "
                                               f"{e.strerror or e}") from None
                if k == 0:
                    raise SourceVanishedError(
                        f"{self.path}: the file shrank while being read (ended at byte offset "
                        f"{pos + got}, {pos + want} expected); nothing from it was committed")
                got += k


def open_input(path: str):
    """Open a source file for reading, with one-line errors naming it."""
    try:
        return open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise SourceVanishedError(f"{path}: the file vanished while being read; "
                                  "nothing from it was committed") from None
    except IsADirectoryError:
        raise UnreadableInputError(f"{path}: is a directory, not a file of records") from None
    except PermissionError:
        raise UnreadableInputError(f"{path}: not readable (permission denied); "
                                   "fix its permissions and re-run") from None
    except OSError as e:
        raise UnreadableInputError(f"{path}: cannot be opened: {e.strerror or e}") from None


def hash_file(path: str, chunk: int = 4 << 20) -> tuple[str, int]:
    """(xxh3-128 hex digest of the whole content, bytes read)."""
    import xxhash

    h = xxhash.xxh3_128()
    n = 0
    with open_input(path) as f:
        buf = bytearray(chunk)
        mv = memoryview(buf)
        while True:
            try:
                k = f.readinto(mv)
            except OSError as e:
                raise UnreadableInputError(f"{path}: read failed at byte offset {n}: {e.strerror or e}") from None
            if not k:
                break
            h.update(mv[:k])
            n += k
    return h.hexdigest(), n


#: paths that name one of the coordinator's open file descriptors (group 1/2: its number)
STREAM_PATH = re.compile(r"/dev/stdin|/dev/fd/(\d+)|/proc/self/fd/(\d+)")


@dataclass(frozen=True)
class StreamSource:
    """A stream, read once by the coordinator (streams.py): ``-`` (stdin), a FIFO, or
    /dev/stdin, /dev/fd/N, /proc/self/fd/N (whatever the descriptor is: pipe, socket,
    file). Its URI is the path. It cannot be recognised or replayed: every load of it is
    a new run, never "already loaded", never resumed."""

    path: str = "-"

    @property
    def uri(self) -> str:
        return self.path

    @property
    def name(self) -> str:
        """How errors name it."""
        return "<stdin>" if self.path == "-" else self.path

    def count(self, layout: Layout) -> None:
        return None

    def fingerprint(self, layout: Layout) -> None:
        return None

    def open(self, stdin=None) -> tuple:
        """(a binary stream with readinto, whether the caller closes it)."""
        if self.path == "-" and stdin is not None:
            return stdin, False
        fd = stream_fd(self.path)
        if fd is not None:  # this process's descriptor, whatever it is (open() fails on a socket)
            try:
                return os.fdopen(os.dup(fd), "rb", buffering=0), True
            except OSError as e:
                raise UnreadableInputError(f"{self.name}: cannot be read: {e.strerror or e}") from None
        return open_input(self.path), True  # a FIFO: waits for a writer, as `cat FIFO` does


def stream_fd(path: str) -> int | None:
    """The file descriptor ``-`` or a /dev/stdin-like path names, else None."""
    if path == "-":
        return 0
    m = STREAM_PATH.fullmatch(path)
    return None if m is None else int(m.group(1) or m.group(2) or 0)


Source = GenSource | FileSource | StreamSource | GenDocsSource | JsonDirSource


def parse_source(ref: str, layout: Layout | None = None, on_bad_file: str = "fail") -> Source:
    """Parse a SOURCE argument. ``layout`` is the --layout given, if any."""
    if stream_fd(ref) is not None:
        return _stream_source(ref, layout)
    if ref.startswith("gen://"):
        rest = ref[len("gen://"):]
        name, _, query = rest.partition("?")
        if not name:
            raise UsageError(f"source {ref!r} names no layout; use gen://scidb96?n=N")
        get_layout(name)  # unknown layout -> clear error
        if layout is not None and layout.name != name:
            raise UsageError(f"source {ref!r} generates layout {name!r} but --layout is {layout.name!r}")
        q = query_options(query, f"source {ref!r}", "parameter")
        docs = name == "docs"
        takes, example = (("n, seed and start", "gen://docs?n=1000000&seed=1") if docs
                          else ("n, start and impl", f"gen://{name}?n=1000000"))
        unknown = set(q) - {"n", "start", "seed" if docs else "impl"}
        if unknown:
            raise UsageError(f"source {ref!r}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                             f"gen://{'docs' if docs else ''} takes {takes}")
        if "n" not in q:
            raise UsageError(f"source {ref!r} needs n=COUNT, e.g. {example}")
        n = parse_count(q["n"], "n")
        start = parse_count(q.get("start", "0"), "start")
        if start + n > 2**64:
            raise UsageError(f"source {ref!r}: start + n exceeds 2**64")
        if docs:
            return GenDocsSource(n, start, parse_count(q.get("seed", "0"), "seed", maximum=2**63 - 1))
        impl = q.get("impl", "c")
        if impl not in ("c", "python"):
            raise UsageError(f"source {ref!r}: impl must be c or python")
        return GenSource(name, n, start, impl)
    if "://" in ref:
        raise UsageError(f"unknown source scheme in {ref!r}; use gen://LAYOUT?n=N, a file path, or - for stdin")
    path = os.path.abspath(ref)
    if not os.path.exists(path):
        raise MissingPathError(f"source file {ref} does not exist")
    if stat.S_ISFIFO(os.stat(path).st_mode):
        return _stream_source(path, layout)
    refuse_pseudo_file(ref)
    if os.path.isdir(path):
        if layout is not None and getattr(layout, "variable_length", False):
            return JsonDirSource(path, on_bad_file)
        raise UsageError(f"source {ref} is a directory; use `bulkload load {ref} DATASET --layout docs` for a "
                         f"directory of <id>.json documents, or `bulkload ingest DATASET --from {ref}` for "
                         "files of raw records")
    if layout is not None and getattr(layout, "variable_length", False):
        raise UsageError(f"source {ref} is a file; layout docs loads gen://docs?n=N or a directory of "
                         "<id>.json files")
    return FileSource(path)


#: statfs f_type of the kernel's pseudo filesystems: their files report sizes (often 0 or
#: 4096) that have nothing to do with what reading them yields
PSEUDO_FILESYSTEMS = {0x9FA0: "procfs", 0x62656572: "sysfs", 0x64626720: "debugfs", 0x74726163: "tracefs",
                      0x73636673: "securityfs", 0x63677270: "cgroup2", 0x27E0EB: "cgroup",
                      0x62656570: "configfs", 0xCAFE4A11: "bpf", 0xDE5E81E4: "efivarfs"}
_NOT_RECORDS = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def refuse_pseudo_file(ref: str) -> None:
    """Raise SourceTypeError unless ``ref`` can hold records: a device, a socket, or a
    file of procfs/sysfs (whose sizes lie) is refused. Regular files, directories and
    FIFOs pass (what each of those may hold is checked by its own reader)."""
    st = os.stat(ref)
    kind = _NOT_RECORDS.get(stat.S_IFMT(st.st_mode))
    if kind is None:
        fs = PSEUDO_FILESYSTEMS.get(_fs_type(ref))
        kind = f"on {fs} (its sizes are not the bytes it yields)" if fs else None
    if kind is not None:
        raise SourceTypeError(f"source {ref} is {kind}, not a file of records; load a regular file, a FIFO "
                              "or - (stdin), e.g. head -c BYTES DEVICE | bulkload load - DATASET")


def _fs_type(path: str) -> int | None:
    """statfs(2) f_type of the filesystem holding ``path`` (None if unknown)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if libc.statfs(os.fsencode(path), buf) != 0:
        return None
    return int.from_bytes(buf.raw[:ctypes.sizeof(ctypes.c_long)], sys.byteorder) & 0xFFFFFFFF


def _stream_source(path: str, layout: Layout | None) -> StreamSource:
    if layout is not None and getattr(layout, "variable_length", False):
        what = "stdin" if path == "-" else f"a stream ({path})"
        raise UsageError(f"layout docs cannot be read from {what}; load gen://docs?n=N or a directory "
                         "of <id>.json files")
    fd = stream_fd(path)
    if fd is not None and path != "-":  # (stdin may also come from load(stdin=...))
        try:
            os.fstat(fd)
        except OSError:
            raise MissingPathError(f"source {path}: file descriptor {fd} is not open") from None
    return StreamSource(path)


def parse_count(text: str, what: str, maximum: int = MAX_RECORDS) -> int:
    """Parse a non-negative integer argument (accepts 1_000_000 and 1e6 style)."""
    s = str(text).strip().replace("_", "")
    try:
        if any(c in s for c in "eE.") and not s.lower().startswith("0x"):
            v = float(s)
            if v != int(v):
                raise ValueError
            v = int(v)
        else:
            v = int(s, 0)
    except (ValueError, OverflowError):
        raise UsageError(f"{what} must be a non-negative integer, got {text!r}") from None
    if v < 0:
        raise UsageError(f"{what} must be a non-negative integer, got {text!r}")
    if v > maximum:
        raise UsageError(f"{what} is too large ({text}); the maximum is {maximum}")
    return v
