"""Sources of records: the protocol, what a source yields when planned, and SOURCE parsing.

A source spec is small, frozen and picklable; workers open it themselves and produce the
records of the batches they own straight into the serializer's buffer (``fill``), so
record bytes never travel through pipes. Only a stream, which cannot be split, is read by
the coordinator into shared memory (loading/stream.py).

Built in (one module each): ``gen://LAYOUT?n=N&start=S`` (generated.py), a file of raw
records (files.py), a stream: ``-``, a FIFO, /dev/stdin, /dev/fd/N (streams.py), a user's
generator ``gen://MODULE:FUNCTION`` / ``gen://c:LIB:SYMBOL`` (user_gen.py), and Python
objects given to ``loader.load``: whole arrays, DataFrames, Arrow tables (shared.py) and
iterables of blocks (iterables.py), found through `object_source`.
Plug-ins register more with `register_generator` (``gen://NAME`` of their own layouts),
`register_directory_source` (a directory as the source of a layout of their kind), e.g.
the documents' ``gen://docs`` and ``<id>.json`` directories (loader/docs/sources.py), and
`register_object_source` (a kind of Python object). The built-in file types and object
adapters register themselves when their registry is first used or extended (`_builtins`:
a ``gen://`` load imports none of them), so they always come before a plug-in's.
Keyed sources have ``read_docs(offset, count) -> (batch, [file errors])`` instead of
``fill``.

Planning (`Source.plan`) happens once, in the coordinator, before anything is written: it
counts the records (a partial trailing record fails here), fingerprints the source (what
identifies it on a re-run: resume, "already loaded"), and for a directory lists it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..errors import LayoutError, UsageError
from ..model.layouts import Layout, fields_difference, get_layout

if TYPE_CHECKING:
    import numpy as np

MAX_RECORDS = 2**63 - 1


class Source:
    """What every source spec offers besides its own fields (see the module docstring)."""

    if TYPE_CHECKING:  # read-only to users: a subclass may compute them (a property)

        @property
        def replayable(self) -> bool:
            """A stream is read once and cannot be replayed: every load of it is a new run."""
            ...

        @property
        def layout_name(self) -> str | None:
            """The layout a generated source yields (None: the dataset's or --layout)."""
            ...

    else:
        #: a stream is read once and cannot be replayed: every load of it is a new run
        replayable = True
        #: the layout a generated source yields (None: the dataset's or --layout)
        layout_name: str | None = None
    #: its records live in the coordinator's memory (an in-memory object): only workers of
    #: the local pool can read them, never those of a distributed engine
    local_only = False
    #: it runs the user's code (a generator), which may end the process it runs in: never
    #: in the coordinator's (loading/execute.py; sources/user_gen.py probes in a worker too)
    runs_user_code = False
    #: a re-run is matched by the extent it loaded (a file that grew loads its new records)
    by_extent = False
    #: raw bytes with no layout of their own (a file of raw records, a stream): read only
    #: under --layout, the dataset's layout or the default - never a sibling input's (many.py)
    raw_bytes = False

    @property
    def uri(self) -> str:
        raise NotImplementedError

    def filler(self) -> Callable[[np.ndarray, int], None]:
        """``fill(records, offset)`` with what it looks up done once: a worker fills every
        batch of the source through it (a generator's layout and options resolved at the
        first batch, not at each: 8.4 -> 1.0 µs a 100-record scidb96 batch, ad hoc)."""
        return self.fill  # type: ignore[attr-defined]

    def plan(self, layout: Layout) -> SourcePlan:
        """Count and fingerprint the source (nothing is written)."""
        return SourcePlan(self, self.count(layout), self.fingerprint(layout))

    def count(self, layout: Layout) -> int | None:
        raise NotImplementedError

    def fingerprint(self, layout: Layout) -> str | None:
        raise NotImplementedError

    def id_span(self) -> tuple[int, int] | None:
        """(lowest, highest) id a keyed source yields, None when empty or not keyed."""
        return None

    def records_layout(self, given: Layout | None, dataset: Layout | None) -> Layout | None:
        """The layout of the records this source yields, given the layout asked for
        (``given``: --layout) and the one of the dataset's records (None: a new or empty
        dataset). A generator's own; a file with a schema (.npy, Arrow, Parquet) its own
        or the one wanted, checked against its fields (LayoutError); with neither a layout
        given nor records in the dataset, the source's own (`inferred_layout`); None: raw
        bytes, which take whatever layout the run resolves."""
        if self.layout_name is not None:
            own = get_layout(self.layout_name)
            if given is not None and given is not own and given.fields != own.fields:
                named = f"another layout also named {given.name!r}" if given.name == own.name else repr(given.name)
                raise LayoutError(
                    f"{self.uri} generates records of layout {own.name!r}, but --layout gives {named} "
                    f"({fields_difference(own.fields, given.fields)}); a generator's records have its "
                    "own layout: drop --layout, or generate records of that layout"
                )
            return own
        return given if given is not None or dataset is not None else self.inferred_layout()

    def committed(self) -> None:
        """The run that read this source is committed (e.g. its plan file can go)."""

    def inferred_layout(self) -> Layout | None:
        """The layout the source's own records declare (an array's dtype, a frame's
        columns), used when neither ``layout=`` nor the dataset gives one; None: none."""
        return None

    def close(self) -> None:
        """The load is over, whatever its outcome: free what the source holds (shared memory)."""

    def streams(self) -> tuple[Source, ...]:
        """The streams a run of this source reads, each by its own feeder (one; several
        inputs: each of them, many.py)."""
        return (self,)


@dataclass(frozen=True)
class SourcePlan:
    """A source as a load run plans it: what the workers read, how many records, what
    identifies it, and for a directory its listing (``entries``) and files refused while
    listing (``skipped``)."""

    source: Source
    total: int | None  # records (documents) to load; None: a stream (counted as read)
    fingerprint: str | None  # None: cannot be recognised again (a stream)
    entries: Sequence[tuple[int, str]] | None = None  # a directory's listing, in id order (loader/docs/sources.py)
    skipped: tuple = field(default=())  # {"path", "reason"} of files left out while planning
    parts: tuple[SourcePlan, ...] = ()  # several inputs (many.py): the plan of each, in order

    @property
    def uri(self) -> str:
        return self.source.uri

    def id_span(self) -> tuple[int, int] | None:
        """(lowest, highest) id to load (keyed sources)."""
        if self.entries is not None:
            return (int(self.entries[0][0]), int(self.entries[-1][0])) if len(self.entries) else None
        return self.source.id_span()

    def with_entries(self, entries, skipped) -> SourcePlan:
        """This plan with fewer entries (e.g. ids already stored left out)."""
        return replace(self, entries=entries, total=len(entries), skipped=tuple(skipped))

    def for_run(self, root: str, run_id: str) -> Source:
        """The source the workers of run ``run_id`` read: a directory's listing is saved
        as the run's plan file inside the dataset first (the source's ``for_run``)."""
        for_run = getattr(self.source, "for_run", None)
        return self.source if for_run is None else for_run(root, run_id, self.entries)


# --- the registry of plug-in sources --------------------------------------------------------

#: gen://NAME?QUERY -> source, for layouts whose plug-in generates them: (ref, query, layout)
GeneratorParser = Callable[[str, str, "Layout | None"], Source]


@dataclass(frozen=True)
class DirectorySource:
    """How a plug-in kind reads a directory, and what it says about other sources."""

    factory: Callable[[str, str], Source]  # (absolute path, on_bad_file) -> source
    stream_refusal: Callable[[str], str]  # (what: "stdin" / "a stream (P)") -> message
    file_refusal: Callable[[str], str]  # (the SOURCE argument) -> message


_GENERATORS: dict[str, GeneratorParser] = {}
_DIRECTORIES: dict[str, DirectorySource] = {}
_FILE_TYPES: dict[str, FileType] = {}

#: registry -> the built-in modules that register into it when imported
_BUILTIN_MODULES = {"file types": ("arrow_files", "npy"), "objects": ("iterables", "shared")}
_BUILTINS_LOADED: set[str] = set()


def _builtins(registry: str) -> None:
    """Import ``registry``'s built-in modules before its first use or extension (so a
    plug-in's entries come after them, as they would if imported with the package).
    Start-up: a gen:// load needs none of them (numpy file readers, pyarrow's, shared memory).
    Marked loaded only once imported: another thread meanwhile waits on the import lock; the
    modules' own registrations (the importing thread) get them as they are."""
    if registry not in _BUILTINS_LOADED:
        for name in _BUILTIN_MODULES[registry]:
            importlib.import_module(f"{__package__}.{name}")
        _BUILTINS_LOADED.add(registry)


@dataclass(frozen=True)
class FileType:
    """A kind of file that is not raw records (.npy, Arrow IPC, Parquet): its name, how
    its content starts (``magic``, None: by suffix only), and its source."""

    name: str
    magic: bytes | None
    factory: Callable[[str], Source]  # (absolute path) -> source; FileFormatError if it is not one


def register_file_type(suffixes: tuple[str, ...], file_type: FileType) -> None:
    """Files named ``*SUFFIX`` (or whose content starts with its magic) are read by
    ``file_type.factory``."""
    _builtins("file types")
    for suffix in suffixes:
        _FILE_TYPES[suffix.lower()] = file_type


def file_type(suffix: str, head: bytes) -> FileType | None:
    """The registered type of a file with this suffix, or else whose content starts with
    ``head`` (None: raw records)."""
    _builtins("file types")
    found = _FILE_TYPES.get(suffix.lower())
    if found is None:
        found = next((t for t in _FILE_TYPES.values() if t.magic and head.startswith(t.magic)), None)
    return found


def register_generator(layout_name: str, parser: GeneratorParser) -> None:
    """``gen://LAYOUT_NAME?...`` is parsed by ``parser`` (a plug-in's own generator)."""
    _GENERATORS[layout_name] = parser


def register_directory_source(kind_name: str, source: DirectorySource) -> None:
    """A directory is a source for layouts of kind ``kind_name``; other sources are refused
    for them with the plug-in's messages."""
    _DIRECTORIES[kind_name] = source


def directory_source(layout: Layout | None) -> DirectorySource | None:
    """How the plug-in of ``layout``'s kind reads a directory (None: files of records)."""
    return None if layout is None else _DIRECTORIES.get(getattr(layout, "kind", "fixed"))


@dataclass(frozen=True)
class ObjectAdapter:
    """How ``loader.load`` reads one kind of Python object: ``takes(obj)`` says whether it
    is one, ``factory(obj)`` makes its source (which checks the object against the run's
    layout when planned)."""

    takes: Callable[[object], bool]
    factory: Callable[[object], Source]
    last: bool = False  # a catch-all (e.g. any iterable): asked after every other


_OBJECTS: list[ObjectAdapter] = []


def register_object_source(adapter: ObjectAdapter) -> None:
    """``loader.load(obj, ...)`` reads the objects ``adapter`` takes; adapters are asked in
    the order registered, catch-alls (``last``) after the others."""
    _builtins("objects")
    _OBJECTS.append(adapter)
    _OBJECTS.sort(key=lambda a: a.last)  # stable: registration order within each group


def object_source(obj: object) -> Source:
    """The source of a Python object given to ``loader.load`` (a Source is itself)."""
    if isinstance(obj, Source):
        return obj
    _builtins("objects")
    for adapter in _OBJECTS:
        if adapter.takes(obj):
            return adapter.factory(obj)
    raise UsageError(
        f"cannot load an object of type {type(obj).__qualname__}: the source is a string "
        "(gen://..., a file path, - for stdin), a numpy structured array, a pandas DataFrame, a "
        "pyarrow Table / RecordBatch / RecordBatchReader, or an iterable of those or of bytes"
    )


def generator_parser(layout_name: str) -> GeneratorParser | None:
    """A plug-in's parser of ``gen://LAYOUT_NAME?...`` (None: the built-in generators)."""
    return _GENERATORS.get(layout_name)


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
