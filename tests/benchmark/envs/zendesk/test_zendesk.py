"""The retail zendesk tools on a real Environment (default rows, SQLite in memory)."""

from __future__ import annotations

from typing import Any

from benchmark.envs import Environment
from benchmark.envs.zendesk import odata
from benchmark.envs.zendesk.variant import ODATA_COMPARATORS, RETAIL_COMPARATORS
from tests.support.envs import call, create_item, error_of, record, stored, update_item

TICKETS = "zendesk_tickets"
USERS = "zendesk_users"
TICKET_COMMENTS = "zendesk_ticket_comments"


def ids(out: dict[str, Any]) -> list[Any]:
    return [item["id"] for item in out["items"]]


# -- get_tables / get_item -------------------------------------------------------------------------


def test_get_tables_lists_the_table_enum_without_legacy_comments(env: Environment) -> None:
    tables = call(env, "zendesk_get_tables", {"unexpected_param": 1})["value"]
    assert len(tables) == 18
    assert {"Name": "group_memberships", "DisplayName": "Group Memberships"} in tables
    assert "comments" not in [t["Name"] for t in tables]


def test_get_item_returns_the_full_row_with_nulls(env: Environment) -> None:
    item = call(env, "zendesk_get_item", {"table": "tickets", "id": "1"})["item"]
    assert item["subject"] == "Printer not working"
    assert item["status"] == "open"
    assert "due_at" in item and item["due_at"] is None


def test_get_item_finds_int_keyed_ticket_comments_by_string_id(env: Environment) -> None:
    item = call(env, "zendesk_get_item", {"table": "ticket_comments", "id": "23118465221916"})["item"]
    assert item["id"] == 23118465221916
    assert item["ticket_id"] == 1


def test_get_item_errors_name_the_enum_member_or_the_unsupported_value(env: Environment) -> None:
    assert error_of(env, "zendesk_get_item", {"table": "users", "id": "nope"}) == (
        "Tool execution failed: Item with ID 'nope' not found in table 'TableName.USERS'"
    )
    assert error_of(env, "zendesk_get_item", {"table": "groups", "id": "1"}) == (
        "Tool execution failed: Unsupported table: 'groups'. "
        "Only tickets, users, organizations, comments, and ticket_comments are supported."
    )


# -- get_items -------------------------------------------------------------------------------------


def test_get_items_filter_accepts_the_bare_alias(env: Environment) -> None:
    out = call(env, "zendesk_get_items", {"table": "users", "filter": "email eq 'admin@example.com'"})
    assert ids(out) == ["5"]
    assert call(env, "zendesk_get_items", {"table": "users", "$filter": "email eq 'x@y'"}) == {"items": []}


def test_get_items_retail_ne_ge_le_keep_every_row(env: Environment) -> None:
    every = ids(call(env, "zendesk_get_items", {"table": "tickets"}))
    for flt in ("status ne 'open'", "priority ge 'zzz'", "created_at le '2000-01-01'"):
        assert ids(call(env, "zendesk_get_items", {"table": "tickets", "$filter": flt})) == every


def test_get_items_literals_compare_like_the_reference(env: Environment) -> None:
    strings = call(env, "zendesk_get_items", {"table": "users", "$filter": "id gt '3'", "$select": "id"})
    assert ids(strings) == ["4", "5"]
    booleans = call(env, "zendesk_get_items", {"table": "users", "$filter": "verified eq true"})
    assert booleans == {"items": []}  # the Boolean literal stays the text "true"
    ints = call(env, "zendesk_get_items", {"table": "ticket_comments", "$filter": "ticket_id eq 2"})
    assert ids(ints) == [23118465221917]
    either = "status eq 'pending' or (status eq 'new' and priority eq 'low')"
    assert ids(call(env, "zendesk_get_items", {"table": "tickets", "$filter": either})) == ["2", "4"]


