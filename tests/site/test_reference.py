"""The generated reference pages (docs/_gen/reference.py) cover the code they are generated
from: every command and option of the `bulkload` app, every public function of ``loader``,
every error class of loader/errors.py (with its cause, fix and exit code) and every message
of its table, every section and key of a pipeline file. A new one cannot go undocumented."""

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _reference():
    spec = importlib.util.spec_from_file_location("docs_reference", REPO / "docs" / "_gen" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _reference()


def test_every_command_argument_and_option_is_in_the_cli_reference():
    page = ref.cli_page()
    commands = ref.cli_commands()
    assert {path for path, _ in commands} >= {"bulkload", "bulkload load", "bulkload runs list", "bulkload runs prune"}
    for path, command in commands:
        assert f"## `{path}`" in page
        section = page.split(f"## `{path}`", 1)[1].split("\n## ", 1)[0]
        for p in command.params:
            if p.param_type_name == "argument":
                assert f"`{p.name.upper()}`" in section, (path, p.name)
            else:
                for opt in [*p.opts, *p.secondary_opts]:
                    assert f"`{opt}`" in section, (path, opt)
            if p.help:
                assert ref.cell(ref.plain(p.help)) in section, (path, p.name)


def test_every_public_function_and_report_is_in_the_api_reference():
    import loader

    page = ref.api_page()
    for name in loader.__all__:
        if not name.startswith("_"):
            assert f'heading: "loader.{name}"' in page, name
    for path in [*ref.REPORTS, ref.READER]:
        assert f"::: {path}" in page
        module, _, attr = path.rpartition(".")
        assert hasattr(importlib.import_module(module), attr), path  # a moved class fails here, not in mkdocs


def test_every_error_class_has_its_cause_fix_and_exit_code_in_the_errors_reference():
    from loader import errors

    classes = ref.error_classes()
    assert errors.BulkloadError in classes and errors.Interrupted in classes and len(classes) >= 40
    assert ref.undocumented(classes) == []
    page = ref.errors_page()
    for cls in classes:
        section = page.split(f"\n### {cls.__name__}\n", 1)[1].split("\n### ", 1)[0]
        assert f"Exit code **{ref.exit_code_of(cls)}**" in section
        assert ref.exit_code_of(cls) in {"1", "2", "3", "128 + N"}
        assert f"**Fix:** {cls.fix}" in section


def test_an_error_class_without_its_own_cause_or_fix_is_found():
    from loader.errors import UsageError

    class NoFix(UsageError):
        """A cause, but the fix is only inherited."""

    class NoCause(UsageError):
        fix = "a fix"

    assert ref.undocumented([NoFix, NoCause, UsageError]) == ["NoFix", "NoCause"]


def test_every_message_of_the_errors_table_is_in_the_errors_reference():
    from loader import errors

    page = ref.errors_page()
    classes = set(ref.error_classes())
    assert len(errors.MESSAGES) >= 100  # the README's table, moved here
    for m in errors.MESSAGES:
        assert m.error in classes or (m.error is None and m.exit_code is not None), m
        assert m.message.strip() and m.cause.strip() and m.fix.strip(), m
        row = f"| {ref.cell(m.message)} |"
        assert row in page, m.message
        assert f"{ref.cell(m.cause)} | {ref.cell(m.fix)} |" in page.split(row, 1)[1].split("\n", 1)[0]
    for code, _ in errors.EXIT_CODES:
        assert f"| {code} |" in page


@pytest.mark.parametrize("section", ["job", "load", "ingest", "compact", "finalize", "query"])
def test_every_key_of_a_pipeline_file_is_in_the_pipeline_reference(section):
    from loader.api.pipeline import SCHEMA

    page = ref.pipeline_page()
    assert f"## `[{section}]`" in page
    part = page.split(f"## `[{section}]`", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `(\w+)` \|", part, re.M)) == set(SCHEMA[section])
