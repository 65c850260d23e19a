"""The foundation packages type-check: mypy (the project's config in pyproject.toml, strict
on loader.model) reports no error in loader/model, loader/infra, loader/kinds and
loader/errors.py."""

from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ["loader/model", "loader/infra", "loader/kinds", "loader/errors.py"]


def test_model_infra_kinds_and_errors_have_no_type_errors():
    # the project's own mypy cache (.mypy_cache, as `make typecheck`): seconds when warm
    out, err, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--follow-imports=silent", *(str(ROOT / p) for p in CHECKED)]
    )
    assert status == 0, out + err
