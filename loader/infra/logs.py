"""Log lines on stderr: plain text for people, or JSON objects for log shippers.

The CLI sets the format once (``--log-format text|json``); everything that reports
progress or events calls `event` (or `note`, which a quiet job silences - but never its
warnings and errors), and the CLI's last line of a failed command is `error_line`. With
``json`` every line bulkload writes on stderr is one JSON object (``ts``, ``level``,
``msg``, fields): progress, warnings and the final error alike.
"""

from __future__ import annotations

import json
import sys
import time
import warnings

FORMAT = "text"


def set_format(fmt: str) -> None:
    global FORMAT
    FORMAT = fmt
    if fmt == "json":  # a library's warning (warnings.warn) is a JSON line too
        warnings.showwarning = _show_warning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    event(f"{category.__name__}: {message}", "warning", source=f"{filename}:{lineno}")


def event(message: str, level: str = "info", **fields) -> None:
    if FORMAT == "json":
        rec = {"ts": round(time.time(), 3), "level": level, "msg": message, **fields}
        print(json.dumps(rec, default=str), file=sys.stderr, flush=True)
    else:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} {message}", file=sys.stderr, flush=True)


#: levels a quiet job still logs: quiet means no progress, never no warnings
ALWAYS = ("warning", "error")


def note(quiet: bool, message: str, level: str = "info", **fields) -> None:
    """`event`, unless ``quiet`` and the line is only progress (level info)."""
    if not quiet or level in ALWAYS:
        event(message, level, **fields)


def error_line(text: str, **fields) -> None:
    """A command's error on stderr: ``bulkload: error: TEXT``, or (json) an object of level error."""
    plain(f"bulkload: error: {text}", text, "error", **fields)


def plain(line: str, message: str, level: str, **fields) -> None:
    """``line`` on stderr as it is, or (json) `event` ``message`` at ``level``."""
    if FORMAT == "json":
        event(message, level, **fields)
    else:
        print(line, file=sys.stderr, flush=True)