def test_get_items_orders_pages_and_selects_in_field_order(env: Environment) -> None:
    out = call(
        env,
        "zendesk_get_items",
        {"table": "tickets", "$orderby": "created_at desc", "$top": 2, "$select": "updated_at,id"},
    )
    assert out["items"] == [
        {"id": "1", "updated_at": "2025-01-15T10:00:00Z"},
        {"id": "2", "updated_at": "2025-01-15T09:15:00Z"},
    ]
    by_priority = call(
        env, "zendesk_get_items", {"table": "tickets", "$orderby": "priority", "$skip": 1, "$top": 3}
    )
    assert ids(by_priority) == ["5", "4", "3"]  # enum values sort as text; ties keep store order


def test_get_items_unsortable_orderby_keeps_store_order(env: Environment) -> None:
    every = ids(call(env, "zendesk_get_items", {"table": "tickets"}))
    assert ids(call(env, "zendesk_get_items", {"table": "tickets", "$orderby": "due_at desc"})) == every


def test_get_items_errors(env: Environment) -> None:
    assert error_of(env, "zendesk_get_items", {"table": "tickets", "$filter": "status eq"}) == (
        "Tool execution failed: Failed to parse OData filter: "
        "Failed to parse at: Token(type='WS', value=' ', lineno=1, index=6)"
    )
    assert error_of(env, "zendesk_get_items", {"table": "tickets", "$filter": "due_at gt 'x'"}) == (
        "Tool execution failed: Failed to parse OData filter: "
        "'>' not supported between instances of 'NoneType' and 'str'"
    )
    assert "Unsupported table: 'articles'" in error_of(env, "zendesk_get_items", {"table": "articles"})
    assert "$top: Input should be less than or equal to 1000" in error_of(
        env, "zendesk_get_items", {"table": "tickets", "$top": 1001}
    )


def test_other_variants_use_the_real_comparator_classes(env: Environment) -> None:
    rows = env.table(TICKETS).all()
    assert len(odata.apply_filter(rows, "status ne 'open'", RETAIL_COMPARATORS)) == len(rows)
    kept = odata.apply_filter(rows, "status ne 'open'", ODATA_COMPARATORS)
    assert [r.model_dump()["id"] for r in kept] == ["2", "3", "4"]


# -- create / update / delete ----------------------------------------------------------------------


def test_create_ticket_counts_ids_and_fills_defaults(env: Environment) -> None:
    item = create_item(env, "tickets", {"subject": "Broken", "tags": None})["item"]
    assert item == {
        "id": "6",
        "subject": "Broken",
        "description": None,
        "status": "new",
        "priority": None,
        "type": None,
        "requester_id": None,
        "assignee_id": None,
        "organization_id": None,
        "tags": [],
        "created_at": "2025-10-01T13:00:05Z",
        "updated_at": "2025-10-01T13:00:05Z",
        "due_at": None,
    }
    assert record(env, TICKETS, "6")["subject"] == "Broken"


def test_create_ticket_comment_gets_numeric_id_key_and_html(env: Environment) -> None:
    item = create_item(env, "ticket_comments", {"ticket_id": 1, "author_id": 2, "body": "Hi"})["item"]
    assert item["id"] == 23118465221916 + 5
    assert item["key"] == "23118465221921"
    assert item["html_body"] == '<div class="zd-comment" dir="auto"><p dir="auto">Hi</p></div>'
    assert "updated_at" not in item
    assert env.table(TICKET_COMMENTS).count() == 6


def test_create_rejects_invalid_status_and_unsupported_tables(env: Environment) -> None:
    message = error_of(
        env, "zendesk_create_item", {"table": "tickets", "item": {"subject": "S", "status": "bad"}}
    )
    assert message.startswith(
        "Tool execution failed: Input validation failed: item.TicketCreateInput.status: "
        "Input should be 'new', 'open', 'pending', 'hold', 'solved' or 'closed'; "
        "item.UserCreateInput.name: Field required"
    )
    assert "Unsupported table: 'groups'" in error_of(
        env, "zendesk_create_item", {"table": "groups", "item": {"subject": "S"}}
    )
    assert env.table(TICKETS).count() == 5


