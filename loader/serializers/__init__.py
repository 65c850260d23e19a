"""Batch serializers: records of a layout <-> one stored value.

``capnp`` (capnp_framing.py): a standard Cap'n Proto ``Batch`` message built by framing
(a 40-byte header + the raw records), read back as a zero-copy numpy view.
``arrow`` (arrow_ipc.py): one Arrow IPC stream holding one RecordBatch, optional lz4/zstd.

``get_serializer(fmt, layout, compression)`` is the registry; see base.py for the
interface.
"""

from __future__ import annotations

import importlib

from ..errors import UsageError
from ..model.layouts import Layout, get_layout
from .base import COMPRESSIONS, Serializer, normalize_compression

# format name -> (module, class); imported lazily (pyarrow is slow to import)
_REGISTRY: dict[str, tuple[str, str]] = {
    "capnp": (".capnp_framing", "CapnpSerializer"),
    "arrow": (".arrow_ipc", "ArrowSerializer"),
}

FORMATS = tuple(_REGISTRY)


def serializer_class(fmt: str) -> type[Serializer]:
    key = str(fmt).lower()
    if key not in _REGISTRY:
        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    module, cls = _REGISTRY[key]
    found: type[Serializer] = getattr(importlib.import_module(module, __name__), cls)
    return found


def get_serializer(
    fmt: str,
    layout: Layout | str,
    compression: str | None = "none",
    *,
    batch_records: int | None = None,
) -> Serializer:
    """The serializer for a format, layout (object or name) and compression.

    Raises UsageError for an unknown format or compression, a compression the format
    does not support, or (when `batch_records` is given) a batch size the format cannot
    hold (capnp: `capnp_framing.MAX_BATCH_BYTES`).
    """
    cls = serializer_class(fmt)
    ser = cls(get_layout(layout), normalize_compression(compression))
    if batch_records is not None:
        ser.check_batch_records(int(batch_records))
    return ser


__all__ = ["COMPRESSIONS", "FORMATS", "Serializer", "get_serializer", "serializer_class"]
