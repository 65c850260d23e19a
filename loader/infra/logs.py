"""Log lines on stderr: plain text for people, or JSON objects for log shippers.

The CLI sets the format once (``--log-format text|json``); everything that reports
progress or events calls `event`.
"""

from __future__ import annotations

import json
import sys
import time

FORMAT = "text"


def set_format(fmt: str) -> None:
    global FORMAT
    FORMAT = fmt


def event(message: str, level: str = "info", **fields) -> None:
    if FORMAT == "json":
        rec = {"ts": round(time.time(), 3), "level": level, "msg": message, **fields}
        print(json.dumps(rec, default=str), file=sys.stderr, flush=True)
    else:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} {message}", file=sys.stderr, flush=True)
