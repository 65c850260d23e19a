"""Documents: variable-length keyed records (the ``docs`` layout), a plug-in of the core.

Importing this package registers what it brings with the core's registries: the layout
``docs`` (layout.py), its record kind (kind.py: how a batch of documents is produced,
stored in run tables and checked; its own ingest and compaction), and its sources
(sources.py: ``gen://docs`` and directories of ``<id>.json`` files). The core never
imports it: its registries load it on a miss (loader/model/plugins.py). It may import
every stage below the public API: read, arrays, loading, maintain, kinds, sources,
serializers, stores, model, infra, errors.
"""

from ..model.layouts import register_layout
from ..sources import register_directory_source, register_generator
from .kind import DocsKind
from .layout import DOCS
from .sources import DIRECTORY, parse_gen_docs

register_layout(DOCS)
register_generator(DOCS.name, parse_gen_docs)
register_directory_source(DocsKind.name, DIRECTORY)

__all__ = ["DOCS", "DocsKind"]
