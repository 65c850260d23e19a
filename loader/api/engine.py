"""Where a run executes: the local process pool or Dask, chosen per call.

`engine_for(dataset, client=, engine=, scheduler=)` is the context in which a run's tasks
go to the chosen executor (infra/executors.py): ``client`` (a ``distributed.Client``) or
``engine="dask"`` with ``scheduler`` (``tcp://HOST:PORT``, or ``local:N``: a LocalCluster
of N worker processes started for the call in a process of its own, ``python -m
loader.infra.dask_local``, so that they never run the caller's ``__main__``, and closed
after it); unset, the ``BULKLOAD_ENGINE`` / ``BULKLOAD_SCHEDULER`` variables (infra/env.py), else the local pool.
An executor already in effect (the CLI opens one per command) is reused. Before a Dask
executor is used - nothing written yet - the scheduler is checked within seconds
(infra/dask_connect.py): a scheme Dask knows and ``local:N`` within --workers' bounds
(UsageError), a Dask handshake and at least one worker within ``BULKLOAD_DASK_TIMEOUT``
seconds (EngineError naming the address); then every worker (infra/dask_exec.check_workers):
it can import bulkload and sees the dataset's directory - else a one-line EngineError.

`on_engine` runs a call of the API (``loader.load``, ``ingest``, ``finalize``, ``compact``,
``verify``: api/public.py, whose signatures show those three keywords) there. dask is imported only here and only when the engine is dask. Leases of Dask
attempts live in ``<dataset>/.leases`` (a directory every worker sees: the dataset's).

Crash behaviour: a LocalCluster started here (in a process group of its own) is closed on
the way out, and killed at once on a stop signal; a remote client is closed only if opened here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

from ..errors import EngineError, UsageError
from ..infra import env, executors
from ..model.engine_keys import EngineKeys
from ..model.options import MAX_WORKERS, check_count
from ..stores.spec import parse_dataset_uri

LEASES = ".leases"
R = TypeVar("R")


@contextlib.contextmanager
def engine_for(
    dataset: str, client: Any = None, engine: str | None = None, scheduler: str | None = None
) -> Iterator[Any]:
    """The executor the runs inside the block use (see the module docstring)."""
    name = (engine or ("dask" if client is not None else "")).strip().lower()
    if not name and not scheduler and executors.current_or_none() is not None:
        yield executors.current()
        return
    name = name or env.engine()
    if name not in env.ENGINES:
        raise UsageError(f"engine {name!r} is not local or dask")
    if name == "local":
        if client is not None or scheduler:
            raise UsageError("a Dask client or scheduler needs the dask engine (--engine dask)")
        with executors.using(executors.LocalExecutor()) as ex:
            yield ex
        return
    root = _dask_root(dataset)
    with _dask_client(client, scheduler or env.scheduler()) as (dask_client, where):
        from ..infra.dask_exec import DaskExecutor, check_workers  # dask: only when the engine is dask

        check_workers(dask_client, root)
        with executors.using(DaskExecutor(dask_client, os.path.join(root, LEASES), where)) as ex:
            yield ex


def engine_info(ex: Any) -> dict[str, Any]:
    """What a ``--json`` report adds for a run off the local pool: engine, scheduler, workers
    used, tasks retried ({} for the local pool: its reports stay the report's ``to_dict()``)."""
    if ex.local:
        return {}
    return {
        "engine": ex.engine,
        "scheduler": ex.scheduler,
        "engine_workers": sorted(ex.workers),
        "tasks_retried": ex.retried,
    }


def _dask_root(dataset: str) -> str:
    """The dataset's directory (UsageError for mem://, which no Dask worker can reach)."""
    spec = parse_dataset_uri(dataset)
    if spec.scheme == "mem":
        raise UsageError(
            f"{dataset}: a mem:// dataset lives in one process and cannot be written by Dask "
            "workers; use lmdb:// or rocksdb:// on a filesystem every worker sees"
        )
    return spec.root


@contextlib.contextmanager
def _dask_client(client: Any, scheduler: str) -> Iterator[tuple[Any, str]]:
    """(client, scheduler address) for the block: ``client``, or one opened on ``scheduler``
    (a handshake first, bounded: infra/dask_connect.py); either with a worker at least."""
    if client is not None:
        _connect().wait_for_workers(client, str(client.scheduler.address), env.dask_timeout())
        yield client, str(client.scheduler.address)
        return
    if not scheduler:
        raise UsageError(
            "the dask engine needs a scheduler: --scheduler tcp://HOST:PORT or local:N (or BULKLOAD_SCHEDULER)"
        )
    if not env.scheduler_ok(scheduler):
        raise UsageError(f"scheduler {scheduler!r} is not a Dask scheduler address: {env.SCHEDULER_FORMS}")
    local = scheduler.startswith("local:")
    if local:  # bounded like --workers: each is a process of this machine
        check_count("--scheduler local:N", int(scheduler[6:]), 1, MAX_WORKERS)
    connect, timeout = _connect(), env.dask_timeout()
    from distributed import Client

    with contextlib.ExitStack() as stack:
        if local:  # a cluster of its own, which a stop signal ends at once
            target = stack.enter_context(connect.local_cluster(int(scheduler[6:])))
        else:
            connect.probe(scheduler, timeout)
            target = scheduler
        try:
            dask_client = stack.enter_context(Client(target, timeout=max(timeout, 1.0)))  # type: ignore[no-untyped-call]
        except (OSError, TimeoutError) as e:
            raise EngineError(f"cannot reach the Dask scheduler at {scheduler}: {e}; {connect.ADVICE}") from None
        connect.wait_for_workers(dask_client, scheduler, timeout)
        yield dask_client, scheduler


def _connect() -> ModuleType:
    """infra/dask_connect.py (UsageError when dask[distributed] is not installed)."""
    try:  # imported here: dask is needed only when the engine is dask
        from ..infra import dask_connect
    except ImportError:
        raise UsageError("the dask engine needs dask[distributed]: pip install 'bulkload[dask]'") from None
    return dask_connect


def on_engine(
    dataset: str, call: Callable[[], R], client: Any = None, engine: str | None = None, scheduler: str | None = None
) -> R:
    """``call()`` on the executor that ``client`` / ``engine`` / ``scheduler`` choose (see the
    module docstring); a run off the local pool says so in its report (model/engine_keys.py:
    the keys of ``--json``)."""
    with engine_for(dataset, client, engine, scheduler) as ex:
        report = call()
        info = engine_info(ex)
    if info and isinstance(report, EngineKeys):
        tagged: R = report.with_engine(info)
        return tagged
    return report