def test_create_after_delete_can_collide_with_an_existing_id(env: Environment) -> None:
    env.apply_patch({TICKETS: [{"id": "6", "subject": "Patched", "created_at": "x", "updated_at": "x"}]})
    assert call(env, "zendesk_delete_item", {"table": "tickets", "id": "1"}) == {"success": True}
    assert error_of(env, "zendesk_create_item", {"table": "tickets", "item": {"subject": "New"}}) == (
        "Tool execution failed: Object with ID 6 already exists"
    )
    assert record(env, TICKETS, "6")["subject"] == "Patched"


def test_update_ticket_applies_sent_values_and_null_tags_clear(env: Environment) -> None:
    item = update_item(env, "tickets", "1", {"status": "solved", "priority": None, "tags": None})["item"]
    assert (item["status"], item["priority"], item["tags"]) == ("solved", "high", [])
    assert item["updated_at"] == "2025-10-01T13:00:10Z"
    row = record(env, TICKETS, "1")
    assert row["status"].value == "solved" and row["tags"] == []


def test_update_with_invalid_nested_enum_only_touches_updated_at(env: Environment) -> None:
    before = stored(env, TICKETS, "1")
    item = update_item(env, "tickets", "1", {"status": "not_a_valid_status", "organization_id": None})["item"]
    assert item == {**before, "updated_at": "2025-10-01T13:00:10Z"}


def test_update_other_tables_stamp_the_create_time(env: Environment) -> None:
    item = update_item(env, "users", "3", {"phone": "+1-555-9999"})["item"]
    assert (item["phone"], item["updated_at"]) == ("+1-555-9999", "2025-10-01T13:00:05Z")


def test_update_errors(env: Environment) -> None:
    assert error_of(
        env, "zendesk_update_item", {"table": "tickets", "id": "99", "item": {"status": "open"}}
    ) == ("Tool execution failed: Item with ID '99' not found in table 'tickets'")
    assert error_of(env, "zendesk_update_item", {"table": "ticket_comments", "id": "1", "item": {}}) == (
        "Tool execution failed: The value is not updatable. Ticket comments cannot be modified."
    )


def test_delete_removes_the_row(env: Environment) -> None:
    assert call(env, "zendesk_delete_item", {"table": "users", "id": "2"}) == {"success": True}
    assert not env.table(USERS).exists("2")
    assert env.table(USERS).count() == 4


def test_delete_errors(env: Environment) -> None:
    assert error_of(env, "zendesk_delete_item", {"table": "users", "id": "2x"}) == (
        "Tool execution failed: Item with ID '2x' not found in table 'TableName.USERS'"
    )
    assert error_of(env, "zendesk_delete_item", {"table": "ticket_comments", "id": "23118465221916"}) == (
        "Tool execution failed: The value is not updatable. Ticket comments cannot be deleted."
    )
    assert env.table(TICKET_COMMENTS).count() == 5


# -- search_articles -------------------------------------------------------------------------------


def search(env: Environment, **args: Any) -> list[int]:
    return [a["id"] for a in call(env, "zendesk_search_articles", args)["results"]]


def test_search_articles_keyword_rules(env: Environment) -> None:
    assert search(env, query='"Reward Points"') == [10003]
    assert search(env, query="Warranty -Coverage") == [10004]
    assert search(env, query="Restocking -Fees") == []
    assert search(env, query="Reward Points Program Rules zzqx") == [10003]  # 4 of 5 terms >= ceil(0.4 * 5)
    assert search(env, query="Warranty", category=23) == [10005]
    assert search(env, query="Warranty", label_names="installation, nothing") == [10004]


def test_search_articles_validates_input(env: Environment) -> None:
    assert error_of(env, "zendesk_search_articles", {"query": None}) == (
        "Tool execution failed: Input validation failed: query: Input should be a valid string"
    )
