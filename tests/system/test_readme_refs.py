"""The README's and the documentation site's promises cite the tests that prove them: every
cited test file exists and every cited test is defined in it (a moved or renamed test must
update the page that cites it)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if "_gen" not in p.parts)]


def cited_tests(text: str) -> list[tuple[str, str]]:
    """(path, test name or "") of every tests/....py[::name] a page cites."""
    return re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", text)


def missing_citations(text: str) -> list[str]:
    """The citations of ``text`` whose file or test does not exist."""
    return [
        f"{path}::{name}" if name else path
        for path, name in cited_tests(text)
        if not (REPO / path).is_file() or (name and not re.search(rf"def {name}\b", (REPO / path).read_text()))
    ]


def test_every_test_the_readme_and_the_docs_cite_exists():
    assert sum(len(cited_tests(p.read_text())) for p in PAGES) >= 10  # the guarantees cite their tests
    missing = {p.relative_to(REPO).as_posix(): missing_citations(p.read_text()) for p in PAGES}
    assert {page: m for page, m in missing.items() if m} == {}


def test_the_docs_pages_are_checked_too():
    assert {"README.md", "docs/guarantees.md"} <= {p.relative_to(REPO).as_posix() for p in PAGES}


def test_a_citation_of_a_missing_test_or_file_is_found():
    text = (
        "Proved by `tests/system/test_readme_refs.py::test_the_docs_pages_are_checked_too`,\n"
        "`tests/system/test_readme_refs.py::no_such_test` and `tests/no/such_file.py`.\n"
    )
    assert missing_citations(text) == ["tests/system/test_readme_refs.py::no_such_test", "tests/no/such_file.py"]
