"""The stable-state hash: property tests against an independent statement of the reference algorithm."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from benchmark.envs.hashing import stable_rows, stable_state, state_delta, state_hash
from benchmark.envs.schema import build_table

MODEL: dict[str, Any] = {
    "model": "Thing",
    "module": "demo.models",
    "id_field": "id",
    "extra": None,
    "unstable_extra": False,
    "has_id_field": True,
    "default_rows": 0,
    "fields": {
        "id": {"type": "str", "required": True, "default": None, "unstable": False, "enum": None},
        "amount": {"type": "float", "required": False, "default": "0.0", "unstable": False, "enum": None},
        "price": {"type": "Decimal", "required": False, "default": None, "unstable": False, "enum": None},
        "at": {
            "type": "Optional[datetime]",
            "required": False,
            "default": None,
            "unstable": False,
            "enum": None,
        },
        "tags": {
            "type": "List[str]",
            "required": False,
            "default": "'factory:[]'",
            "unstable": False,
            "enum": None,
        },
        "note": {"type": "str", "required": False, "default": "''", "unstable": True, "enum": None},
    },
}
NO_ID = {
    **MODEL,
    "id_field": "sku",
    "has_id_field": False,
    "fields": {
        "sku": MODEL["fields"]["id"],
        "qty": {"type": "int", "required": True, "default": None, "unstable": False, "enum": None},
    },
}
THING = build_table("things", MODEL)
ITEM = build_table("items", NO_ID)


def reference_hash(state: dict[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(state, sort_keys=True, separators=(",", ":")).encode("utf-8")
    ).hexdigest()


ids = st.text(alphabet="0123456789ab", min_size=1, max_size=3)


@given(
    st.lists(
        st.tuples(ids, st.floats(allow_nan=False, allow_infinity=False), st.lists(st.text(max_size=3))),
        max_size=8,
    )
)
def test_rows_sorted_by_string_id_and_lists_sorted(rows: list[tuple[str, float, list[str]]]) -> None:
    raw = [THING.validate_row({"id": i, "amount": a, "tags": t, "note": "x"}) for i, a, t in rows]
    stable = stable_rows(THING, raw)
    assert [r["id"] for r in stable] == sorted((r["id"] for r in raw), key=str)
    assert all("note" not in r for r in stable)
    assert all(r["tags"] == sorted(r["tags"]) for r in stable)


@given(st.permutations(["b", "a", "10", "6", "1"]))
def test_hash_independent_of_insertion_order_for_id_tables(order: list[str]) -> None:
    rows = [THING.validate_row({"id": i}) for i in order]
    base = [THING.validate_row({"id": i}) for i in ["1", "10", "6", "a", "b"]]
    assert state_hash(stable_state({"things": THING}, {"things": rows})) == state_hash(
        stable_state({"things": THING}, {"things": base})
    )


def test_tables_without_id_keep_store_order() -> None:
    a = [ITEM.validate_row({"sku": "B", "qty": 1}), ITEM.validate_row({"sku": "A", "qty": 2})]
    assert [r["sku"] for r in stable_rows(ITEM, a)] == ["B", "A"]
    assert state_hash({"items": stable_rows(ITEM, a)}) != state_hash({"items": stable_rows(ITEM, a[::-1])})


def test_ids_sort_as_strings() -> None:
    rows = [THING.validate_row({"id": i}) for i in ["6", "10", "9"]]
    assert [r["id"] for r in stable_rows(THING, rows)] == ["10", "6", "9"]


def test_number_and_date_rendering_follow_pydantic_json_mode() -> None:
    row = THING.validate_row({"id": "1", "amount": 435, "price": "890.00", "at": "2025-10-01T13:00:05+00:00"})
    assert row["amount"] == 435.0 and isinstance(row["amount"], float)
    assert row["price"] == "890.00"
    assert row["at"] == "2025-10-01T13:00:05Z"
    assert THING.validate_row({"id": "1", "price": 450.00})["price"] == "450.0"
    assert THING.validate_row({"id": "1", "at": "2025-10-01"})["at"] == "2025-10-01T00:00:00"
    assert (
        THING.validate_row({"id": "1", "at": "2025-10-01T13:00:05.123+02:00"})["at"]
        == "2025-10-01T13:00:05.123000+02:00"
    )
    text = json.dumps({"things": stable_rows(THING, [row])}, sort_keys=True, separators=(",", ":"))
    assert '"amount":435.0' in text


@given(st.dictionaries(st.sampled_from(["z", "a", "m"]), st.integers(), min_size=1))
def test_hash_independent_of_key_order(fields: dict[str, int]) -> None:
    forward = {"t": [dict(sorted(fields.items()))]}
    backward = {"t": [dict(sorted(fields.items(), reverse=True))]}
    assert state_hash(forward) == state_hash(backward) == reference_hash(forward)


def test_hash_ensures_ascii() -> None:
    assert (
        state_hash({"t": [{"s": "Open – Initial"}]})
        == hashlib.sha256(b'{"t":[{"s":"Open \\u2013 Initial"}]}').hexdigest()
    )


def test_unstable_fields_do_not_change_the_hash() -> None:
    a = stable_state({"things": THING}, {"things": [THING.validate_row({"id": "1", "note": "a"})]})
    b = stable_state({"things": THING}, {"things": [THING.validate_row({"id": "1", "note": "b"})]})
    assert state_hash(a) == state_hash(b)


def test_state_delta_reports_added_removed_changed() -> None:
    before = {"things": [{"id": "1", "amount": 1.0}, {"id": "2", "amount": 2.0}]}
    after = {"things": [{"id": "1", "amount": 5.0}, {"id": "3", "amount": 3.0}]}
    delta = state_delta(before, after, {"things": THING})
    assert delta == {
        "things": {
            "added": [{"id": "3", "amount": 3.0}],
            "removed": [{"id": "2", "amount": 2.0}],
            "changed": [{"key": "1", "changes": {"amount": [1.0, 5.0]}}],
        }
    }
    assert state_delta(before, before) == {}
