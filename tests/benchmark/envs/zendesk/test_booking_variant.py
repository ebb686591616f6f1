"""The booking (StayBridge) zendesk variant on a real Environment: tag filtering, refund default, OData."""

from __future__ import annotations

from benchmark.envs import Environment
from benchmark.envs.zendesk.variant import booking_ticket_tags
from tests.support.envs import call, create_item, domain_fixture, error_of, record, update_item

BOOKING = "external_booking_v1"
TICKETS = "zendesk_tickets"


domain = domain_fixture(BOOKING)


def test_booking_ticket_tags_drop_ignored_case_insensitively_and_sort() -> None:
    tags = ["zeta", "VIP-Customer", "Alpha", "repeat-issue", "alpha", "b", "Hotel-Partner-Escalation", "b"]
    assert booking_ticket_tags(tags) == ["Alpha", "alpha", "b", "b", "zeta"]


def test_create_ticket_stores_filtered_tags_but_echoes_the_sent_ones(env: Environment) -> None:
    sent = ["vip-customer", "check-in-upcoming", "b2c-customer", "Repeat-Issue"]
    item = create_item(env, "tickets", {"subject": "Change dates", "status": "open", "tags": sent})["item"]
    assert item["id"] == "13"  # 12 default tickets
    assert item["tags"] == sent
    assert item["refund_amount"] == 0.0
    row = record(env, TICKETS, "13")
    assert row["tags"] == ["b2c-customer", "check-in-upcoming"]
    assert row["refund_amount"] == 0.0


def test_create_ticket_without_tags_or_refund_gets_empty_tags_and_zero_refund(env: Environment) -> None:
    item = create_item(env, "tickets", {"subject": "S", "refund_amount": None})["item"]
    assert (item["tags"], item["refund_amount"], item["status"]) == ([], 0.0, "new")
    kept = create_item(env, "tickets", {"subject": "T", "refund_amount": 42})
    assert kept["item"]["refund_amount"] == 42.0
    assert record(env, TICKETS, "14")["refund_amount"] == 42.0


def test_create_does_not_default_refund_on_other_tables(env: Environment) -> None:
    item = create_item(env, "users", {"name": "Ann", "email": "ann@example.com"})["item"]
    assert item["id"] == "7"
    assert "refund_amount" not in item
    assert "tags" not in item


def test_create_rejects_invalid_status(env: Environment) -> None:
    message = error_of(
        env, "zendesk_create_item", {"table": "tickets", "item": {"subject": "S", "status": "bad"}}
    )
    assert message.startswith(
        "Tool execution failed: Input validation failed: item.TicketCreateInput.status: Input should be"
    )
    assert env.table(TICKETS).count() == 12


def test_update_filters_sent_tags_ignores_nulls_and_sets_custom_fields(env: Environment) -> None:
    item = update_item(
        env,
        "tickets",
        "TCK-10000001",
        {
            "tags": ["hotel-partner-escalation", "date-change"],
            "priority": None,
            "resolution_action": "escalated-hotel",
            "refund_amount": 12.5,
        },
    )["item"]
    assert item["tags"] == ["hotel-partner-escalation", "date-change"]
    assert (item["priority"], item["resolution_action"], item["refund_amount"]) == (
        "high",
        "escalated-hotel",
        12.5,
    )
    assert item["updated_at"] == "2025-10-01T13:00:10Z"
    row = record(env, TICKETS, "TCK-10000001")
    assert row["tags"] == ["date-change"]
    assert row["priority"].value == "high"


def test_update_without_tags_shows_the_stored_tags_and_null_tags_keep_them(env: Environment) -> None:
    item = update_item(env, "tickets", "TCK-10000002", {"tags": None})["item"]
    assert item["tags"] == ["refund", "cancellation"]
    assert record(env, TICKETS, "TCK-10000002")["tags"] == ["refund", "cancellation"]


def test_update_unknown_ticket_errors(env: Environment) -> None:
    assert error_of(
        env, "zendesk_update_item", {"table": "tickets", "id": "13", "item": {"status": "open"}}
    ) == ("Tool execution failed: Item with ID '13' not found in table 'tickets'")


def test_get_items_uses_the_real_ne_ge_le_comparators(env: Environment) -> None:
    out = call(
        env,
        "zendesk_get_items",
        {"table": "tickets", "$filter": "status ne 'open' and priority ge 'normal'", "$select": "id"},
    )
    assert [item["id"] for item in out["items"]] == [
        "TCK-10000002",
        "TCK-10000003",
        "TCK-10000004",
        "TCK-10000008",
    ]
    low = call(
        env, "zendesk_get_items", {"table": "tickets", "$filter": "priority le 'low'", "$select": "id"}
    )
    # enum values compare as text: "high" < "low"
    assert [item["id"] for item in low["items"]] == [
        "TCK-10000001",
        "TCK-10000006",
        "TCK-10000007",
        "TCK-10000009",
        "TCK-10000012",
    ]


def test_search_articles_has_no_articles(env: Environment) -> None:
    assert env.table("zendesk_articles").count() == 0
    assert call(env, "zendesk_search_articles", {"query": "refund"}) == {"results": []}
