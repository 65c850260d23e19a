"""executors.ThreadExecutor: the tasks of a run as threads of the calling process.

Its promise: the run returns the receipts in task order, or raises the first task's error
once every thread has ended - also when the other tasks wait for each other at a
``threading.Barrier`` among their extras (the small finalize's build workers do) and the
one that failed will never arrive there. No thread outlives the run. (And the threads
themselves, infra/threads.TaskThread, keep an escaping error rather than print it.)
"""

import _thread
import threading

import pytest

from loader.errors import WorkerError
from loader.infra.executors import ThreadExecutor
from tests.loading.test_stop_anywhere import threads_settle


def _meet(task, outbox, barrier):
    if task == "fail":
        raise ValueError("task failed before the barrier")
    barrier.wait()
    return task


def test_tasks_that_meet_at_a_barrier_return_their_receipts_in_order():
    barrier = threading.Barrier(3)
    assert ThreadExecutor().run(_meet, ["a", "b", "c"], extras=[(barrier,)] * 3) == ["a", "b", "c"]


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_a_task_failing_before_the_barrier_fails_the_run_instead_of_hanging_the_others(failing):
    baseline = _thread._count()
    tasks = ["ok"] * 3
    tasks[failing] = "fail"
    barrier = threading.Barrier(3)
    out: dict = {}

    def run():
        try:
            out["r"] = ThreadExecutor().run(_meet, tasks, extras=[(barrier,)] * 3)
        except BaseException as e:
            out["r"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the run hung: a task waits at the barrier for the one that failed"
    assert isinstance(out["r"], WorkerError) and "task failed before the barrier" in str(out["r"]), out["r"]
    assert threads_settle(baseline)


def test_a_task_thread_keeps_an_escaping_error_instead_of_printing_it(capfd):
    from loader.infra.threads import TaskThread

    def body():
        raise ValueError("boom")

    t = TaskThread(body)
    assert t.ended(0)  # not started yet: nothing to wait for
    t.start()
    assert t.ended(5)
    assert isinstance(t.error, ValueError)
    assert "Traceback" not in capfd.readouterr().err
