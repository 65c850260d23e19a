"""The site's build is strict: `make docs` (mkdocs build --strict, without --quiet, which would
hide the warnings from --strict) fails on a link to a missing page or heading, so a page
cannot point at something that is not there; and every design note is in the nav."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"
ENV = dict(os.environ, NO_MKDOCS_2_WARNING="1", DISABLE_MKDOCS_2_WARNING="true")


def _copy_site(tmp_path: Path) -> Path:
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(REPO / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _build(root: Path) -> subprocess.CompletedProcess:
    command = [str(MKDOCS), "build", "--strict", "--site-dir", str(root / "out")]
    return subprocess.run(command, cwd=root, env=ENV, capture_output=True, text=True, timeout=120)


def test_make_docs_builds_strictly_and_shows_warnings():
    recipe = re.search(r"^docs:.*\n\t(.*)$", (REPO / "Makefile").read_text(), re.M).group(1)
    assert "mkdocs build --strict" in recipe
    assert not re.search(r"\s(--quiet|-q)\b", recipe)


def test_a_link_to_a_missing_heading_or_page_fails_the_build(tmp_path):
    root = _copy_site(tmp_path)
    concepts = root / "docs" / "concepts.md"
    text = concepts.read_text()
    concepts.write_text(text + "\n[load](reference/cli.md#bulkload-lode), [a page](no-such-page.md)\n")
    p = _build(root)
    assert p.returncode != 0 and "bulkload-lode" in p.stderr and "no-such-page.md" in p.stderr
    concepts.write_text(text + "\n[load](reference/cli.md#bulkload-load), [errors](reference/errors.md#usageerror)\n")
    (root / "docs" / "design" / "zz-spill.md").write_text("# Spilling to disk\n\nA design note.\n")
    p = _build(root)
    assert p.returncode == 0, p.stderr
    # a design note the nav does not name joins its Design section (docs/_gen/hooks.py)
    assert re.search(
        r'href="[./]*design/zz-spill/"[^>]*>\s*(<[^>]+>\s*)*Spilling to disk', (root / "out" / "index.html").read_text()
    )
