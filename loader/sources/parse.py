"""Parsing a SOURCE argument into a source spec (see base.py for what sources are).

- ``-``, /dev/stdin, /dev/fd/N, /proc/self/fd/N, a FIFO: a stream (streams.py);
- ``gen://LAYOUT?...``: the layout's generator (generated.py), or a plug-in's own;
- ``gen://PKG.MODULE:FUNCTION?...``, ``gen://c:PATH:SYMBOL?...``: a user's generator (user_gen.py);
- a directory: the source of a plug-in's kind (e.g. ``<id>.json`` documents), else refused;
- a regular file: by its suffix, else by its content, an .npy (npy.py), Arrow IPC or
  Parquet file (arrow_files.py); a file of another known kind (.csv, .npz, .gz, ...)
  refused (typed.py); any other, raw records (files.py); devices, sockets, procfs/sysfs
  files refused.

Several SOURCE arguments, or a glob: many.py.
"""

from __future__ import annotations

import os
import stat

from ..errors import MissingPathError, UsageError
from ..model.layouts import Layout, get_layout
from .base import Source, directory_source, file_type, generator_parser
from .files import FileSource, refuse_pseudo_file
from .generated import parse_generated
from .streams import StreamSource, stream_fd


def parse_source(ref: str, layout: Layout | None = None, on_bad_file: str = "fail") -> Source:
    """Parse a SOURCE argument. ``layout`` is the --layout given, if any."""
    if stream_fd(ref) is not None:
        return _stream_source(ref, layout)
    if ref.startswith("gen://"):
        name, _, query = ref[len("gen://") :].partition("?")
        if not name:
            raise UsageError(f"source {ref!r} names no layout; use gen://scidb96?n=N")
        if ":" in name:  # a module:function or c:library:symbol
            from .user_gen import parse_user_generator  # start-up: only a user's generator needs it

            return parse_user_generator(ref, layout)
        get_layout(name)  # unknown layout -> clear error (and a plug-in's layout registers its generator)
        if layout is not None and layout.name != name:
            raise UsageError(f"source {ref!r} generates layout {name!r} but --layout is {layout.name!r}")
        parser = generator_parser(name) or parse_generated
        return parser(ref, query, layout)
    if "://" in ref:
        raise UsageError(f"unknown source scheme in {ref!r}; use gen://LAYOUT?n=N, a file path, or - for stdin")
    path = os.path.abspath(ref)
    if not os.path.exists(path):
        raise MissingPathError(f"source file {ref} does not exist")
    if stat.S_ISFIFO(os.stat(path).st_mode):
        return _stream_source(path, layout)
    refuse_pseudo_file(ref)
    directory = directory_source(layout)
    if os.path.isdir(path):
        if directory is not None:
            return directory.factory(path, on_bad_file)
        raise UsageError(
            f"source {ref} is a directory; use `bulkload load {ref} DATASET --layout docs` for a "
            f"directory of <id>.json documents, or `bulkload ingest DATASET --from {ref}` for "
            "files of raw records"
        )
    if directory is not None:
        raise UsageError(directory.file_refusal(ref))
    return _file_source(path, ref)


def _file_source(path: str, ref: str) -> Source:
    """The source of a regular file: of its type (by suffix, else by content), else raw records."""
    from .typed import refuse_unsupported  # start-up: only a file needs it (numpy, the layouts' types)

    suffix = os.path.splitext(path)[1]
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        head = b""  # unreadable: the file's reader says so, with what to do
    refuse_unsupported(ref, suffix, head)
    found = file_type(suffix, head)
    return FileSource(path) if found is None else found.factory(path)


def _stream_source(path: str, layout: Layout | None):
    directory = directory_source(layout)
    if directory is not None:
        raise UsageError(directory.stream_refusal("stdin" if path == "-" else f"a stream ({path})"))
    fd = stream_fd(path)
    if fd is not None and path != "-":  # (stdin may also come from load(stdin=...))
        try:
            os.fstat(fd)
        except OSError:
            raise MissingPathError(f"source {path}: file descriptor {fd} is not open") from None
    return StreamSource(path)
