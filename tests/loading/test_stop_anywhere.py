"""A stop signal can land between any two steps of the main thread: the code it interrupts
must still be able to stop.

CPython runs a signal handler at its next check point, and the CLI's raises ``Interrupted``
there (infra/interrupts.py) - also inside the standard library's Python-level locking,
e.g. ``Condition.__enter__`` right after it took a lock, which the ``with`` around it then
never releases. These tests raise the exception at every step the main thread executes
(``sys.settrace``: at each point where CPython runs a signal handler, one per trial) in the parts the
main thread runs while other threads work:

- the in-process load's consumer of its produce thread (`worker._Producer`): leaving it
  ends the thread, within seconds; once a queue.Queue here hung `bulkload load` on SIGTERM;
- a real in-process load (`load_worker`) stopped the same way: it raises, closes its
  shards, and its produce thread ends; a compressed one, whose tasks run as threads
  (executors.ThreadExecutor), stopped wherever its calling thread waits for them;
- a small finalize, whose phases run as threads of the calling process
  (executors.ThreadExecutor): no task thread outlives it. ``threading.Thread.start``
  stopped while its Condition held a lock once left the new thread waiting forever
  (infra/threads.py);
- the progress bar, whose redraw thread must end with it.

Each trial runs in a thread of its own (the tracer is per thread) so that a hang is a
failure after a few seconds, not a stuck suite.
"""

import _thread
import dis
import gc
import sys
import threading
import time

import pytest

from loader.loading.worker import _Producer

TRIAL_S = 5


class Stop(BaseException):
    """What the signal handler would raise (Interrupted is a KeyboardInterrupt)."""


#: where CPython 3.11 runs a pending signal handler: on entering a function (RESUME),
#: after a call returns (CALL) and at a loop's backward jump - not between any two opcodes
#: (a ``with`` on a C lock cannot be interrupted between taking it and its block)
CALL_OPS = {dis.opmap[name] for name in ("CALL", "CALL_FUNCTION", "CALL_METHOD") if name in dis.opmap}
JUMP_BACK = {dis.opmap[name] for name in ("JUMP_BACKWARD", "JUMP_ABSOLUTE") if name in dis.opmap}


def stop_at(n: int, files: tuple[str, ...]):
    """A tracer that raises Stop at the ``n``-th point where a signal handler could run,
    in frames of ``files``; its ``.state["seen"]`` counts those points."""
    state = {"seen": 0}
    last: dict[int, int] = {}  # frame -> the offset of its last opcode

    def tracer(frame, event, arg):
        if not frame.f_code.co_filename.endswith(files):
            return None
        frame.f_trace_opcodes = True
        point = event == "call"
        if event == "opcode":
            code = frame.f_code.co_code
            prev = last.get(id(frame))
            point = code[frame.f_lasti] in JUMP_BACK or (prev is not None and code[prev] in CALL_OPS)
            last[id(frame)] = frame.f_lasti
        elif event == "return":
            last.pop(id(frame), None)
        if point:
            state["seen"] += 1
            if state["seen"] == n:
                last.pop(id(frame), None)
                raise Stop
        return tracer

    tracer.state = state
    return tracer


def trial(body, tracer) -> tuple[bool, object]:
    """Run ``body()`` traced in a thread; (ended in time, its outcome or error)."""
    out: dict = {}

    def run():
        sys.settrace(tracer)
        try:
            out["result"] = body()
        except BaseException as e:
            out["result"] = e
        finally:
            sys.settrace(None)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(TRIAL_S)
    return not t.is_alive(), out.get("result")


SYNC = ("threading.py", "queue.py", "loading/worker.py", "infra/threads.py")


def consume(items: int):
    """Iterate a _Producer of ``items`` batches to its end; its thread after the ``with``."""

    def body():
        with _Producer(iter(range(items))) as produced:
            for _ in produced:
                time.sleep(0)  # let the producer run ahead: the bound is reached
        return produced

    return body


def events_of(body, files: tuple[str, ...] = SYNC) -> int:
    tracer = stop_at(-1, files)
    ended, result = trial(body, tracer)
    assert ended and not isinstance(result, BaseException), result
    return tracer.state["seen"]


