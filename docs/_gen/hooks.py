"""MkDocs hooks (mkdocs.yml): every design note docs/design/*.md is in the nav's "Design"
section, the ones the nav does not name added after those it does, by file name."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def on_config(config: Any) -> Any:
    docs = Path(config["docs_dir"])
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and "Design" in entry:
            section = entry["Design"]
            named = {next(iter(item.values())) if isinstance(item, dict) else item for item in section}
            for note in sorted((docs / "design").glob("*.md")):
                rel = note.relative_to(docs).as_posix()
                if rel not in named:
                    title = note.read_text().partition("\n")[0].lstrip("# ").strip() or note.stem
                    section.append({title: rel})
    return config
