"""The neobank (Velocity Digital Bank) zendesk variant on a real Environment.

Tags and domain names arrive as comma-separated strings; stored ticket tags are lower-cased and
sorted; a ticket created in a status other than open is logged as a violation.
"""

from __future__ import annotations

from benchmark.envs import Database, Domain, Environment
from benchmark.envs.zendesk.variant import neobank_item, neobank_ticket_tags
from benchmark.tasks import BenchData, Task
from tests.support.envs import (
    call,
    create_item,
    domain_fixture,
    error_of,
    record,
    records,
    stored_rows,
    update_item,
)

NEOBANK = "sandbox_neobank_support_v1"
TICKETS = "zendesk_tickets"
ORGANIZATIONS = "zendesk_organizations"
VIOLATIONS = "zendesk_ticket_status_violations"
CUSTOM_FIELDS = [
    "resolution_category",
    "owner",
    "access_expiry_date",
    "approval_required",
    "approval_status",
    "approver_id",
    "approval_request_ids",
    "business_justification",
    "incident_severity",
    "customer_impact",
    "asset_id",
]


domain = domain_fixture(NEOBANK)


def test_hooks_split_strip_lower_and_sort() -> None:
    item = {"tags": "Escalated, production_access", "domain_names": "b.org, A.com", "subject": "S"}
    assert neobank_item("tickets", item) == {
        "tags": ["Escalated", "production_access"],
        "domain_names": ["b.org", "A.com"],
        "subject": "S",
    }
    assert neobank_item("tickets", {"tags": "", "domain_names": None}) == {"tags": [], "domain_names": None}
    assert neobank_ticket_tags(["Temporary_Access", " escalated", "ESCALATED"]) == [
        "escalated",
        "escalated",
        "temporary_access",
    ]


def test_create_ticket_stores_and_returns_normalised_tags(env: Environment) -> None:
    item = create_item(
        env,
        "tickets",
        {
            "subject": "VPN",
            "status": "open",
            "tags": "Temporary_Access,escalated",
            "owner": "it_inf_team",
        },
    )["item"]
    assert (item["id"], item["tags"], item["owner"]) == (
        "6",
        ["escalated", "temporary_access"],
        "it_inf_team",
    )
    assert list(item)[-len(CUSTOM_FIELDS) :] == CUSTOM_FIELDS
    assert record(env, TICKETS, "6")["tags"] == ["escalated", "temporary_access"]
    assert env.table(VIOLATIONS).count() == 5


def test_create_ticket_with_empty_or_null_tags_stores_none(env: Environment) -> None:
    first = create_item(env, "tickets", {"subject": "A", "status": "open", "tags": ""})
    second = create_item(env, "tickets", {"subject": "B", "status": "open", "tags": None})
    assert (first["item"]["tags"], second["item"]["tags"]) == ([], [])
    assert [t["tags"] for t in records(env, TICKETS)[5:]] == [[], []]


def test_tags_must_be_a_string(env: Environment) -> None:
    message = error_of(
        env, "zendesk_create_item", {"table": "tickets", "item": {"subject": "S", "tags": ["escalated"]}}
    )
    prefix = "Tool execution failed: Input validation failed: "
    assert message.startswith(f"{prefix}item.TicketCreateInput.tags: Input should be a valid string;")
    assert env.table(TICKETS).count() == 5


def test_create_ticket_in_a_non_open_status_logs_a_violation(env: Environment) -> None:
    create_item(env, "tickets", {"subject": "Done", "status": "solved"})
    create_item(env, "tickets", {"subject": "Defaulted"})
    logged = [v.model_dump(mode="json") for v in env.table(VIOLATIONS).all()[5:]]
    assert logged == [
        {
            "id": "VIOLATION-6",
            "ticket_id": "6",
            "created_status": "solved",
            "created_at": "2025-10-01T13:00:05Z",
        },
        {
            "id": "VIOLATION-7",
            "ticket_id": "7",
            "created_status": "new",
            "created_at": "2025-10-01T13:00:05Z",
        },
    ]


def test_update_normalises_sent_tags_and_ignores_nulls(env: Environment) -> None:
    item = update_item(
        env, "tickets", "2", {"tags": "Redirected,escalated", "status": "hold", "owner": None}
    )["item"]
    assert (item["tags"], item["status"], item["updated_at"]) == (
        ["escalated", "redirected"],
        "hold",
        "2025-10-01T13:00:10Z",
    )
    kept = update_item(env, "tickets", "2", {"tags": None})["item"]
    assert kept["tags"] == ["escalated", "redirected"]
    cleared = update_item(env, "tickets", "2", {"tags": ""})["item"]
    assert cleared["tags"] == []
    assert record(env, TICKETS, "2")["tags"] == []
    assert env.table(VIOLATIONS).count() == 5


def test_update_missing_ticket_fails(env: Environment) -> None:
    message = error_of(
        env, "zendesk_update_item", {"table": "tickets", "id": "99", "item": {"tags": "escalated"}}
    )
    assert message == "Tool execution failed: Item with ID '99' not found in table 'tickets'"


def test_organization_domain_names_split_but_keep_order_and_case(env: Environment) -> None:
    created = create_item(env, "organizations", {"name": "Ops", "domain_names": "b.org, A.com"})["item"]
    assert (created["id"], created["domain_names"]) == ("6", ["b.org", "A.com"])
    updated = update_item(env, "organizations", "3", {"domain_names": "vdb.com"})["item"]
    assert (updated["domain_names"], updated["updated_at"]) == (["vdb.com"], "2025-10-01T13:00:05Z")
    assert record(env, ORGANIZATIONS, "3")["domain_names"] == ["vdb.com"]


def _golden_non_open_create(tasks: list[Task]) -> tuple[Task, int]:
    """The golden trajectory that creates a ticket directly in a non-open status
    (docs/benchmark.md#grading-hash)."""
    for task in tasks:
        for index, step in enumerate(task.answer.golden_tool_interactions):
            params = step.parameters
            creates_ticket = step.tool == "zendesk_create_item" and params.get("table") == "tickets"
            if creates_ticket and (params.get("item") or {}).get("status") not in (None, "open"):
                return task, index
    raise AssertionError("no golden non-open ticket create")


def test_golden_that_creates_a_solved_ticket_appends_a_violation(
    bench: BenchData, domain: Domain, sqlite_db: Database
) -> None:
    task, index = _golden_non_open_create(bench.tasks([NEOBANK]))
    steps = task.answer.golden_tool_interactions
    with Environment(domain, sqlite_db) as env:
        env.apply_patch(task.data_patch)
        before = env.table(VIOLATIONS).count()
        for step in steps[:index]:
            env.call_tool(step.tool, step.parameters)
        created = call(env, "zendesk_create_item", steps[index].parameters)["item"]
        violations = stored_rows(env, VIOLATIONS)
        assert len(violations) == before + 1
        assert violations[-1] == {
            "id": f"VIOLATION-{before + 1}",
            "ticket_id": created["id"],
            "created_status": "solved",
            "created_at": "2025-10-01T13:00:05Z",
        }
        assert violations[-1]["id"] == "VIOLATION-6"