def test_the_producer_stops_whatever_step_the_stop_lands_on():
    body = consume(12)
    total = events_of(body)
    assert total > 50  # the trace does reach the hand-off's steps
    stopped = 0
    for n in range(1, total + 1):
        ended, result = trial(body, stop_at(n, SYNC))
        assert ended, f"leaving the producer hung after a stop at step {n} of {total}"
        if isinstance(result, Stop):
            stopped += 1
            continue
        assert isinstance(result, _Producer), result  # ran to its end: the stop came after
        assert result.ended(TRIAL_S)
    assert stopped > total // 2


def test_a_stopped_producer_thread_ends():
    """The stop lands while the producer waits for room: it ends with the ``with``."""
    started = threading.Event()

    def batches():
        for i in range(100):
            started.set()
            yield i

    with pytest.raises(Stop), _Producer(batches()) as produced:
        started.wait(1)
        time.sleep(0.05)  # the bound is reached: the thread waits for room
        raise Stop
    assert produced.ended(TRIAL_S)


#: (compression, the files of the calling thread's steps, fewest steps, fewest stopped trials):
#: uncompressed, the tasks run in turn in the calling thread (the load worker's hand-off);
#: lz4, a thread each (executors.ThreadExecutor): the calling thread waits for them
IN_PROCESS_CASES = [
    ("none", ("loading/worker.py", "queue.py", "threading.py", "infra/threads.py"), 50, 100),
    ("lz4", ("infra/executors.py", "threading.py", "infra/threads.py"), 8, 4),
]


