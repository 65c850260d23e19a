"""The ``docs`` layout: variable-length keyed records (documents).

A document is ``(id, created_at, text)``: ``id`` a uint64 that is its key, ``created_at``
an int64 epoch second, ``text`` UTF-8 of any length. A batch of documents is held
column-wise in a `DocBatch` (batch.py); one-per-document values are encoded by values.py;
the generator (``gen://docs``) is gen.py, the JSON directory source json_dir.py and
sources.py; the record kind that stores them is kind.py, the reader access.py.

Pure description: nothing here writes a store or a file.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..errors import UsageError
from ..model.layouts import builtin_schema_dir

# --- the layout -------------------------------------------------------------------

#: (name, type, meaning) of the fields of a document, in order. ``id`` is the key.
DOCS_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("id", "uint64", "the document's unique id; the key, stored as 8 bytes big-endian"),
    ("created_at", "int64", "creation time, seconds since the Unix epoch"),
    ("text", "utf8", "the document's text, UTF-8, any length"),
)


@dataclass(frozen=True)
class DocsLayout:
    """The variable-length layout ``docs`` (a counterpart of `loader.layouts.Layout`)."""

    name: str = "docs"
    fields: tuple[tuple[str, str, str], ...] = DOCS_FIELDS
    key_field: str = "id"
    description: str = "documents: uint64 id (the key), int64 created_at, UTF-8 text"

    #: there is no fixed record size: documents are stored one value per key
    variable_length = True
    #: stored by the documents' record kind (loader/docs/kind.py)
    kind = "docs"

    @property
    def names(self) -> list[str]:
        return [f[0] for f in self.fields]

    @functools.cached_property
    def arrow_schema(self):
        import pyarrow as pa  # heavy: only Arrow output needs it

        return pa.schema(
            [
                pa.field("id", pa.uint64(), nullable=False),
                pa.field("created_at", pa.int64(), nullable=False),
                pa.field("text", pa.string(), nullable=False),
            ],
            metadata={"bulkload.layout": self.name},
        )

    def field(self, name: str):
        """Fixed-size record fields only: what needs them (finalize's dims) is refused here."""
        raise UsageError(
            f"layout docs holds documents (variable-length, keyed by id), not fixed-size "
            f"records: field {name!r} cannot be used here (finalize, compact and "
            "redimension work on fixed-size layouts); read documents with get / scan"
        )

    def capnp_module(self):
        """The pycapnp module of schemas/docs.capnp (has ``.Doc``)."""
        return capnp_module()

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "fields": [[n, t] for n, t, _ in self.fields],
            "key": self.key_field,
            "variable_length": True,
        }


DOCS = DocsLayout()


@functools.cache
def capnp_module():
    """Load the shipped schemas/docs.capnp (explicit path, no imports; once per process)."""
    import capnp  # heavy (~40 ms): only the capnp value format reads documents with pycapnp

    return capnp.load(str(builtin_schema_dir() / "docs.capnp"), imports=[])
