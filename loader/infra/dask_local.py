"""A Dask LocalCluster for one call (``local:N``), started where the caller's ``__main__`` is not.

distributed starts a LocalCluster's worker processes with multiprocessing's spawn method,
which re-runs the parent's main module in each of them (mainless.py): the caller's script
without an ``if __name__ == "__main__":`` guard would run again - a second load - and a
script from stdin or ``python -c`` fails to start them. So the cluster lives in a helper
process started through mainless.context() (its own main module is multiprocessing's, not
the caller's): it starts the cluster, sends its scheduler's address, and closes it when the
coordinator closes its end of the pipe - or dies: the pipe breaks then too.

The helper ignores the stop signals (the coordinator decides, as for pool workers); its
failure to start the cluster is an EngineError naming the cause. Crash behaviour: the
helper closes the cluster when the coordinator is gone; the cluster's workers watch the
helper (distributed's own parent watch).
"""

from __future__ import annotations

import contextlib

from ..errors import EngineError

#: seconds the helper may take to start the cluster / to close it
START_TIMEOUT_S = 120
CLOSE_TIMEOUT_S = 30


def _serve(n: int, conn) -> None:
    """Helper process: start a LocalCluster of ``n`` workers, send its address, wait for EOF."""
    from . import proc

    proc.leave_stop_signals_to_coordinator()
    try:
        from distributed import LocalCluster

        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
    except Exception as e:  # noqa: BLE001 - told to the coordinator
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    with cluster:
        conn.send(("address", cluster.scheduler_address))
        try:
            conn.recv()  # nothing is sent: EOF when the coordinator closes its end or dies
        except (EOFError, OSError):
            pass


@contextlib.contextmanager
def local_cluster(n: int):
    """The scheduler address of a LocalCluster of ``n`` worker processes, for the block."""
    from . import mainless

    ctx = mainless.context()
    theirs, ours = ctx.Pipe(duplex=True)
    helper = ctx.Process(target=_serve, args=(n, theirs), name="bulkload-dask-local")
    helper.start()
    theirs.close()
    try:
        if not ours.poll(START_TIMEOUT_S):
            raise EngineError(f"the local Dask cluster (local:{n}) did not start within {START_TIMEOUT_S} s")
        try:
            kind, what = ours.recv()
        except (EOFError, OSError):
            raise EngineError(f"the local Dask cluster (local:{n}) exited with code {helper.exitcode} before "
                              "it started") from None
        if kind == "error":
            raise EngineError(f"the local Dask cluster (local:{n}) could not start: {what}")
        yield what
    finally:
        ours.close()
        helper.join(CLOSE_TIMEOUT_S)
        if helper.exitcode is None:
            helper.kill()
            helper.join(5)
