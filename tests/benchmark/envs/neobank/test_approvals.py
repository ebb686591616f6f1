"""Approval, approver lookup and notification tools on a real Environment (SQLite in memory).

The patch adds an approver on leave (with a manager), a terminated and a departing employee, and an
approval request whose id takes the next ``APR-`` number so the following create collides.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmark.envs import Environment
from benchmark.envs.neobank.common import APPROVALS, EMPLOYEES, NOTIFICATIONS
from tests.support.envs import Patch, call, failure

DOMAIN = "sandbox_neobank_support_v1"
UNKNOWN = "nobody@vdb.com"


@pytest.fixture
def env_patch() -> Patch:
    return PATCH


def _employee(emp_id: str, email: str, status: str, manager: str | None = "WD-753918") -> dict[str, Any]:
    return {
        "id": emp_id,
        "email": email,
        "full_name": email.split("@")[0].replace(".", " ").title(),
        "level": 3,
        "department": "it_security",
        "role": "Analyst",
        "office_location": "sf",
        "start_date": "2022-01-01T00:00:00Z",
        "manager_id": manager,
        "employment_status": status,
    }


PATCH: Patch = {
    EMPLOYEES: [
        _employee("WD-LEAVE", "on.leave@vdb.com", "on_leave"),
        _employee("WD-LEAVE2", "orphan.leave@vdb.com", "on_leave", manager=None),
        _employee("WD-GONE", "gone.person@vdb.com", "terminated"),
        _employee("WD-LEAVING", "leaving.soon@vdb.com", "departing"),
    ]
}


def test_check_status(env: Environment) -> None:
    tool = "approval_api_check_status"
    assert call(env, tool, {"approval_request_id": "APR-19263847"}) == {
        "status": "approved",
        "decided_at": "2025-09-16T14:00:00Z",
        "approver_feedback": "Approved for 30-day access period",
    }
    assert call(env, tool, {"approval_request_id": "APR-05847293"}) == {"status": "pending"}
    assert call(env, tool, {"approval_request_id": "APR-NONE"}) == failure(
        tool, "Approval request not found: APR-NONE"
    )


def test_create_request_stores_pending_row(env: Environment) -> None:
    new_id = f"APR-{env.table(APPROVALS).count() + 1:08d}"
    args = {
        "request_type": "data_export",
        "requester_email": "marcus.thompson@vdb.com",
        "approver_email": "on.leave@vdb.com",
        "details": "Quarterly export",
    }
    assert call(env, "approval_api_create_request", args) == {
        "approval_request_id": new_id,
        "status": "pending",
    }
    stored = env.table(APPROVALS).get(new_id)
    assert stored is not None
    assert stored.model_dump(mode="json") == {
        "id": new_id,
        "request_type": "data_export",
        "requester_id": "WD-847291",
        "approver_id": "WD-LEAVE",
        "status": "pending",
        "urgency": "standard",
        "details": "Quarterly export",
        "ticket_id": None,
        "created_at": None,
        "decided_at": None,
        "approver_feedback": None,
    }


def test_create_request_errors(env: Environment) -> None:
    tool = "approval_api_create_request"
    base = {"request_type": "access_request", "details": "x", "urgency": "critical"}
    good = "marcus.thompson@vdb.com"
    assert call(env, tool, {**base, "requester_email": UNKNOWN, "approver_email": good}) == failure(
        tool, f"Requester not found: {UNKNOWN}"
    )
    assert call(env, tool, {**base, "requester_email": good, "approver_email": UNKNOWN}) == failure(
        tool, f"Approver not found: {UNKNOWN}"
    )
    taken = f"APR-{env.table(APPROVALS).count() + 2:08d}"
    env.apply_patch(
        {
            APPROVALS: [
                {
                    "id": taken,
                    "request_type": "access_request",
                    "requester_id": "WD-847291",
                    "approver_id": "WD-681453",
                    "status": "pending",
                    "details": "already there",
                }
            ]
        }
    )
    assert call(env, tool, {**base, "requester_email": good, "approver_email": good}) == failure(
        tool, f"Failed to create approval request: Object with ID {taken} already exists"
    )


@pytest.mark.parametrize(
    ("email", "expected"),
    [
        ("amanda.lee@vdb.com", {"name": "Amanda Lee", "availability_status": "available"}),
        (
            "on.leave@vdb.com",
            {
                "name": "On Leave",
                "availability_status": "on_leave",
                "backup_approver_email": "amanda.lee@vdb.com",
            },
        ),
        ("orphan.leave@vdb.com", {"name": "Orphan Leave", "availability_status": "on_leave"}),
        ("gone.person@vdb.com", {"name": "Gone Person", "availability_status": "unavailable"}),
        ("leaving.soon@vdb.com", {"name": "Leaving Soon", "availability_status": "available"}),
    ],
)
def test_get_contact_details(env: Environment, email: str, expected: dict[str, Any]) -> None:
    assert call(env, "approver_lookup_api_get_contact_details", {"email": email}) == expected


def test_get_contact_details_unknown(env: Environment) -> None:
    tool = "approver_lookup_api_get_contact_details"
    assert call(env, tool, {"email": UNKNOWN}) == failure(tool, f"Approver not found: {UNKNOWN}")


def test_get_approver_contact_highest_level(env: Environment) -> None:
    tool = "approver_lookup_api_get_approver_contact"
    expected = {
        "employee_id": "WD-753918",
        "contact_email": "amanda.lee@vdb.com",
        "contact_name": "Amanda Lee",
    }
    assert call(env, tool, {"required_approver": "IT_Security"}) == expected
    finance = call(env, tool, {"required_approver": "finance_accounting"})
    assert finance["contact_email"] == "chris.johnson@vdb.com"
    assert call(env, tool, {"required_approver": "legal"}) == failure(
        tool,
        "Invalid required_approver: legal. Must be one of: it_security, finance_accounting, compliance_risk",
    )


def test_send_notification_queues_row(env: Environment) -> None:
    new_id = f"NTF-{env.table(NOTIFICATIONS).count() + 1:08d}"
    args = {
        "recipient_email": "on.leave@vdb.com",
        "notification_type": "ticket_update",
        "subject": "Update",
        "body": "Your ticket moved",
        "ticket_id": "6",
        "cc_emails": "a@vdb.com, b@vdb.com",
    }
    out = call(env, "email_notification_api_send_notification", args)
    assert out == {"notification_id": new_id, "delivery_status": "queued"}
    stored = env.table(NOTIFICATIONS).get(new_id)
    assert stored is not None
    dumped = stored.model_dump(mode="json")
    assert dumped["recipient_id"] == "WD-LEAVE"
    assert (dumped["priority"], dumped["cc_emails"], dumped["sent_by"]) == (
        "normal",
        ["a@vdb.com", "b@vdb.com"],
        "system",
    )


def test_send_notification_refuses_inactive_and_unknown(env: Environment) -> None:
    tool = "email_notification_api_send_notification"
    base = {"notification_type": "ticket_update", "subject": "s", "body": "b"}
    before = env.table(NOTIFICATIONS).count()
    for email in ("gone.person@vdb.com", "leaving.soon@vdb.com"):
        assert call(env, tool, {**base, "recipient_email": email}) == failure(
            tool, f"Recipient is inactive or on extended leave; notification not sent: {email}"
        )
    assert call(env, tool, {**base, "recipient_email": UNKNOWN}) == failure(
        tool, f"Recipient email not found in employee directory: {UNKNOWN}"
    )
    assert env.table(NOTIFICATIONS).count() == before