@pytest.mark.parametrize("compression, files, fewest, fewest_stopped", IN_PROCESS_CASES)
def test_an_in_process_load_stopped_at_any_hand_off_step_stops_and_resumes(
    tmp_path, compression, files, fewest, fewest_stopped
):
    """A real in-process load (2 shards, 30 batches) under the same stops, at every point in
    the load worker's module and the locking it uses: each ends in time with the stop (a
    KeyboardInterrupt, as Ctrl-C raises from Python) or its report, leaves no produce
    thread, and the same load afterwards gives the uninterrupted records."""
    import loader

    src, records = "gen://scidb96?n=30000", 30000
    want_uri = f"lmdb://{tmp_path}/want"
    loader.load(src, want_uri, shards=2, batch_records=1000, compression=compression)
    with loader.open(want_uri) as ds:
        want = ds.read_records().tobytes()

    def body(uri):
        return lambda: loader.load(src, uri, shards=2, batch_records=1000, compression=compression)

    tracer = stop_at(-1, files)
    ended, report = trial(body(f"lmdb://{tmp_path}/count"), tracer)
    assert ended and report.in_process, report
    total = tracer.state["seen"]
    assert total > fewest, total
    baseline = _thread._count()
    step = max(1, total // 150)  # ~150 trials, spread over the whole load
    stopped = 0
    for n in range(1, total + 1, step):
        uri = f"lmdb://{tmp_path}/t{n}"
        ended, result = trial(body(uri), _raising(stop_at(n, files), KeyboardInterrupt))
        assert ended, f"the load hung after a stop at point {n} of {total}"
        assert not isinstance(result, BaseException) or isinstance(result, KeyboardInterrupt), result
        stopped += isinstance(result, KeyboardInterrupt)
        assert threads_settle(baseline), f"a thread outlived the load stopped at point {n}"
        # a stop that lands in load_worker's closing ``finally`` leaves the rest of its
        # shards to be closed by the store objects' __del__, once the caller drops the
        # exception (its traceback holds them); Python cannot make a finally uninterruptible
        del result
        gc.collect()
        loader.load(src, uri, shards=2, batch_records=1000, compression=compression)
        with loader.open(uri) as ds:
            assert ds.records == records and ds.read_records().tobytes() == want, n
    assert stopped > fewest_stopped, f"only {stopped} trials were stopped"


def threads_settle(baseline: int) -> bool:
    """Whether the threads of this process (``_thread``'s count) return to ``baseline``."""
    deadline = time.monotonic() + TRIAL_S
    while _thread._count() > baseline and time.monotonic() < deadline:
        time.sleep(0.01)
    return _thread._count() <= baseline


def _raising(tracer, exc_type):
    """``tracer`` raising ``exc_type`` instead of Stop."""

    def wrapped(frame, event, arg):
        try:
            inner = tracer(frame, event, arg)
        except Stop:
            raise exc_type from None
        return None if inner is None else wrapped

    return wrapped


def test_a_small_finalize_stopped_at_any_step_of_its_threads_stops_and_reruns(tmp_path):
    """A small finalize runs its phases' tasks as threads of this process
    (executors.ThreadExecutor), the calling thread starting and joining them: stopped at
    every point of that (~100 trials, also inside ``threading``'s Event and Condition), each
    ends in time with the stop or its report, leaves no task thread behind, and the same
    finalize afterwards gives the array an uninterrupted one gives."""
    import shutil

    import loader
    from loader.arrays.finalize import finalize

    base = tmp_path / "base"
    loader.load("gen://scidb96?n=20000", f"lmdb://{base}", shards=2, batch_records=2000)
    box = {"i0": (0, 10), "i1": (5000, 5300)}

    def fresh(name: str) -> str:
        shutil.copytree(base, tmp_path / name)
        return f"lmdb://{tmp_path / name}"

    def body(uri):
        return lambda: finalize(uri, dims="i0:10,i1:4000", workers=2)

    uri = fresh("want")
    finalize(uri, dims="i0:10,i1:4000", workers=2)
    with loader.open(uri) as ds:
        want = ds.read_box(**box)
    files = ("infra/executors.py", "infra/threads.py", "threading.py", "queue.py")
    tracer = stop_at(-1, files)
    ended, report = trial(body(fresh("count")), tracer)
    assert ended and report.in_process, report
    total = tracer.state["seen"]
    assert total > 20
    baseline = _thread._count()
    step = max(1, total // 100)
    stopped = 0
    for n in range(1, total + 1, step):
        uri = fresh(f"t{n}")
        ended, result = trial(body(uri), _raising(stop_at(n, files), KeyboardInterrupt))
        assert ended, f"the finalize hung after a stop at point {n} of {total}"
        assert not isinstance(result, BaseException) or isinstance(result, KeyboardInterrupt), result
        stopped += isinstance(result, KeyboardInterrupt)
        assert threads_settle(baseline), f"a task thread outlived the finalize stopped at point {n}"
        finalize(uri, dims="i0:10,i1:4000", workers=2)
        with loader.open(uri) as ds:
            assert ds.read_box(**box).equals(want), n
    assert stopped > total // (2 * step), f"only {stopped} trials were stopped"


def test_a_progress_bar_stopped_at_any_step_ends_with_its_refresh_thread():
    """The progress bar on a terminal (infra/progress.py) redraws from a thread of its own:
    stopped at every point of the main thread's part - starting it, advancing, stopping -
    each trial ends in time and the thread ends with it, or once the caller drops the
    interrupted Progress. (rich's own refresh thread is stopped through an Event, whose
    Condition a stop can leave locked, and the join then waits forever; on that code this
    walk found the refresh thread outliving the bar.)"""
    from loader.infra.progress import Progress

    def body():
        with Progress("load", 1000, 96, mode="bar") as p:
            for _ in range(5):
                p.advance(100)
                time.sleep(0.02)
        return p

    files = ("threading.py", "infra/progress.py", "infra/threads.py", "rich/live.py")
    total = events_of(body, files)
    assert total > 20
    baseline = _thread._count()
    step = max(1, total // 150)
    for n in range(1, total + 1, step):
        ended, result = trial(body, stop_at(n, files))
        assert ended, f"the progress bar hung after a stop at point {n} of {total}"
        del result  # (a stop on the first step of __exit__ skips it: the thread ends with the object)
        gc.collect()
        assert threads_settle(baseline), f"its refresh thread outlived a stop at point {n}"
