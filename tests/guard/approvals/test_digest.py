"""arguments_digest binds an approval to the exact call: key order is irrelevant, any value change is not."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from guard.approvals import arguments_digest

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
arguments = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: _shuffled(inner, rng) for key, inner in items}
    if isinstance(value, list):
        return [_shuffled(inner, rng) for inner in value]
    return value


@given(arguments, st.randoms(use_true_random=False))
def test_key_order_does_not_change_the_digest(args: dict[str, Any], rng: random.Random) -> None:
    assert arguments_digest("refund", _shuffled(args, rng)) == arguments_digest("refund", args)


@given(arguments, st.text(min_size=1, max_size=8), json_values)
def test_a_changed_argument_changes_the_digest(args: dict[str, Any], key: str, value: Any) -> None:
    changed = {**args, key: value}
    if changed != args:
        assert arguments_digest("refund", changed) != arguments_digest("refund", args)


@given(arguments)
def test_the_tool_is_part_of_the_digest(args: dict[str, Any]) -> None:
    assert arguments_digest("refund", args) != arguments_digest("refund_all", args)
