"""Sources: where records come from (generators, files, streams, Python objects) and how a
load plans them.

One protocol (`Source`, `SourcePlan` in base.py), one module per kind of source (files of
raw records, .npy, Arrow IPC and Parquet files, streams, generators, user generators;
several inputs in one run: many.py; Python objects: shared.py for whole arrays, frames and
tables, then iterables.py for any iterable of blocks), and registries that plug-ins extend
(their own ``gen://NAME`` generators, directory sources, file types and object adapters).
The modules of file types and objects, and user_gen.py, are imported when first needed
(base.py `_builtins`; start-up: a gen:// load reads no file and no object). May import:
model, infra, errors (and the C generators, ``_gen``; pyarrow only where an Arrow or
Parquet file or object is read).
"""

from .base import (
    MAX_RECORDS,
    DirectorySource,
    ObjectAdapter,
    Source,
    SourcePlan,
    object_source,
    parse_count,
    register_directory_source,
    register_generator,
    register_object_source,
)
from .files import FileSource, hash_file, open_input, refuse_pseudo_file
from .generated import GenSource
from .many import ManyInputs, parse_sources
from .parse import parse_source
from .streams import StreamSource, stream_fd

__all__ = [
    "MAX_RECORDS",
    "DirectorySource",
    "FileSource",
    "GenSource",
    "ManyInputs",
    "ObjectAdapter",
    "Source",
    "SourcePlan",
    "StreamSource",
    "generator",
    "hash_file",
    "object_source",
    "open_input",
    "parse_count",
    "parse_source",
    "parse_sources",
    "refuse_pseudo_file",
    "register_directory_source",
    "register_generator",
    "register_object_source",
    "stream_fd",
]


def __getattr__(name: str):
    if name == "generator":  # start-up: a user's generator module (ctypes, numpy) loads only when asked for
        from .user_gen import generator

        return generator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
