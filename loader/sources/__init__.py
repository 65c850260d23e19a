"""Sources: where records come from (generators, files, streams) and how a load plans them.

One protocol (`Source`, `SourcePlan` in base.py), one module per kind of source (files of
raw records, .npy, Arrow IPC and Parquet files, streams, generators; several inputs in
one run: many.py), and registries that plug-ins extend (their own ``gen://NAME``
generators, directory sources and file types). May import: model, infra, errors (and
the C generators, ``_gen``; pyarrow only where an Arrow or Parquet file is read).
"""

from .base import (
    MAX_RECORDS,
    DirectorySource,
    Source,
    SourcePlan,
    parse_count,
    register_directory_source,
    register_generator,
)
from .files import FileSource, hash_file, open_input, refuse_pseudo_file
from .generated import GenSource
from .many import ManyInputs, parse_sources
from .parse import parse_source
from .streams import StreamSource, stream_fd

__all__ = ["MAX_RECORDS", "DirectorySource", "FileSource", "GenSource", "ManyInputs", "Source", "SourcePlan",
           "StreamSource", "hash_file", "open_input", "parse_count", "parse_source", "parse_sources",
           "refuse_pseudo_file", "register_directory_source", "register_generator", "stream_fd"]
