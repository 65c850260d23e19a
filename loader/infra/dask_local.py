"""The host of a ``local:N`` Dask cluster: ``python -m loader.infra.dask_local N``.

A LocalCluster of N worker processes (one thread each) on 127.0.0.1, in a process (and
process group) of its own, so that the coordinator can end it whole at once however far
its start has got (dask_connect.local_cluster: SIGKILL to the group) - Dask's own close
of a LocalCluster still starting waits for every nanny, seconds to minutes.

Protocol: the host prints one line on stdout, ``address tcp://...`` once every worker is
up, or ``error TEXT`` if the cluster could not start; then it waits until its stdin ends
(the coordinator closed it, or died) and closes the cluster. It ignores stop signals: the
coordinator decides (as for bulkload's own workers).
"""

from __future__ import annotations

import signal
import sys

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def main() -> None:
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    from distributed import LocalCluster

    try:
        cluster = LocalCluster(
            n_workers=int(sys.argv[1]), threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        )
    except Exception as e:
        print(f"error {type(e).__name__}: {e}".replace("\n", " "), flush=True)
        return
    with cluster:
        print(f"address {cluster.scheduler_address}", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
