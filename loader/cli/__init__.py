"""The `bulkload` command. ``main`` is its console script's entry point (pyproject.toml).

Start-up and stop signals: until a command's own handling takes over
(infra/interrupts.stop_on_signals, in cli/main.handle_errors), SIGINT, SIGTERM and SIGHUP
end the process at once with one line and exit 128 + N - nothing has been done yet -
instead of a KeyboardInterrupt traceback out of a half-done import (typer, numpy and the
stages take ~50 ms to import). This package imports nothing, so the handlers are in place
as soon as the interpreter has imported ``loader``. (A signal before that - while Python
itself starts - is Python's: killed by SIGINT, or its own start-up error.)
"""


def _exit_at_start_up(signo, _frame) -> None:
    import os
    import signal

    os.write(2, f"bulkload: error: interrupted by {signal.Signals(signo).name}\n".encode())
    os._exit(128 + signo)


def main() -> None:
    """The `bulkload` command: quiet stop signals from here on, then cli/main.py's ``main``."""
    import signal

    for signo in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signo, _exit_at_start_up)
    from .main import main as run_command

    run_command()
