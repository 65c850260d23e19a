"""The examples' runner (tests/site/code_blocks.py) on small synthetic pages: it fails on a
broken block, naming its line and showing its stderr, runs a page's blocks in order in one
directory, runs only python and shell blocks, honours no-run markers (with a reason), and
refuses a malformed page."""

import pytest
from code_blocks import ExampleError, parse, run_page

BROKEN = """# A page

Text.

```python
print("fine")
```

```python
import sys
sys.exit("this example is broken")
```
"""


def test_a_broken_block_fails_the_page_naming_its_line_and_stderr(tmp_path):
    with pytest.raises(ExampleError) as e:
        run_page(BROKEN, tmp_path, "docs/broken.md")
    assert "docs/broken.md, line 9" in str(e.value)
    assert "this example is broken" in str(e.value)


def test_a_failing_command_inside_a_shell_pipeline_fails_the_block(tmp_path):
    page = "```sh\nfalse | cat\necho after\n```\n"
    with pytest.raises(ExampleError, match="line 1"):
        run_page(page, tmp_path)
    with pytest.raises(ExampleError, match="line 1"):
        run_page("```bash\necho $UNSET_VARIABLE_OF_THE_TEST\n```\n", tmp_path)


def test_blocks_of_a_page_run_in_order_in_one_directory(tmp_path):
    page = (
        "```sh\nbulkload generate 10 --out recs.bin\n```\n\n"
        "```python\nimport os\nassert os.path.getsize('recs.bin') == 960\nopen('seen', 'w').write('ok')\n```\n\n"
        '```shell\ntest "$(cat seen)" = ok\n```\n'
    )
    ran = run_page(page, tmp_path)
    assert [b.lang for b, _ in ran] == ["sh", "python", "shell"]
    assert (tmp_path / "seen").read_text() == "ok"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recs.bin", "seen"]  # no scripts left behind


def test_only_python_and_shell_blocks_run(tmp_path):
    page = "```console\n$ exit 1\n```\n\n```toml\nx = 1\n```\n\n```text\nexit 1\n```\n\n```\nexit 1\n```\n"
    assert [b.lang for b in parse(page)] == ["console", "toml", "text", ""]
    assert run_page(page, tmp_path) == []


def test_a_no_run_block_is_skipped_and_needs_a_reason(tmp_path):
    page = "<!-- no-run: runs forever -->\n```sh\nexit 1\n```\n"
    (block,) = parse(page)
    assert block.no_run == "runs forever" and not block.runs
    assert run_page(page, tmp_path) == []
    with pytest.raises(ExampleError, match="needs a reason"):
        parse("<!-- no-run -->\n```sh\nexit 1\n```\n")
    with pytest.raises(ExampleError, match="line before"):
        parse("<!-- no-run: stray -->\n\n```sh\nexit 1\n```\n")


def test_an_unclosed_fence_fails_the_page():
    with pytest.raises(ExampleError, match="line 3: the block opened here is never closed"):
        parse("# x\n\n```python\nprint(1)\n")


def test_a_python_block_runs_as_a_saved_script_with_the_venv(tmp_path):
    page = (
        "```python\nimport sys, loader\nprint(__name__)\n"
        "assert sys.prefix != sys.base_prefix  # the venv's python\nopen('name', 'w').write(__name__)\n```\n"
    )
    run_page(page, tmp_path)
    assert (tmp_path / "name").read_text() == "__main__"


def test_an_indented_block_of_a_list_item_runs(tmp_path):
    page = "1. Step:\n\n    ```sh\n    echo hi > out\n    ```\n"
    run_page(page, tmp_path)
    assert (tmp_path / "out").read_text() == "hi\n"
