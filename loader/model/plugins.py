"""Plug-ins: packages that add record kinds, layouts and sources to the core.

A plug-in is a module that, when imported, registers what it brings with the core's
registries (`model.layouts.register_layout`, `kinds.register_kind`,
`sources.register_generator` / `register_directory_source`). The core never imports a
plug-in directly (import-linter checks it): a registry that misses a name calls
`load_plugins`, which imports

1. the plug-ins shipped with bulkload, named here as strings (`BUILTIN`: the documents
   kind, ``loader.docs``), then, if the name is still unknown,
2. third-party ones declared in the ``bulkload.plugins`` entry point group (scanned only
   then: importing importlib.metadata costs ~60 ms).

Worker processes load plug-ins the same way, on the first miss (e.g. when a task names
the ``docs`` layout). Loading is idempotent and never fails a lookup: a plug-in that
cannot be imported is skipped (its names then stay unknown, with the registry's error).
"""

from __future__ import annotations

import importlib

#: plug-ins shipped with bulkload (module names, imported on the first registry miss)
BUILTIN = ("loader.docs",)
ENTRY_POINT_GROUP = "bulkload.plugins"

_builtin_loaded = False
_entry_points_loaded = False


def load_plugins() -> bool:
    """Import the plug-ins not imported yet; True if this call imported any (so that a
    registry that missed a name looks again)."""
    global _builtin_loaded, _entry_points_loaded
    if not _builtin_loaded:
        _builtin_loaded = True
        for name in BUILTIN:
            _import(name)
        return True
    if not _entry_points_loaded:
        _entry_points_loaded = True
        from importlib.metadata import entry_points  # slow (~60 ms): only for third-party plug-ins

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            _import(ep.value)
        return True
    return False


def _import(name: str) -> None:
    try:
        importlib.import_module(name)
    except ImportError:
        pass  # its names stay unknown: the registry says so
