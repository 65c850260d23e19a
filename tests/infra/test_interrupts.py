"""A stop signal that arrives while Python runs a finalizer is delivered again, not raised
there: an exception raised in a ``__del__`` is printed as "Exception ignored" with a
traceback and dropped, so the stop was lost (infra/interrupts.py `_swallowing`)."""

import os
import signal
import subprocess
import sys
import textwrap

from loader.infra import interrupts


def test_a_frame_inside_a_finalizer_is_known_to_swallow_exceptions():
    seen = []

    def inner():
        seen.append(interrupts._swallowing(sys._getframe()))

    class Finalized:
        def __del__(self):
            seen.append(interrupts._swallowing(sys._getframe()))
            inner()

    Finalized()  # collected at once: its __del__ runs here
    assert seen == [True, True]
    assert interrupts._swallowing(sys._getframe()) is False


def test_sigint_inside_a_finalizer_still_stops_the_process_quietly():
    script = textwrap.dedent(
        """
        import os, signal, sys, time
        from loader.errors import Interrupted
        from loader.infra import interrupts

        with interrupts.stop_on_signals():
            class Finalized:
                def __del__(self):
                    os.kill(os.getpid(), signal.SIGINT)
                    for _ in range(1000):  # the handler runs at one of these
                        pass
            try:
                Finalized()
                time.sleep(5)
                print("not stopped")
            except Interrupted as e:
                print("stopped", e.signo)
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, env=os.environ)
    assert p.stdout.split() == ["stopped", str(int(signal.SIGINT))], p.stdout + p.stderr
    assert "Exception ignored" not in p.stderr and "Traceback" not in p.stderr, p.stderr
