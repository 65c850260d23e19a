"""mkdocs-gen-files script (mkdocs.yml): write the generated reference pages (reference.py)."""

import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import PAGES

for path, page in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(page())
