"""The runner of the documentation's code blocks (README.md and docs/**/*.md).

The convention (the site's shared plan): a fenced block tagged ``python`` runs as a script
saved in the page's working directory, with the venv's python (no ``__main__`` guard, no
imports from tests); one tagged ``sh``, ``bash`` or ``shell`` runs with ``bash -euo
pipefail`` and the venv's bin/ first on PATH. Every other tag (``text``, ``toml``,
``console``, ``json``, ``c``, none) is not run. The blocks of one page run in order in one
fresh working directory, so a later block may use what an earlier one wrote. A block that
must not run is preceded, on the line before its fence, by ``<!-- no-run: REASON -->``
(the reason is required). Each block must exit 0; the first that does not fails the page
with its line number, its exit code and its stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RUN_LANGS = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
#: seconds one block may take (the examples use small data: a few seconds each)
BLOCK_TIMEOUT = 180
BIN = Path(sys.executable).parent

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
_NO_RUN = re.compile(r"^\s*<!--\s*no-run\b(?P<rest>.*?)-->\s*$")


class ExampleError(AssertionError):
    """A page's block failed, or the page breaks the convention (an unclosed fence, a
    no-run marker without a reason or without a block after it)."""


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    lang: str  # the first word of the info string, lower case ("" when none)
    code: str
    no_run: str | None  # the reason given by a <!-- no-run: REASON --> marker, else None

    @property
    def runs(self) -> bool:
        return self.lang in RUN_LANGS and self.no_run is None


def _lang(info: str) -> str:
    word = info.strip().split(maxsplit=1)[0] if info.strip() else ""
    return word.strip("{}").lstrip(".").lower()


def parse(text: str, name: str = "page") -> list[Block]:
    """The fenced blocks of a Markdown page, in order. Raises ExampleError for an unclosed
    fence or a misplaced or reasonless no-run marker."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        marker = _NO_RUN.match(lines[i])
        if marker:
            reason = marker.group("rest").strip().lstrip(":").strip()
            if not reason:
                raise ExampleError(f"{name}, line {i + 1}: a no-run marker needs a reason: <!-- no-run: REASON -->")
            if i + 1 >= len(lines) or not _FENCE.match(lines[i + 1]):
                raise ExampleError(f"{name}, line {i + 1}: a no-run marker must be on the line before a block's fence")
        if not m:
            i += 1
            continue
        indent, fence = m.group("indent"), m.group("fence")
        start = i
        body: list[str] = []
        i += 1
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        while i < len(lines) and not closing.match(lines[i]):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        if i >= len(lines):
            raise ExampleError(f"{name}, line {start + 1}: the block opened here is never closed")
        previous = _NO_RUN.match(lines[start - 1]) if start > 0 else None
        reason = previous.group("rest").strip().lstrip(":").strip() if previous else None
        blocks.append(Block(start + 1, _lang(m.group("info")), "\n".join(body) + "\n", reason))
        i += 1
    return blocks


def _tail(text: str, limit: int = 4000) -> str:
    text = text.strip()
    return text if len(text) <= limit else "...\n" + text[-limit:]


def run_block(block: Block, workdir: Path, name: str = "page") -> float:
    """Run one runnable block in ``workdir``; its seconds. Raises ExampleError when it fails."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(BIN.parent))
    env.pop("PYTHONPATH", None)  # as a user's shell: nothing of the test run's own path
    if RUN_LANGS[block.lang] == "python":
        script = workdir / f".example_line{block.line}.py"
        command = [str(BIN / "python"), script.name]
    else:
        script = workdir / f".example_line{block.line}.sh"
        command = ["bash", "-euo", "pipefail", script.name]
    script.write_text(block.code)
    start = time.monotonic()
    try:
        p = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise ExampleError(f"{name}, line {block.line}: the {block.lang} block ran over {BLOCK_TIMEOUT} s") from e
    finally:
        script.unlink(missing_ok=True)
    if p.returncode != 0:
        raise ExampleError(
            f"{name}, line {block.line}: the {block.lang} block exited with {p.returncode}\n"
            f"--- block ---\n{block.code}--- stderr ---\n{_tail(p.stderr)}\n--- stdout ---\n{_tail(p.stdout)}"
        )
    return time.monotonic() - start


def run_page(text: str, workdir: Path, name: str = "page") -> list[tuple[Block, float]]:
    """Run every runnable block of a page in order in ``workdir``; (block, seconds) of each."""
    return [(b, run_block(b, workdir, name)) for b in parse(text, name) if b.runs]
