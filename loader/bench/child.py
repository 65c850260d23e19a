"""The child benchmark processes: ``python -m loader.bench.child KIND ARGS-JSON`` runs the
child function ``KIND`` of a section (limits, finalize, peers) with the keyword arguments
of ARGS-JSON and prints its result as one JSON line.

Each benchmark that is not a `bulkload` command runs in such a fresh process, so that its
whole process tree can be sampled for peak RSS (`processes.run_child`).

Invariants: this module imports only the light section modules (the standard library and
`infra.outputs`); every heavy or optional library (numpy, lmdb, rocksdict, pycapnp,
pyarrow, pandas, ArcticDB, TileDB) is imported by the child function that measures it, so a
child's peak RSS is its own figure's. Nothing imports this module: it is only run.

Crash behaviour: an exception in a child is its traceback on stderr and exit status 1 (the
suite turns it into the figure's "failed" reason); an unknown KIND is exit status 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from . import catalog, finalize, limits, peers, randreads, reads, ticks

CHILDREN: dict[str, Callable[..., dict]] = {
    "cfill": limits.child_cfill,
    "npsave": limits.child_npsave,
    "npload": limits.child_npload,
    "coldread": limits.child_coldread,
    "lmdb_per_record": peers.child_lmdb_per_record,
    "lmdb_blob": peers.child_lmdb_blob,
    "rocksdict_wb": peers.child_rocksdict_wb,
    "capnp_builder": peers.child_capnp_builder,
    "arcticdb": peers.child_arcticdb,
    "tiledb": peers.child_tiledb,
    "probe_finalize": finalize.child_probe_finalize,
    "finalize": finalize.child_finalize,
    "query": finalize.child_query,
    "randreads": randreads.child_randreads,
    "diskreads": randreads.child_diskreads,
    "catalog_runs": catalog.child_catalog_runs,
    "catalog_ops": catalog.child_catalog_ops,
    "reads_prepare": reads.child_reads_prepare,
    "reads": reads.child_reads,
    "ticks_arcticdb": ticks.child_ticks_arcticdb,
    "ticks_parquet": ticks.child_ticks_parquet,
    "ticks_read": ticks.child_ticks_read,
    "ticks_box": ticks.child_ticks_box,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in CHILDREN:
        print(
            f"usage: python -m loader.bench.child KIND [ARGS-JSON]; KIND is one of {', '.join(CHILDREN)}",
            file=sys.stderr,
        )
        return 2
    kind, args = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    print(json.dumps(CHILDREN[kind](**args)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
