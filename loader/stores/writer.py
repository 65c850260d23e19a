"""Opening a shard for writing, waiting a moment for a previous job's workers to let go.

One writer per shard at any moment: a second ``open(write=True)`` raises
DatasetBusyError. Workers of a job that was just killed may still hold a shard for a
moment while they notice and exit, so writers retry for ``wait`` seconds first.
"""

from __future__ import annotations

import time

from ..errors import DatasetBusyError


def open_writer(spec, shard: int, options: dict, wait: float = 10.0):
    """Shard ``shard`` of ``spec`` opened for writing (retried while busy, up to ``wait`` s)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return spec.backend.open(spec.shard_path(shard), write=True, options=options)
        except DatasetBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
