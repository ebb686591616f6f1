"""Bounds on arguments (guard.limits) and validation whose work does not grow with what was sent."""

from __future__ import annotations

from typing import Any

import pytest

import guard.validation as validation
from guard.limits import RULE, ArgumentLimits, check_arguments
from guard.models import FieldProblem
from guard.validation import MAX_PROBLEMS, ArgumentValidator

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "body": {"type": "string"}},
    "required": ["id"],
    "additionalProperties": False,
}


class CountingDict(dict[str, Any]):
    """A dict that counts how many of its members were visited."""

    visited = 0

    def items(self) -> Any:
        for pair in super().items():
            CountingDict.visited += 1
            yield pair


@pytest.fixture
def problems_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many FieldProblems validation built (patched into guard.validation)."""
    made = [0]

    class Counted(FieldProblem):
        def __init__(self, **data: Any) -> None:
            made[0] += 1
            super().__init__(**data)

    monkeypatch.setattr(validation, "FieldProblem", Counted)
    return made


def wide(keys: int) -> dict[str, Any]:
    return {"id": "n1", **{f"k{i:05d}": "x" * 8 for i in range(keys)}}


def test_many_unexpected_keys_list_a_bounded_number_of_problems(problems_made: list[int]) -> None:
    failure = ArgumentValidator(SCHEMA).check("put_note", wide(3000))
    assert failure is not None
    assert len(failure.fields) == MAX_PROBLEMS + 1
    assert failure.fields[-1].problem == f"and {3000 - MAX_PROBLEMS} more unexpected argument(s)"
    assert failure.fields[0].field == "k00000" and failure.fields[0].problem == "unexpected argument"
    assert problems_made[0] <= MAX_PROBLEMS + 1, "work must not grow with the number of extra keys"


def test_many_wrong_values_are_deduplicated_and_capped(problems_made: list[int]) -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    failure = ArgumentValidator(schema).check("t", {f"k{i}": "no" for i in range(500)})
    assert failure is not None
    assert len(failure.fields) == MAX_PROBLEMS + 1
    assert failure.fields[-1].problem == f"and {500 - MAX_PROBLEMS} more problem(s)"


def test_the_issue_payload_is_refused_by_the_key_limit_without_walking_it() -> None:
    CountingDict.visited = 0
    payload = CountingDict(wide(16_000))
    failure = check_arguments("put_note", payload)
    assert failure is not None and failure.rule == RULE
    assert failure.fields[0].problem == "more than 4096 keys and items in all"
    assert "limits.max_argument_keys" in failure.fields[0].expected
    assert CountingDict.visited == 0


def test_the_walk_stops_at_the_key_limit() -> None:
    CountingDict.visited = 0
    payload = {"rows": [CountingDict({f"c{j}": j for j in range(100)}) for _ in range(1000)]}
    failure = check_arguments("t", payload, ArgumentLimits(max_keys=1000))
    assert failure is not None and "more than 1000 keys" in failure.fields[0].problem
    assert CountingDict.visited <= 1000


def test_depth_limit_names_the_path() -> None:
    value: Any = "leaf"
    for _ in range(40):
        value = {"a": value}
    failure = check_arguments("t", {"doc": value})
    assert failure is not None
    assert failure.fields[0].problem == "nested deeper than 32 levels"
    assert failure.fields[0].field.startswith("doc.a.a")
    assert "limits.max_argument_depth" in failure.fields[0].expected


def test_arrays_count_towards_depth_and_keys() -> None:
    value: Any = 1
    for _ in range(5):
        value = [value]
    assert check_arguments("t", {"v": value}, ArgumentLimits(max_depth=6)) is None
    failure = check_arguments("t", {"v": value}, ArgumentLimits(max_depth=5))
    assert failure is not None and failure.fields[0].field == "v[0][0][0][0]"


def test_size_limit_counts_utf8_bytes() -> None:
    assert check_arguments("t", {"body": "é" * 400}, ArgumentLimits(max_bytes=820)) is None
    failure = check_arguments("t", {"body": "é" * 400}, ArgumentLimits(max_bytes=800))
    assert failure is not None
    assert failure.fields[0].problem == "811 bytes of JSON, over the limit of 800"
    assert "limits.max_argument_bytes" in failure.fields[0].expected


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"body": "ok \ud800 no"}, "body"),
        ({"nested": {"list": ["fine", "\udfff"]}}, "nested.list[1]"),
        ({"k\ud800": 1}, "k\\ud800"),
    ],
)
def test_lone_surrogates_are_refused_as_invalid_unicode(arguments: dict[str, Any], field: str) -> None:
    failure = check_arguments("t", arguments)
    assert failure is not None and failure.rule == RULE
    assert failure.fields[0].field == field
    assert "not valid Unicode" in failure.fields[0].problem
    failure.message.encode("utf-8")  # what the agent and the audit log get is valid UTF-8


def test_valid_unicode_and_ordinary_calls_pass() -> None:
    assert check_arguments("t", {"body": "naïve 日本 🙂", "n": 1, "items": [{"a": None}]}) is None
    assert check_arguments("t", {}) is None


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_keys must be positive"):
        ArgumentLimits(max_keys=0)
