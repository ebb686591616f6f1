"""Lax mode reads a numeric string as its number under numeric bounds and ``multipleOf`` too: the type
check lets it through, so the bound must judge it (it used to compare a string with a number and
raise TypeError instead of answering)."""

from __future__ import annotations

from typing import Any

import pytest

from guard.validation import ArgumentValidator

SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 0, "maximum": 10},
        "x": {"type": "number", "exclusiveMinimum": 1, "multipleOf": 0.5},
        "free": {"minimum": 0},
    },
}


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"n": "5"}, None),
        ({"n": " 10 "}, None),
        ({"n": "-1"}, '"-1" fails minimum 0'),
        ({"n": "11"}, '"11" fails maximum 10'),
        ({"x": "1.5"}, None),
        ({"x": "1"}, '"1" fails exclusiveMinimum 1'),
        ({"x": "1.25"}, '"1.25" fails multipleOf 0.5'),
        ({"free": "-3"}, '"-3" fails minimum 0'),
        ({"free": "not a number"}, None),  # a string that holds no number is not a number to bound
        ({"x": "nan"}, 'wrong type: got a string "nan"'),
    ],
)
def test_numeric_strings_are_bounded_as_their_numbers_in_lax_mode(
    arguments: dict[str, Any], problem: str | None
) -> None:
    problems = ArgumentValidator(SCHEMA, "lax").problems(arguments)

    assert [p.problem for p in problems] == ([] if problem is None else [problem])


def test_strict_mode_still_refuses_the_string() -> None:
    problems = ArgumentValidator(SCHEMA, "strict").problems({"n": "5"})

    assert [p.field for p in problems] == ["n"]
