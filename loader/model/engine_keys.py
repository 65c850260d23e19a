"""What a run's report says of the engine its tasks ran on: the keys ``--json`` adds.

`EngineKeys` is a mixin of the reports of the runs that take ``client=`` / ``engine=`` /
``scheduler=`` (load, ingest, finalize, compact, verify): ``engine`` is {} for the local
pool (its ``to_dict()`` stays the report's own fields) or, for a run on Dask, engine,
scheduler, engine_workers and tasks_retried (api/engine.py `engine_info`), set on the
report by the API once its run is done (`with_engine`) - so a Python caller's
``report.to_dict()`` has the keys of the CLI's ``--json``. Not a dataclass field (class
attribute until set): reports built elsewhere keep their fields and their order.

Pure data: nothing to crash.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self


class EngineKeys:
    engine: ClassVar[dict[str, Any]] = {}

    def with_engine(self, info: dict[str, Any]) -> Self:
        """This report, saying it ran on ``info``'s engine (its ``to_dict()`` adds the keys)."""
        object.__setattr__(self, "engine", dict(info))  # reports may be frozen dataclasses
        return self
