"""Approval requests, approver lookup and e-mail notification tools.

Approvers and recipients are employees found by exact e-mail (first match). The reference wraps
unexpected failures of the approval tools as ``Failed to <action>: <error>``; duplicate-id refusals
from the store reach the caller that way too.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.neobank.common import (
    APPROVALS,
    EMPLOYEES,
    NOTIFICATIONS,
    employee_by_email,
    next_id,
    value,
)
from benchmark.envs.neobank.inputs import (
    ApprovalApiCheckStatusInput,
    ApprovalApiCreateRequestInput,
    ApproverLookupApiGetApproverContactInput,
    ApproverLookupApiGetContactDetailsInput,
    EmailNotificationApiSendNotificationInput,
)
from benchmark.envs.tools import ToolFn

APPROVER_DEPARTMENTS = ("it_security", "finance_accounting", "compliance_risk")

# employment_status -> availability_status; anything else (terminated) is "unavailable".
AVAILABILITY = {"active": "available", "on_leave": "on_leave", "departing": "available"}

NOTIFIABLE_STATUSES = ("active", "on_leave")


def approval_api_check_status(env: Environment, args: ApprovalApiCheckStatusInput) -> dict[str, Any]:
    request = env.table(APPROVALS).get(args.approval_request_id)
    if request is None:
        raise ToolError(f"Approval request not found: {args.approval_request_id}")
    decided_at = request.decided_at.strftime("%Y-%m-%dT%H:%M:%SZ") if request.decided_at else None
    return {
        "status": value(request.status),
        "decided_at": decided_at,
        "approver_feedback": request.approver_feedback,
    }


def approval_api_create_request(env: Environment, args: ApprovalApiCreateRequestInput) -> dict[str, Any]:
    """Both parties must be employees; the request starts pending with urgency standard by default."""
    requester = employee_by_email(env, args.requester_email)
    if requester is None:
        raise ToolError(f"Requester not found: {args.requester_email}")
    approver = employee_by_email(env, args.approver_email)
    if approver is None:
        raise ToolError(f"Approver not found: {args.approver_email}")
    table = env.table(APPROVALS)
    request_id = next_id(table, "APR")
    try:
        table.create(
            table.record(
                {
                    "id": request_id,
                    "request_type": value(args.request_type),
                    "requester_id": requester.id,
                    "approver_id": approver.id,
                    "status": "pending",
                    "urgency": value(args.urgency) if args.urgency else "standard",
                    "details": args.details,
                    "ticket_id": args.ticket_id,
                    "created_at": None,
                    "decided_at": None,
                    "approver_feedback": None,
                }
            )
        )
    except (ValidationError, ToolError) as exc:
        raise ToolError(f"Failed to create approval request: {exc}") from exc
    return {"approval_request_id": request_id, "status": "pending"}


def approver_lookup_api_get_contact_details(
    env: Environment, args: ApproverLookupApiGetContactDetailsInput
) -> dict[str, Any]:
    """A backup approver (the manager) is named only for an approver on leave."""
    approver = employee_by_email(env, args.email)
    if approver is None:
        raise ToolError(f"Approver not found: {args.email}")
    availability = AVAILABILITY.get(value(approver.employment_status), "unavailable")
    backup = None
    if availability == "on_leave" and approver.manager_id:
        manager = env.table(EMPLOYEES).get(approver.manager_id)
        backup = manager.email if manager is not None else None
    return {"name": approver.full_name, "availability_status": availability, "backup_approver_email": backup}


def approver_lookup_api_get_approver_contact(
    env: Environment, args: ApproverLookupApiGetApproverContactInput
) -> dict[str, Any]:
    """The first highest-level employee of the department (case-insensitive department name)."""
    department = args.required_approver.lower()
    if department not in APPROVER_DEPARTMENTS:
        raise ToolError(
            f"Invalid required_approver: {args.required_approver}. "
            f"Must be one of: {', '.join(APPROVER_DEPARTMENTS)}"
        )
    members = env.table(EMPLOYEES).where(department=department)
    if not members:
        raise ToolError(f"No {department} team members found")
    top = max(e.level for e in members)
    approver = next(e for e in members if e.level == top)
    return {"employee_id": approver.id, "contact_email": approver.email, "contact_name": approver.full_name}


def email_notification_api_send_notification(
    env: Environment, args: EmailNotificationApiSendNotificationInput
) -> dict[str, Any]:
    """Queues a notification to an active or on-leave employee; cc_emails is split on commas."""
    recipient = employee_by_email(env, args.recipient_email)
    if recipient is None:
        raise ToolError(f"Recipient email not found in employee directory: {args.recipient_email}")
    if value(recipient.employment_status) not in NOTIFIABLE_STATUSES:
        raise ToolError(
            f"Recipient is inactive or on extended leave; notification not sent: {args.recipient_email}"
        )
    table = env.table(NOTIFICATIONS)
    notification_id = next_id(table, "NTF")
    cc = [e.strip() for e in args.cc_emails.split(",")] if args.cc_emails else None
    table.create(
        table.record(
            {
                "id": notification_id,
                "recipient_id": recipient.id,
                "recipient_email": args.recipient_email,
                "notification_type": value(args.notification_type),
                "subject": args.subject,
                "body": args.body,
                "ticket_id": args.ticket_id,
                "priority": value(args.priority) if args.priority else "normal",
                "cc_emails": cc,
                "sent_at": None,
                "delivery_status": "queued",
                "delivered_at": None,
                "sent_by": "system",
            }
        )
    )
    return {"notification_id": notification_id, "delivery_status": "queued"}


TOOLS: dict[str, ToolFn] = {
    "approval_api_check_status": approval_api_check_status,
    "approval_api_create_request": approval_api_create_request,
    "approver_lookup_api_get_contact_details": approver_lookup_api_get_contact_details,
    "approver_lookup_api_get_approver_contact": approver_lookup_api_get_approver_contact,
    "email_notification_api_send_notification": email_notification_api_send_notification,
}

READ_ONLY: frozenset[str] = frozenset(
    {
        "approval_api_check_status",
        "approver_lookup_api_get_contact_details",
        "approver_lookup_api_get_approver_contact",
    }
)
