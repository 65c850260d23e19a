"""Documents: variable-length, id-keyed records (the ``docs`` layout), a plug-in of the core.

Importing this package registers what it brings with the core's registries: the layout
``docs`` (layout.py), its record kind (kind.py: how a batch of documents is produced,
stored in run tables ``docs-RUNID`` and checked), and its sources (sources.py:
``gen://docs`` and directories of ``<id>.json`` files, json_dir.py); the kind also brings
the documents' reader behind `Dataset.get` / `scan` (access.py), their own `ingest`
(ingest.py, ledger.py) and `compact` (compact.py, fold.py). The core never imports it
(import-linter's contract "the core does not import the documents plug-in"): its
registries load it on a miss (loader/model/plugins.py). In the layers it sits above read
and below api: it may import read, arrays, loading, maintain, kinds, sources,
serializers, stores, model, infra and errors - never api, bench or cli.
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
