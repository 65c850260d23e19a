"""An iterable of record blocks as a source: a stream, like stdin.

``loader.load(blocks, DATASET)`` where ``blocks`` is any iterable (a generator, a list, a
pyarrow RecordBatchReader, ...) of numpy structured arrays, DataFrames, Arrow Tables /
RecordBatches (memory.py: what each must hold), or of ``bytes`` / ``bytearray`` /
``memoryview`` of raw records (one bytes object alone is one block). It cannot be split
or replayed: the coordinator's stream feeder (loading/feeder.py) reads it through a
`BlockReader` straight into the shared-memory slots the workers copy batches from, so no
record is ever pickled; every load of it is a new run, and nothing of a failed one is
committed.

The layout, when neither ``layout=`` nor the dataset gives one, is the first block's (a
RecordBatchReader's schema; raw bytes have none: the default layout). Raw bytes are never
read under a layout inferred from another block: a bytes block after a first block that
decided the layout is a LayoutError (give ``layout=``). Errors name the
iterable and where it stopped: the block the iterable raised at or that does not hold
records of the layout (LayoutError / ConversionError / GeneratorError), a partial record
at the end (PartialRecordError naming the byte offset). An empty iterable loads 0 records.
"""

from __future__ import annotations

import itertools

from ..errors import BulkloadError, GeneratorError, LayoutError, PartialRecordError
from ..model.layouts import Layout
from .base import ObjectAdapter, Source, SourcePlan, register_object_source
from .memory import is_block, layout_of, records_of, schema_layout, type_name

BYTES = (bytes, bytearray, memoryview)


class IterSource(Source):
    """An iterable of blocks (see the module docstring): a stream, read once by the feeder."""

    replayable = False

    def __init__(self, obj):
        self.obj = obj
        self.blocks = iter([obj]) if isinstance(obj, BYTES) else None  # (made when first needed)
        self.layout: Layout | None = None
        self.layout_from: str | None = None  # the block whose own layout the run took (inferred_layout)

    @property
    def uri(self) -> str:
        return f"python://{type_name(self.obj)}"

    @property
    def name(self) -> str:
        """How errors name it."""
        return self.uri

    def _iterator(self):
        if self.blocks is None:
            try:
                self.blocks = iter(self.obj)
            except Exception as e:
                raise GeneratorError(f"{self.uri}: iter() raised {type(e).__name__}: {e}") from None
        return self.blocks

    def inferred_layout(self) -> Layout | None:
        """The first block's layout (the first block is kept for the load)."""
        if type_name(self.obj) == "pyarrow.RecordBatchReader":
            self.layout_from = "its schema"
            return schema_layout(self.obj.schema, self.uri)
        it = self._iterator()
        first = _next_block(it, self.uri, 0, 0)
        if first is None:
            return None
        self.blocks = itertools.chain([first], it)
        if not is_block(first):
            return None
        self.layout_from = f"block 0 (a {type_name(first)})"
        return layout_of(first, f"{self.uri} block 0")

    def plan(self, layout: Layout) -> SourcePlan:
        self.layout = layout
        return SourcePlan(self, None, None)

    def count(self, layout: Layout) -> None:
        return None

    def fingerprint(self, layout: Layout) -> None:
        return None

    def open(self, stdin=None) -> tuple:
        """(a reader with readinto over the blocks, True: the feeder closes it)."""
        assert self.layout is not None, "a stream is opened once its run planned it"
        return BlockReader(self._iterator(), self.layout, self.uri, self.layout_from), True


class BlockReader:
    """``readinto`` over the raw bytes of an iterable's blocks (what the stream feeder reads)."""

    def __init__(self, blocks, layout: Layout, name: str, layout_from: str | None = None):
        self.blocks, self.layout, self.name = blocks, layout, name
        self.layout_from = layout_from  # the block the layout was inferred from (None: given, the dataset's)
        self.pending = memoryview(b"")
        self.nblocks = 0  # blocks taken so far
        self.offset = 0  # bytes handed out so far

    def readinto(self, out: memoryview) -> int:
        got = 0
        while got < len(out):
            if not len(self.pending) and not self._take():
                break
            k = min(len(out) - got, len(self.pending))
            out[got : got + k] = self.pending[:k]
            self.pending, got, self.offset = self.pending[k:], got + k, self.offset + k
        return got

    def _take(self) -> bool:
        """The next non-empty block into ``pending``; False at the end (a partial record there
        is an error naming its byte offset)."""
        rs, at = self.layout.record_size, self.offset  # (nothing pending)
        while True:
            block = _next_block(self.blocks, self.name, self.nblocks, at // rs)
            if block is None:
                if at % rs:
                    raise PartialRecordError(
                        self.name,
                        at - at % rs,
                        rs,
                        at % rs,
                        fix="yield whole records (bytes of a multiple of the record size)",
                    )
                return False
            what = f"{self.name} block {self.nblocks}"
            self.nblocks += 1
            if isinstance(block, BYTES) and self.layout_from is not None:
                raise LayoutError(
                    f"{what} is raw bytes, which have no layout of their own, and the run's layout "
                    f"{self.layout.name!r} was taken from {self.layout_from}; raw bytes are read only "
                    "under layout=, the dataset's layout or the default, never another block's: give "
                    "layout= of the raw records (every block must then hold them); nothing from this "
                    "run was committed"
                )
            raw = _raw_bytes(block, self.layout, what)
            if len(raw):
                self.pending = raw
                return True

    def close(self) -> None:
        close = getattr(self.blocks, "close", None)
        if close is not None:  # a generator stopped early runs its finally blocks
            close()


def _next_block(it, name: str, index: int, records: int):
    """The iterator's next block (None at its end); what it raises becomes a GeneratorError."""
    try:
        return next(it)
    except StopIteration:
        return None
    except BulkloadError:
        raise
    except Exception as e:
        raise GeneratorError(
            f"{name} raised {type(e).__name__}: {e} at block {index}, after {records:,} records; "
            "nothing from this run was committed"
        ) from None


def _raw_bytes(block, layout: Layout, what: str) -> memoryview:
    if isinstance(block, BYTES):
        return memoryview(block).cast("B")
    if not is_block(block):
        raise GeneratorError(
            f"{what} is of type {type_name(block)}; an iterable given to load yields numpy structured "
            "arrays, DataFrames, Arrow tables / record batches, or bytes of raw records"
        )
    return records_of(block, layout, what).view("u1").data


def _iterable(obj) -> bool:
    return isinstance(obj, BYTES) or (not isinstance(obj, str) and hasattr(obj, "__iter__"))


register_object_source(ObjectAdapter(_iterable, IterSource, last=True))
