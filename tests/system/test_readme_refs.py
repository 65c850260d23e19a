"""The README's promises cite the tests that prove them: every cited test file exists and
every cited test is defined in it (a moved or renamed test must update the README)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_test_the_readme_cites_exists():
    text = (REPO / "README.md").read_text()
    cited = re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", text)
    assert len(cited) >= 10  # the Guarantees section cites its tests
    missing = [
        f"{path}::{name}" if name else path
        for path, name in cited
        if not (REPO / path).is_file() or (name and not re.search(rf"def {name}\b", (REPO / path).read_text()))
    ]
    assert missing == []
