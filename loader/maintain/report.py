"""The report of a `compact` run (`bulkload compact --json` prints its `to_dict()`).

The fields every record kind reports are typed; a kind that compacts its own way (the
documents plug-in folds tables) adds its own figures in ``details``, which `to_dict()`
places after the common ones. ``run_id`` is None and ``status`` ``nothing-to-do`` when
there was nothing to do: no run was recorded and nothing was written.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..model.engine_keys import EngineKeys

#: the status of a compaction (or finalize) that found nothing to do and wrote nothing
NOTHING_TO_DO = "nothing-to-do"


@dataclass
class CompactReport(EngineKeys):
    dataset: str
    run_id: str | None
    target_batch_records: int
    records: int
    batches_before: int
    batches_after: int
    merged: bool
    bytes_before: int
    bytes_after: int
    shards: list[dict]
    merge_s: float = 0.0
    seconds: float = 0.0
    status: str = "done"  # or NOTHING_TO_DO
    details: dict = field(default_factory=dict)

    @classmethod
    def from_kind(cls, rep: dict) -> CompactReport:
        """The report of a kind's own compaction (Kind.compact_dataset's dict): the keys that
        are fields, the rest its details."""
        common = {f.name for f in fields(cls)} - {"details"}
        return cls(
            **{k: v for k, v in rep.items() if k in common}, details={k: v for k, v in rep.items() if k not in common}
        )

    @property
    def layout(self) -> str | None:
        return self.details.get("layout")

    @property
    def shards_compacted(self) -> int:
        return sum(1 for s in self.shards if s.get("compacted"))

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "details"}
        out.update(self.details)
        return out | self.engine
