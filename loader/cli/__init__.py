"""The `bulkload` command. ``main`` is its console script's entry point (pyproject.toml).

Start-up and stop signals: until a command's own handling takes over
(infra/interrupts.stop_on_signals, in cli/main.handle_errors), SIGINT, SIGTERM and SIGHUP
end the process at once with one line and exit 128 + N - nothing has been done yet -
instead of a KeyboardInterrupt traceback out of a half-done import (typer, numpy and the
stages take ~50 ms to import). This package imports nothing, so the handlers are in place
as soon as the interpreter has imported ``loader``. (A signal before that - while Python
itself starts - is Python's: killed by SIGINT, or its own start-up error.)
"""

_NAMES = {2: "SIGINT", 15: "SIGTERM", 1: "SIGHUP"}


def _exit_at_start_up(signo, _frame) -> None:
    import os

    os.write(2, f"bulkload: error: interrupted by {_NAMES.get(signo, signo)}\n".encode())
    os._exit(128 + signo)


def main() -> None:
    """The `bulkload` command: quiet stop signals from here on, then cli/main.py's ``main``."""
    import _signal  # type: ignore[import-not-found]  # built in and already loaded: importing `signal` builds enums (~1 ms)

    for signo in _NAMES:
        _signal.signal(signo, _exit_at_start_up)
    from .main import main as run_command

    run_command()
