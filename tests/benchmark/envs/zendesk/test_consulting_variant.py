"""The consulting (Meridian Strategy Group) zendesk variant on a real Environment.

Ticket tags are lists stored as sent; a ticket created in a status other than open is logged as a
violation; an int ``organization_id`` never reaches the User row through the tools.
"""

from __future__ import annotations

from benchmark.envs import Environment
from tests.support.envs import call, create_item, domain_fixture, error_of, record, stored, update_item

CONSULTING = "sandbox_consulting"
TICKETS = "zendesk_tickets"
USERS = "zendesk_users"
VIOLATIONS = "zendesk_ticket_status_violations"
CUSTOM_FIELDS = [
    "engagement_code",
    "approval_required",
    "approver_id",
    "asset_id",
    "catalog_id",
    "client_id",
    "expense_report_id",
    "course_id",
    "folder_id",
    "device_type",
    "hardware_order_id",
    "access_type",
    "license_pool",
]


domain = domain_fixture(CONSULTING)


def test_create_ticket_keeps_tags_as_sent_and_logs_a_non_open_status(env: Environment) -> None:
    item = create_item(
        env,
        "tickets",
        {
            "subject": "Laptop refresh",
            "status": "pending",
            "tags": ["Hardware_Request", "approval"],
            "engagement_code": "ENG-1234567",
        },
    )["item"]
    assert (item["id"], item["tags"], item["engagement_code"]) == (
        "6",
        ["Hardware_Request", "approval"],
        "ENG-1234567",
    )
    assert list(item)[-len(CUSTOM_FIELDS) :] == CUSTOM_FIELDS
    assert record(env, TICKETS, "6")["tags"] == ["Hardware_Request", "approval"]
    assert stored(env, VIOLATIONS, "VIOLATION-6") == {
        "id": "VIOLATION-6",
        "ticket_id": "6",
        "created_status": "pending",
        "created_at": "2025-10-01T13:00:05Z",
    }


def test_open_create_and_updates_log_nothing(env: Environment) -> None:
    created = create_item(
        env, "tickets", {"subject": "Access", "status": "open", "assignee_id": "157", "tags": None}
    )["item"]
    assert (created["status"], created["tags"]) == ("open", [])
    updated = update_item(env, "tickets", "6", {"status": "solved", "tags": None, "client_id": "CL-1"})[
        "item"
    ]
    assert (updated["status"], updated["tags"], updated["client_id"], updated["assignee_id"]) == (
        "solved",
        [],
        "CL-1",
        "157",
    )
    assert updated["updated_at"] == "2025-10-01T13:00:10Z"
    assert env.table(VIOLATIONS).count() == 5


def test_string_tags_are_refused(env: Environment) -> None:
    message = error_of(
        env,
        "zendesk_create_item",
        {"table": "tickets", "item": {"subject": "S", "tags": "a,b", "status": "new"}},
    )
    assert "item.TicketCreateInput.tags: Input should be a valid list" in message
    assert env.table(VIOLATIONS).count() == 5


def test_user_organization_id_is_text(env: Environment) -> None:
    user = create_item(
        env, "users", {"name": "Dana Cole", "email": "dana.cole@msg.com", "organization_id": "2"}
    )["item"]
    assert (user["id"], user["organization_id"]) == ("6", "2")
    assert record(env, USERS, "6")["organization_id"] == "2"


def test_int_user_organization_id_falls_to_another_input_and_fails(env: Environment) -> None:
    message = error_of(
        env,
        "zendesk_create_item",
        {"table": "users", "item": {"name": "Dana Cole", "email": "d@msg.com", "organization_id": 2}},
    )
    assert message.startswith(
        "Tool execution failed: Failed to create item: 1 validation error for User\nemail"
    )
    assert env.table(USERS).count() == 5


def test_ticket_comments_cannot_be_updated(env: Environment) -> None:
    message = error_of(
        env, "zendesk_update_item", {"table": "ticket_comments", "id": "1", "item": {"body": "x"}}
    )
    assert message == "Tool execution failed: The value is not updatable. Ticket comments cannot be modified."


def test_search_articles_over_the_consulting_articles(env: Environment) -> None:
    results = call(env, "zendesk_search_articles", {"query": "per diem"})["results"]
    assert [a["id"] for a in results] == [10001]
    assert call(env, "zendesk_search_articles", {"query": "per diem", "section": 1}) == {"results": []}
