"""The auto-insurance (HorizonShield) zendesk variant on a real Environment: the status violation log."""

from __future__ import annotations

from benchmark.envs import Environment
from tests.support.envs import (
    call,
    create_item,
    domain_fixture,
    error_of,
    record,
    records,
    stored,
    update_item,
)

AUTO = "sandbox_auto_insurance"
TICKETS = "zendesk_tickets"
VIOLATIONS = "zendesk_ticket_status_violations"


domain = domain_fixture(AUTO)


def test_create_ticket_in_a_non_open_status_logs_a_violation(env: Environment) -> None:
    item = create_item(
        env,
        "tickets",
        {
            "subject": "Extension granted",
            "status": "pending",
            "request_category": "Billing & Payments",
        },
    )["item"]
    assert (item["id"], item["status"], item["request_category"]) == ("6", "pending", "Billing & Payments")
    assert list(item)[-7:] == [
        "request_category",
        "claims_action_type",
        "effective_date_of_change",
        "internal_review_type",
        "outcome_summary",
        "escalation_level",
        "user_type",
    ]
    violation = stored(env, VIOLATIONS, "VIOLATION-6")  # 5 default rows
    assert violation == {
        "id": "VIOLATION-6",
        "ticket_id": "6",
        "created_status": "pending",
        "created_at": "2025-10-01T13:00:05Z",
    }


def test_create_ticket_without_status_is_new_and_logged(env: Environment) -> None:
    create_item(env, "tickets", {"subject": "S"})
    create_item(env, "tickets", {"subject": "T", "status": "closed"})
    logged = [(v["ticket_id"], v["created_status"].value) for v in records(env, VIOLATIONS)[5:]]
    assert logged == [("6", "new"), ("7", "closed")]


def test_open_tickets_other_tables_and_updates_log_nothing(env: Environment) -> None:
    create_item(env, "tickets", {"subject": "S", "status": "open"})
    create_item(env, "organizations", {"name": "Org"})
    item = update_item(env, "tickets", "6", {"status": "solved", "tags": None})["item"]
    assert (item["status"], item["tags"], item["updated_at"]) == ("solved", [], "2025-10-01T13:00:10Z")
    assert env.table(VIOLATIONS).count() == 5


def test_failed_create_logs_nothing(env: Environment) -> None:
    message = error_of(
        env, "zendesk_create_item", {"table": "tickets", "item": {"subject": "S", "status": "bad"}}
    )
    assert "item.TicketCreateInput.status: Input should be" in message
    assert "Unsupported table: 'groups'" in error_of(
        env, "zendesk_create_item", {"table": "groups", "item": {"subject": "S", "status": "pending"}}
    )
    assert env.table(TICKETS).count() == 5
    assert env.table(VIOLATIONS).count() == 5


def test_update_ignores_nulls(env: Environment) -> None:
    item = update_item(env, "tickets", "2", {"outcome_summary": None, "escalation_level": "Supervisor"})[
        "item"
    ]
    assert (item["outcome_summary"], item["escalation_level"]) == ("Pending – Internal Review", "Supervisor")
    assert record(env, TICKETS, "2")["escalation_level"] == "Supervisor"


def test_get_items_uses_the_real_ne_ge_le_comparators(env: Environment) -> None:
    users = call(
        env, "zendesk_get_items", {"table": "users", "$filter": "role ne 'end-user'", "$select": "id"}
    )
    assert users == {"items": [{"id": "2"}, {"id": "5"}]}
    window = call(
        env, "zendesk_get_items", {"table": "users", "$filter": "id gt '3' and id le '5'", "$select": "id"}
    )
    assert window == {"items": [{"id": "4"}, {"id": "5"}]}


def test_search_articles_over_the_auto_articles(env: Environment) -> None:
    results = call(env, "zendesk_search_articles", {"query": "Reinstatement Windows"})["results"]
    assert [a["id"] for a in results] == [10007]
    assert call(env, "zendesk_search_articles", {"query": "reinstatement", "category": 21}) == {"results": []}
