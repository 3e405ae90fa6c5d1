"""The doc-test harness's reading of markdown (tests/support/doc_blocks.py): what runs,
what must be marked, and that a mistake in the markers fails instead of skipping."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_blocks import (
    Block,
    DocTestError,
    Marker,
    check_runnable,
    collect,
    console_commands,
    make_commands,
    markdown_files,
    parse,
    required_commands,
    setup_code,
    sql_statements,
)


def one(text: str) -> Block:
    (block,) = parse(text, "doc.md")
    return block


def test_blocks_with_their_language_line_and_code() -> None:
    text = "# t\n\n```python\nprint(1)\n```\n\ntext\n\n~~~sh\necho hi\n~~~\n\n````\nraw ``` inside\n````\n"
    blocks = parse(text, "doc.md")
    assert [(b.line, b.language, b.code) for b in blocks] == [
        (3, "python", "print(1)\n"),
        (9, "sh", "echo hi\n"),
        (13, "", "raw ``` inside\n"),
    ]
    assert blocks[0].id == "doc.md:3" and blocks[0].marker is None


def test_a_marker_applies_to_the_next_fence_across_blank_lines() -> None:
    block = one(
        '<!-- doc-test: skip reason="needs a Kubernetes cluster" -->\n\n```sh\nkubectl get pods\n```\n'
    )
    assert block.marker == Marker("skip", {"reason": "needs a Kubernetes cluster"})
    check_runnable(block)  # marked: nothing to complain about


def test_markers_inside_a_block_are_its_content() -> None:
    block = one("```html\n<!-- doc-test: output -->\n```\n")
    assert block.marker is None
    with pytest.raises(DocTestError, match="no runner for a html block"):
        check_runnable(block)


@pytest.mark.parametrize("language", ["ts", "go", "java", "yaml", ""])
def test_an_unmarked_block_without_a_runner_fails(language: str) -> None:
    with pytest.raises(DocTestError, match=r"doc\.md:1: no runner .*doc-test: skip reason="):
        check_runnable(one(f"```{language}\nsomething\n```\n"))


@pytest.mark.parametrize("language", ["python", "py", "sh", "bash", "shell", "console", "sql"])
def test_languages_with_a_runner_need_no_marker(language: str) -> None:
    check_runnable(one(f"```{language}\nsomething\n```\n"))


@pytest.mark.parametrize(
    ("marker", "error"),
    [
        ("<!-- doc-test: skip -->", 'skip needs reason="..."'),
        ('<!-- doc-test: skip reason="" -->', 'skip needs reason="..."'),
        ('<!-- doc-test: dry-run reason="  " -->', 'dry-run needs reason="..."'),
        ("<!-- doc-test: requires -->", 'requires needs commands="..."'),
        ('<!-- doc-test: ignore reason="x" -->', "unknown marker kind 'ignore'"),
        ('<!-- doc-test: output reason="x" -->', "output takes no option reason"),
        ("<!-- doc-test skip -->", "malformed marker"),
        ("<!-- doc-test: skip reason=unquoted -->", "malformed marker"),
    ],
)
def test_a_wrong_marker_is_an_error(marker: str, error: str) -> None:
    with pytest.raises(DocTestError, match=error.replace("(", r"\(").replace(".", r"\.")):
        parse(f"{marker}\n```sh\necho\n```\n", "doc.md")


@pytest.mark.parametrize(
    "text",
    [
        '<!-- doc-test: skip reason="x" -->\nSome text.\n\n```sh\necho\n```\n',
        '<!-- doc-test: skip reason="x" -->\n',
        '<!-- doc-test: skip reason="x" -->\n<!-- doc-test: output -->\n```sh\necho\n```\n',
    ],
)
def test_a_marker_before_no_fence_is_an_error(text: str) -> None:
    with pytest.raises(DocTestError, match=r"doc\.md:1: marker before no fence"):
        parse(text, "doc.md")


def test_an_unclosed_fence_is_an_error() -> None:
    with pytest.raises(DocTestError, match=r"doc\.md:2: a fence that is never closed"):
        parse("text\n```python\nprint(1)\n", "doc.md")


def test_markers_that_do_not_fit_the_block() -> None:
    with pytest.raises(DocTestError, match="dry-run checks make commands in sh blocks"):
        check_runnable(one('<!-- doc-test: dry-run reason="x" -->\n```python\nprint(1)\n```\n'))
    with pytest.raises(DocTestError, match="once applies to python blocks"):
        check_runnable(one('<!-- doc-test: once reason="x" -->\n```sh\necho\n```\n'))
    with pytest.raises(DocTestError, match="requires on a ts block"):
        check_runnable(one('<!-- doc-test: requires commands="node" -->\n```ts\nlet a = 1;\n```\n'))


def test_dry_run_takes_make_commands_only() -> None:
    block = one(
        '<!-- doc-test: dry-run reason="x" -->\n```sh\nmake run   # serve\n\nmake bench BENCH=full\n```\n'
    )
    assert make_commands(block) == [["run"], ["bench", "BENCH=full"]]
    other = one('<!-- doc-test: dry-run reason="x" -->\n```sh\nmake run\npython -m bench\n```\n')
    with pytest.raises(DocTestError, match="dry-run checks make commands only"):
        make_commands(other)


def test_console_blocks_run_their_dollar_lines() -> None:
    block = one("```console\n$ echo one \\\n  two\none two\n$ true\n```\n")
    assert console_commands(block) == "echo one \\\n  two\ntrue\n"
    with pytest.raises(DocTestError, match="without `\\$ ` commands"):
        console_commands(one("```console\njust output\n```\n"))


def test_a_fence_in_a_list_item_loses_its_indentation() -> None:
    block = one("1. Run:\n\n   ```python\n   if True:\n       print(1)\n   ```\n")
    assert block.code == "if True:\n    print(1)\n"


def test_sql_statements() -> None:
    code = (
        "-- a table\nCREATE TABLE t (a int);\n\n-- a guarded write:\n"
        "INSERT INTO t VALUES ($1)\n  ON CONFLICT DO NOTHING;\n-- 0 rows: a zombie.\n"
    )
    assert sql_statements(code) == [
        "-- a table\nCREATE TABLE t (a int)",
        "-- a guarded write:\nINSERT INTO t VALUES ($1)\n  ON CONFLICT DO NOTHING",
    ]


def test_every_markdown_file_outside_hidden_and_build_folders(tmp_path: Path) -> None:
    for name in ("README.md", "docs/a.md", "docs/deep/b.md", ".venv/x.md", "build/y.md", "node_modules/z.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("```sh\necho\n```\n")
    assert [str(p.relative_to(tmp_path)) for p in markdown_files(tmp_path)] == [
        "README.md",
        "docs/a.md",
        "docs/deep/b.md",
    ]


def test_a_file_with_a_broken_marker_becomes_an_error_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "good.md").write_text("```sh\necho\n```\n")
    (tmp_path / "bad.md").write_text("<!-- doc-test: nope -->\n```sh\necho\n```\n")
    items = collect(tmp_path)
    assert [type(i).__name__ for i in items] == ["DocTestError", "Block"]
    assert "bad.md:1: unknown marker kind 'nope'" in str(items[0])


def test_setup_blocks_are_readme_shell_blocks_run_before_every_shell_block() -> None:
    readme = parse(
        "<!-- doc-test: setup -->\n```sh\n. .venv/bin/activate\n```\n\n```sh\nls\n```\n", "README.md"
    )
    for block in readme:
        check_runnable(block)
    assert setup_code([*readme, *parse("```sh\nregroup --help\n```\n", "docs/cli.md")]) == (
        ". .venv/bin/activate\n"
    )
    elsewhere = parse("<!-- doc-test: setup -->\n```sh\n. .venv/bin/activate\n```\n", "docs/cli.md")
    with pytest.raises(DocTestError, match=r"setup marks sh blocks of README\.md"):
        check_runnable(elsewhere[0])
    python = parse("<!-- doc-test: setup -->\n```python\nimport os\n```\n", "README.md")
    with pytest.raises(DocTestError, match="setup marks sh blocks"):
        check_runnable(python[0])


def test_once_may_name_the_commands_it_needs() -> None:
    block = one('<!-- doc-test: once reason="starts Spark" commands="java" -->\n```python\nx = 1\n```\n')
    check_runnable(block)
    assert required_commands(block) == ["java"]
    assert required_commands(one('<!-- doc-test: requires commands="curl jq" -->\n```sh\nx\n```\n')) == [
        "curl",
        "jq",
    ]
    assert required_commands(one('<!-- doc-test: once reason="slow" -->\n```python\nx = 1\n```\n')) == []
    with pytest.raises(DocTestError, match="skip takes no option commands"):
        one('<!-- doc-test: skip reason="x" commands="java" -->\n```sh\nx\n```\n')
