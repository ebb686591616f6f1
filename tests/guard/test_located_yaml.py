"""guard.located_yaml: the data, each key's line, block scalars' first content line, refusals."""

from __future__ import annotations

import pytest

from guard.located_yaml import DuplicateKeyError, YamlSyntaxError, compose_located

TEXT = """\
name: demo
checks:
  - id: one
    sql: |
      SELECT 1
  - id: two
"""


def test_lines_and_blocks() -> None:
    data, located = compose_located(TEXT)
    assert data == {"name": "demo", "checks": [{"id": "one", "sql": "SELECT 1\n"}, {"id": "two"}]}
    assert located.lines[("name",)] == 1
    assert located.lines[("checks", 0, "sql")] == 4
    assert located.lines[("checks", 1, "id")] == 6
    assert located.blocks == {("checks", 0, "sql"): 5}


def test_duplicate_key_names_its_path_and_second_line() -> None:
    with pytest.raises(DuplicateKeyError) as caught:
        compose_located("a:\n  b: 1\n  b: 2\n")
    assert caught.value.path == ("a", "b") and caught.value.line == 3


@pytest.mark.parametrize(("text", "line"), [("a: [1, 2\n", 2), ("a: b: c\n", 1)])
def test_syntax_error_names_the_line(text: str, line: int) -> None:
    with pytest.raises(YamlSyntaxError) as caught:
        compose_located(text)
    assert caught.value.line == line and "invalid YAML" in str(caught.value)


def test_empty_text_is_none_with_no_places() -> None:
    data, located = compose_located("")
    assert data is None and located.lines == {} and located.blocks == {}
