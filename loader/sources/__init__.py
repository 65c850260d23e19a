"""Sources: where records come from (generators, files, streams) and how a load plans them.

One protocol (`Source`, `SourcePlan` in base.py), one module per kind of source, and a
registry that plug-ins extend (their own ``gen://NAME`` generators and directory
sources). May import: model, infra, errors (and the C generators, ``_gen``).
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
from .parse import parse_source
from .streams import StreamSource, stream_fd

__all__ = ["MAX_RECORDS", "DirectorySource", "FileSource", "GenSource", "Source", "SourcePlan", "StreamSource",
           "hash_file", "open_input", "parse_count", "parse_source", "refuse_pseudo_file",
           "register_directory_source", "register_generator", "stream_fd"]
