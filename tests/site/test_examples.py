"""Every example of the documentation runs: each ``python`` and ``sh`` block of README.md and
of docs/**/*.md, page by page, in order, in one fresh working directory per page (the
convention: tests/site/code_blocks.py). A failure names the page, the block's line and its
stderr."""

from pathlib import Path

import pytest
from code_blocks import ExampleError, parse, run_page

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if "_gen" not in p.parts)]


def test_the_pages_are_found():
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    assert {"README.md", "docs/index.md", "docs/getting-started.md", "docs/guides/layouts.md"} <= names


@pytest.mark.timeout(900)  # a page of several blocks on a loaded machine; each block has its own limit
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_example_of_the_page_runs(page, tmp_path):
    name = page.relative_to(REPO).as_posix()
    text = page.read_text()
    try:
        parse(text, name)  # a malformed page (an unclosed fence, a marker without a reason) fails too
        run_page(text, tmp_path, name)
    except ExampleError as e:  # the page, the block's line, its stderr: no traceback of the runner
        pytest.fail(str(e), pytrace=False)
