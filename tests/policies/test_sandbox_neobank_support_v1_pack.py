"""The neobank policy pack (policies/sandbox_neobank_support_v1/) on hand-made states and calls.

Every rule has a case that triggers it and a case that passes. A case is the domain's default state
with a small data patch, a few calls (each with the exact set of rule ids it must raise) and,
optionally, a commit (with the exact set of at-commit rule ids). No case uses a golden trajectory:
the records are the domain's defaults or rows patched in here. Removing a rule from the pack makes its
triggering case fail, because the expected rule id is no longer raised.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.guarded import backend_for, executor_for, load_domain_policy, tool_infos
from benchmark.replay import replay
from benchmark.tasks import BenchData, Task
from guard.models import EffectClass
from guard.policy import PolicyPack
from guard.session import GuardSession

DOMAIN = "sandbox_neobank_support_v1"
PACK = Path(__file__).resolve().parents[2] / "policies" / DOMAIN / "policy.yaml"

MAIN = "sandbox_neobank_support_main_models_"
EMPLOYEES = MAIN + "employees"
ASSETS = MAIN + "hardware_assets"
APPROVALS = MAIN + "approval_requests"
INCIDENTS = MAIN + "security_incidents"
USERS = "zendesk_users"

NEW_TICKET = "6"  # the first ticket a session creates (5 default tickets)
NEW_APPROVAL = "APR-00000007"  # the first approval request a session creates (6 default rows)

# Default employees (initial data of the domain) used below:
CEO = "lisa.chen@vdb.com"  # executive_leadership, level 9, no manager
VP_ENG = "michael.rodriguez@vdb.com"  # product_engineering, level 8
ENG_MANAGER = "sarah.jones@vdb.com"  # product_engineering, level 7, manager of the engineers
ENGINEER = "marcus.thompson@vdb.com"  # product_engineering, sf; a premium laptop and a monitor
JUNIOR = "david.kim@vdb.com"  # product_engineering, nyc, no devices
SWE = "alex.johnson@vdb.com"  # product_engineering, nyc
SUPPORT_SENIOR = "alex.taylor@vdb.com"  # customer_support "Senior Support Specialist", austin
SECURITY_MANAGER = "amanda.lee@vdb.com"  # it_security, level 6
IT_OPS = "jessica.martinez@vdb.com"  # it_operations, nyc, manager: the CEO
FINANCE_MANAGER = "chris.johnson@vdb.com"  # finance_accounting, level 5
ANALYST = "sophia.davis@vdb.com"  # finance_accounting "Financial Analyst", sf, no devices
ON_LEAVE = "kevin.miller@vdb.com"  # product_engineering, on_leave
CONTRACTOR = "olivia.moore@vdb.com"  # customer_support contractor, austin, contract end 2026-05-31
PREMIUM_LAPTOP = "VDB-HW-29417"  # the engineer's laptop_premium
UNLISTED_SF_MONITOR = "VDB-HW-31854"  # LG UltraWide 34WN80C: not in the Device model list


# -- data patches ---------------------------------------------------------------------------------------
def employee(email: str, department: str, role: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": extra.pop("id"),
        "email": email,
        "full_name": email.split("@")[0],
        "level": 3,
        "department": department,
        "role": role,
        "office_location": "sf",
        "start_date": "2023-01-01T00:00:00Z",
        "manager_id": "WD-294817",
        "employment_status": "active",
        "is_contractor": False,
        **extra,
    }


def asset(asset_id: str, device_type: str, model: str, location: str) -> dict[str, Any]:
    return {
        "id": asset_id,
        "device_type": device_type,
        "device_model": model,
        "purchase_date": "2025-06-01T00:00:00Z",
        "warehouse_location": location,
        "condition": "new",
        "is_assigned": False,
    }


def approved(request_id: str, requester_id: str, approver_id: str, kind: str = "access_request") -> dict:
    return {
        "id": request_id,
        "request_type": kind,
        "requester_id": requester_id,
        "approver_id": approver_id,
        "status": "approved",
        "urgency": "standard",
        "details": "approved earlier",
        "ticket_id": None,
    }


def user(user_id: str, email: str) -> dict[str, Any]:
    return {
        "id": user_id,
        "name": email,
        "email": email,
        "created_at": "2025-01-01T00:00:00Z",
        "updated_at": "2025-01-01T00:00:00Z",
    }


def no_active_incidents(env: Environment) -> None:
    rows = [r.model_dump(mode="json") for r in env.table(INCIDENTS).all()]
    env.apply_patch({INCIDENTS: [{**r, "is_active": False, "status": "closed"} for r in rows]})


LISTED_MONITOR = 'Dell P2425H 24"'
DEPARTING = employee(
    "dana.departing@vdb.com",
    "marketing",
    "Marketing Specialist",
    id="WD-900001",
    employment_status="departing",
)
CS_AGENT = employee(
    "sam.agent@vdb.com",
    "customer_support",
    "Customer Support Agent",
    id="WD-900002",
    office_location="austin",
)
HR_PERSON = employee("hana.hr@vdb.com", "hr", "HR Generalist", id="WD-900003")


# -- calls ----------------------------------------------------------------------------------------------
BASE_TICKET = {
    "subject": "Request",
    "description": "Details",
    "status": "open",
    "priority": "normal",
    "type": "problem",
    "requester_id": "1",
    "assignee_id": "2",
    "organization_id": "1",
    "owner": "it_support",
}


def create_ticket(**item: Any) -> tuple[str, dict[str, Any]]:
    fields = {**BASE_TICKET, **item}
    return "zendesk_create_item", {
        "table": "tickets",
        "item": {k: v for k, v in fields.items() if v is not None},
    }


def update_ticket(ticket_id: str = NEW_TICKET, **item: Any) -> tuple[str, dict[str, Any]]:
    return "zendesk_update_item", {"table": "tickets", "id": ticket_id, "item": item}


def provision(email: str, app: str, level: str, temporary: bool = False, expiry: str | None = None) -> tuple:
    args = {"email": email, "app_name": app, "access_level": level, "is_temporary": temporary}
    if expiry is not None:
        args["access_expiry_date"] = expiry
    return "okta_api_provision_access", args


def approval(requester: str, approver: str, ticket_id: str | None = NEW_TICKET, **extra: Any) -> tuple:
    args = {
        "request_type": "access_request",
        "requester_email": requester,
        "approver_email": approver,
        "details": "Access request",
        "ticket_id": ticket_id,
        **extra,
    }
    return "approval_api_create_request", args


def assign(asset_id: str, email: str) -> tuple[str, dict[str, Any]]:
    return "asset_management_api_assign_device", {"asset_id": asset_id, "email": email}


def order(device_type: str, model: str, email: str) -> tuple[str, dict[str, Any]]:
    return "hardware_procurement_api_create_order", {
        "device_type": device_type,
        "device_model": model,
        "quantity": 1,
        "expected_delivery_date": "2025-10-15",
        "ship_to_location": "office",
        "requester_email": email,
    }


def security(email: str, operation: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return "okta_security_api_execute_action", {"email": email, "operation": operation, **extra}


def awaiting(ticket_id: str = NEW_TICKET, **item: Any) -> tuple[str, dict[str, Any]]:
    """The ticket update that documents the session's first approval request (approver: the manager)."""
    fields = {
        "status": "pending",
        "approval_required": "yes",
        "approval_status": "pending",
        "approver_id": "WD-681453",
        "approval_request_ids": NEW_APPROVAL,
        **item,
    }
    return update_ticket(ticket_id, **fields)


# -- cases ----------------------------------------------------------------------------------------------
@dataclass
class Case:
    rule: str
    passes: bool
    calls: list[tuple[str, dict[str, Any], set[str]]]
    commit: set[str] | None = None
    patch: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    setup: Callable[[Environment], None] | None = None

    @property
    def id(self) -> str:
        return f"{self.rule.removeprefix('neobank.')}-{'pass' if self.passes else 'trigger'}"


def _c(rule: str, *calls: tuple, commit: set[str] | None = None, ok: bool = False, **kw: Any) -> Case:
    steps = [(tool, args, set(expect)) for tool, args, expect in calls]
    return Case(rule, ok, steps, commit, **kw)


def T(rule: str, call: tuple, *before: tuple, **kw: Any) -> Case:
    """A case whose last call raises exactly ``rule`` (the calls before it raise nothing)."""
    return _c(rule, *[(*c, set()) for c in before], (*call, {rule}), **kw)


def P(rule: str, call: tuple, *before: tuple, **kw: Any) -> Case:
    """A case whose calls all pass."""
    return _c(rule, *[(*c, set()) for c in before], (*call, set()), ok=True, **kw)


def TC(rule: str, *calls: tuple, **kw: Any) -> Case:
    """Calls that pass, then a commit that raises exactly ``rule``."""
    return _c(rule, *[(*c, set()) for c in calls], commit={rule}, **kw)


def PC(rule: str, *calls: tuple, **kw: Any) -> Case:
    """Calls that pass, then a commit that commits."""
    return _c(rule, *[(*c, set()) for c in calls], commit=set(), ok=True, **kw)


R = "neobank."
HOLD_NO_APPROVAL = {"status": "hold", "approval_required": "no", "approval_status": "not_required"}
EXPIRY = "2026-01-01T00:00:00Z"
ALEX_USER = [user("6", SWE)]

CASES: list[Case] = [
    # tickets: what one call writes
    T(
        R + "tickets.no_comments",
        (
            "zendesk_create_item",
            {
                "table": "comments",
                "item": {"ticket_id": "1", "author_id": "2", "body": "note", "public": True},
            },
        ),
    ),
    P(R + "tickets.no_comments", create_ticket()),
    T(R + "tickets.no_system_statuses", update_ticket("1", status="closed")),
    P(R + "tickets.no_system_statuses", update_ticket("1", status="hold")),
    T(R + "tickets.creation_fields", create_ticket(priority=None)),
    P(R + "tickets.creation_fields", create_ticket(priority="low", type="question")),
    T(R + "tickets.assignee_is_agent", create_ticket(assignee_id="7")),
    P(R + "tickets.assignee_is_agent", update_ticket("1", assignee_id="2", status="hold")),
    T(R + "tickets.organization", create_ticket(organization_id="2")),
    P(R + "tickets.organization", update_ticket("3", organization_id="1")),
    T(R + "tickets.owner_on_create", create_ticket(owner="it_ops_team")),
    P(R + "tickets.owner_on_create", update_ticket("1", owner="it_ops_team")),
    T(R + "tickets.no_due_at", update_ticket("1", due_at="2025-10-05T00:00:00Z")),
    P(R + "tickets.no_due_at", update_ticket("1", subject="Printer")),
    T(R + "tickets.allowed_tags", update_ticket("1", tags="escalated,vip")),
    P(R + "tickets.allowed_tags", update_ticket("1", tags="escalated,System_Error")),
    T(R + "tickets.type_not_task", update_ticket("1", type="task")),
    P(R + "tickets.type_not_task", update_ticket("1", type="incident")),
    T(R + "tickets.solved_with_resolution", update_ticket("1", status="solved")),
    P(
        R + "tickets.solved_with_resolution",
        update_ticket("1", status="solved", resolution_category="denied"),
    ),
    T(R + "tickets.asset_id_format", update_ticket("1", asset_id="HW-12345")),
    P(R + "tickets.asset_id_format", update_ticket("1", asset_id="VDB-HW-12345")),
    T(R + "tickets.id_lists_without_spaces", update_ticket("1", approver_id="WD-681453, WD-753918")),
    P(R + "tickets.id_lists_without_spaces", update_ticket("1", approver_id="WD-681453,WD-753918")),
    T(R + "tickets.approval_required_kept", update_ticket("2", approval_required="no")),
    P(R + "tickets.approval_required_kept", update_ticket("2", approval_status="rejected")),
    T(R + "tickets.access_expiry_format", update_ticket("1", access_expiry_date="2025-10-02")),
    P(R + "tickets.access_expiry_format", update_ticket("1", access_expiry_date="2025-10-02T13:00:00Z")),
    # tickets: end state at commit
    TC(R + "tickets.entry_fields", create_ticket(), update_ticket(status="hold")),
    PC(R + "tickets.entry_fields", create_ticket(), update_ticket(**HOLD_NO_APPROVAL)),
    TC(
        R + "tickets.approval_ids_when_required",
        create_ticket(),
        update_ticket(status="pending", approval_required="yes", approval_status="pending"),
    ),
    PC(
        R + "tickets.approval_ids_when_required", create_ticket(), approval(ENGINEER, ENG_MANAGER), awaiting()
    ),
    TC(
        R + "tickets.approval_status_matches",
        create_ticket(),
        update_ticket(status="hold", approval_required="no"),
    ),
    TC(
        R + "tickets.approval_status_matches",
        create_ticket(),
        update_ticket(
            status="hold",
            approval_required="yes",
            approval_status="not_required",
            approver_id="WD-681453",
            approval_request_ids="APR-05847293",
        ),
    ),
    PC(R + "tickets.approval_status_matches", create_ticket(), update_ticket(**HOLD_NO_APPROVAL)),
    TC(
        R + "tickets.approval_records_exist",
        create_ticket(),
        awaiting(approver_id="WD-000001", approval_request_ids="APR-99999999"),
    ),
    PC(
        R + "tickets.approval_records_exist",
        create_ticket(),
        update_ticket(
            status="pending",
            approval_required="yes",
            approval_status="pending",
            approver_id="WD-681453",
            approval_request_ids="APR-05847293",
        ),
    ),
    TC(R + "tickets.approvals_recorded", create_ticket(), approval(ENGINEER, ENG_MANAGER)),
    TC(
        R + "tickets.approvals_recorded",
        create_ticket(),
        approval(ENGINEER, ENG_MANAGER, ticket_id=None),
        update_ticket(**HOLD_NO_APPROVAL),
    ),
    PC(
        R + "tickets.approvals_recorded",
        create_ticket(),
        approval(ENGINEER, ENG_MANAGER, ticket_id=None),
        awaiting(),
    ),
    TC(
        R + "tickets.pending_while_awaiting_approval",
        create_ticket(),
        approval(ENGINEER, ENG_MANAGER),
        awaiting(status="open"),
    ),
    TC(
        R + "tickets.pending_while_awaiting_approval",
        create_ticket(),
        approval(ENGINEER, ENG_MANAGER),
        awaiting(approval_status="approved"),
    ),
    PC(
        R + "tickets.pending_while_awaiting_approval",
        create_ticket(),
        approval(ENGINEER, ENG_MANAGER),
        awaiting(),
    ),
    # ticket "1" is linked to the default pending request APR-05847293
    TC(
        R + "tickets.not_solved_while_approval_pending",
        update_ticket(
            "1",
            status="solved",
            resolution_category="provisioned",
            approval_required="yes",
            approval_status="approved",
            approver_id="WD-681453",
            approval_request_ids="APR-05847293",
            owner="it_support",
        ),
    ),
    PC(
        R + "tickets.not_solved_while_approval_pending",
        update_ticket(
            "1",
            status="solved",
            resolution_category="provisioned",
            approval_required="yes",
            approval_status="approved",
            approver_id="WD-681453",
            approval_request_ids="APR-05847293",
            owner="it_support",
        ),
        patch={APPROVALS: [{**approved("APR-05847293", "WD-847291", "WD-681453"), "ticket_id": "1"}]},
    ),
    TC(
        R + "tickets.approval_urgency",
        create_ticket(priority="high"),
        approval(ENGINEER, ENG_MANAGER),
        awaiting(),
    ),
    TC(
        R + "tickets.approval_urgency",
        create_ticket(),
        approval(ENGINEER, ENG_MANAGER, urgency="critical"),
        awaiting(),
    ),
    PC(
        R + "tickets.approval_urgency",
        create_ticket(priority="high"),
        approval(ENGINEER, ENG_MANAGER, urgency="urgent"),
        awaiting(),
    ),
    TC(R + "tickets.incident_fields", create_ticket(type="incident")),
    PC(
        R + "tickets.incident_fields",
        create_ticket(type="incident", incident_severity="sev3_medium", customer_impact="no_impact"),
    ),
    TC(
        R + "tickets.escalation",
        create_ticket(),
        update_ticket(
            owner="it_ops_team", status="pending", approval_required="no", approval_status="not_required"
        ),
    ),
    TC(R + "tickets.escalation", create_ticket(), update_ticket(owner="it_ops_team", tags="escalated")),
    PC(
        R + "tickets.escalation",
        create_ticket(),
        update_ticket(
            owner="it_ops_team",
            tags="escalated",
            status="pending",
            approval_required="no",
            approval_status="not_required",
        ),
    ),
    TC(
        R + "tickets.escalation_owner_matches_category",
        create_ticket(),
        update_ticket(resolution_category="escalated_it_sec", **{**HOLD_NO_APPROVAL, "status": "solved"}),
    ),
    PC(
        R + "tickets.escalation_owner_matches_category",
        create_ticket(),
        update_ticket(
            owner="it_sec_team",
            tags="escalated",
            resolution_category="escalated_it_sec",
            **{**HOLD_NO_APPROVAL, "status": "pending"},
        ),
    ),
    PC(
        R + "tickets.escalation_owner_matches_category",
        create_ticket(),
        update_ticket(
            owner="it_inf_team",
            tags="escalated",
            resolution_category="escalated_it_inf",
            **{**HOLD_NO_APPROVAL, "status": "pending"},
        ),
    ),
    TC(R + "tickets.question_low_priority", create_ticket(type="question")),
    PC(R + "tickets.question_low_priority", create_ticket(type="question", priority="low")),
    TC(R + "tickets.executive_priority", create_ticket(requester_id="6"), patch={USERS: [user("6", CEO)]}),
    PC(
        R + "tickets.executive_priority",
        create_ticket(requester_id="6", priority="high"),
        patch={USERS: [user("6", CEO)]},
    ),
    # access to tools
    T(
        R + "access.contractor_group_4_5",
        provision(CONTRACTOR, "Admin Panel", "write non-PII only", True, EXPIRY),
    ),
    T(
        R + "access.contractor_group_4_5",
        provision(CONTRACTOR, "Snowflake raw replica", "analyst", True, EXPIRY),
        patch={
            EMPLOYEES: [
                employee(
                    CONTRACTOR,
                    "compliance_risk",
                    "Analyst",
                    id="WD-369841",
                    is_contractor=True,
                    contract_end_date="2026-05-31T00:00:00Z",
                )
            ]
        },
    ),
    P(R + "access.contractor_group_4_5", provision(CONTRACTOR, "Tableau", "viewer", True, EXPIRY)),
    T(R + "access.status_limits", provision(ON_LEAVE, "Tableau", "viewer")),
    T(
        R + "access.status_limits",
        provision(DEPARTING["email"], "Salesforce CRM", "user"),
        patch={EMPLOYEES: [DEPARTING]},
    ),
    P(R + "access.status_limits", provision(ON_LEAVE, "Slack", "member")),
    T(R + "access.contractor_temporary", provision(CONTRACTOR, "Tableau", "viewer")),
    P(R + "access.contractor_temporary", provision(CONTRACTOR, "Zoom", "user")),
    T(
        R + "access.contractor_expiry",
        provision(CONTRACTOR, "Tableau", "viewer", True, "2026-12-31T00:00:00Z"),
    ),
    P(
        R + "access.contractor_expiry",
        provision(CONTRACTOR, "Tableau", "viewer", True, "2026-05-31T00:00:00Z"),
    ),
    T(R + "access.expiry_when_temporary", provision(SWE, "Tableau", "viewer", True)),
    T(R + "access.expiry_when_temporary", provision(SWE, "Tableau", "viewer", False, EXPIRY)),
    P(R + "access.expiry_when_temporary", provision(SWE, "Tableau", "viewer")),
    T(R + "access.forbidden_by_role", provision(ANALYST, "GitHub", "write")),
    T(R + "access.forbidden_by_role", provision(SWE, "Customer PII fields", "write")),
    T(
        R + "access.forbidden_by_role",
        provision(HR_PERSON["email"], "Actimize", "user"),
        patch={EMPLOYEES: [HR_PERSON]},
    ),
    T(R + "access.forbidden_by_role", provision(IT_OPS, "Workday HRIS", "elevated")),
    T(
        R + "access.forbidden_by_role",
        provision(CEO, "AWS Production", "user", True, EXPIRY),
        setup=no_active_incidents,
    ),
    P(R + "access.forbidden_by_role", provision(SWE, "GitHub", "write")),
    P(
        R + "access.forbidden_by_role",
        provision(HR_PERSON["email"], "Workday HRIS", "elevated"),
        patch={EMPLOYEES: [HR_PERSON]},
    ),
    # Section 10 (an active SEV1 incident in the default state), not §3.4, governs production access
    P(R + "access.forbidden_by_role", provision(CEO, "AWS Production", "user", True, EXPIRY)),
    T(
        R + "access.production_temp_only",
        provision(SWE, "Production database", "read_only", True, EXPIRY),
        setup=no_active_incidents,
    ),
    T(R + "access.production_temp_only", provision(SWE, "VPN", "engineer_prod")),
    P(R + "access.production_temp_only", provision(SWE, "VPN", "engineer_prod", True, EXPIRY)),
    TC(
        R + "access.documented_on_ticket",
        create_ticket(requester_id="6"),
        provision(SWE, "Zoom", "user", True, EXPIRY),
        patch={USERS: ALEX_USER},
    ),
    PC(
        R + "access.documented_on_ticket",
        create_ticket(requester_id="6"),
        provision(SWE, "Zoom", "user", True, EXPIRY),
        update_ticket(tags="temporary_access", access_expiry_date=EXPIRY),
        patch={USERS: ALEX_USER},
    ),
    TC(
        R + "access.incident_post_facto_notifications",
        create_ticket(requester_id="6"),
        provision(IT_OPS, "AWS Production", "user", True, EXPIRY),
        update_ticket(tags="production_access,temporary_access", access_expiry_date=EXPIRY),
        patch={USERS: [user("6", IT_OPS)]},
    ),
    PC(
        R + "access.incident_post_facto_notifications",
        create_ticket(requester_id="6"),
        provision(IT_OPS, "AWS Production", "user", True, EXPIRY),
        update_ticket(tags="production_access,temporary_access", access_expiry_date=EXPIRY),
        (
            "email_notification_api_send_notification",
            {
                "recipient_email": CEO,
                "cc_emails": SECURITY_MANAGER,
                "notification_type": "post_facto_manager_alert",
                "subject": "Access",
                "body": "Granted",
            },
        ),
        patch={USERS: [user("6", IT_OPS)]},
    ),
    # BI dashboards
    T(R + "bi.dashboard_group", ("okta_api_add_to_group", {"email": JUNIOR, "group_name": "engineers"})),
    P(
        R + "bi.dashboard_group",
        ("okta_api_add_to_group", {"email": JUNIOR, "group_name": "bi_product_analytics"}),
    ),
    T(R + "bi.approval", ("okta_api_add_to_group", {"email": JUNIOR, "group_name": "bi_finance_viewers"})),
    T(
        R + "bi.approval",
        ("okta_api_add_to_group", {"email": JUNIOR, "group_name": "bi_finance_viewers"}),
        patch={APPROVALS: [approved("APR-10000001", "WD-465782", "WD-681453")]},
    ),
    P(
        R + "bi.approval",
        ("okta_api_add_to_group", {"email": JUNIOR, "group_name": "bi_finance_viewers"}),
        patch={APPROVALS: [approved("APR-10000001", "WD-465782", "WD-671392")]},
    ),
    P(R + "bi.approval", ("okta_api_add_to_group", {"email": CEO, "group_name": "bi_marketing_viewers"})),
    # licenses: Adobe Creative Cloud is an individual license at $600 a year
    T(
        R + "license.individual_needs_purchase_approval",
        (
            "license_management_api_allocate_license",
            {"software_name": "adobe creative cloud", "email": ENGINEER},
        ),
        patch={APPROVALS: [approved("APR-10000001", "WD-847291", "WD-681453", "license_purchase")]},
    ),
    P(
        R + "license.individual_needs_purchase_approval",
        (
            "license_management_api_allocate_license",
            {"software_name": "Adobe Creative Cloud", "email": ENGINEER},
        ),
        patch={
            APPROVALS: [
                approved("APR-10000001", "WD-847291", "WD-681453", "license_purchase"),
                approved("APR-10000002", "WD-847291", "WD-573926", "license_purchase"),
            ]
        },
    ),
    P(
        R + "license.individual_needs_purchase_approval",
        ("license_management_api_allocate_license", {"software_name": "Jira", "email": ENGINEER}),
    ),
    # hardware
    T(
        R + "hardware.monitor_dock_eligibility",
        assign("VDB-HW-90001", CONTRACTOR),
        patch={
            ASSETS: [asset("VDB-HW-90001", "monitor", LISTED_MONITOR, "austin")],
            APPROVALS: [approved("APR-10000001", "WD-369841", "WD-739154", "hardware_purchase")],
        },
    ),
    T(
        R + "hardware.monitor_dock_eligibility",
        order("docking_station", "Lenovo 40A90090US", CS_AGENT["email"]),
        patch={EMPLOYEES: [CS_AGENT], APPROVALS: [approved("APR-10000001", CS_AGENT["id"], "WD-739154")]},
    ),
    T(
        R + "hardware.monitor_dock_eligibility",
        order("monitor", LISTED_MONITOR, DEPARTING["email"]),
        patch={EMPLOYEES: [DEPARTING], APPROVALS: [approved("APR-10000001", DEPARTING["id"], "WD-294817")]},
    ),
    P(
        R + "hardware.monitor_dock_eligibility",
        assign("VDB-HW-90001", SUPPORT_SENIOR),
        patch={
            ASSETS: [asset("VDB-HW-90001", "monitor", LISTED_MONITOR, "austin")],
            APPROVALS: [approved("APR-10000001", "WD-318569", "WD-739154", "hardware_purchase")],
        },
    ),
    T(
        R + "hardware.approval",
        assign("VDB-HW-90001", ANALYST),
        patch={ASSETS: [asset("VDB-HW-90001", "monitor", LISTED_MONITOR, "sf")]},
    ),
    T(R + "hardware.approval", order("laptop_premium", "MacBook Pro 14", ENGINEER)),
    T(R + "hardware.approval", assign("VDB-HW-67139", ENGINEER)),  # CalDigit TS4 dock, sf
    P(
        R + "hardware.approval",
        assign("VDB-HW-90001", ANALYST),
        patch={
            ASSETS: [asset("VDB-HW-90001", "monitor", LISTED_MONITOR, "sf")],
            APPROVALS: [approved("APR-10000001", "WD-834765", "WD-671392", "hardware_purchase")],
        },
    ),
    P(R + "hardware.approval", order("laptop_premium", "MacBook Pro 14", CEO)),
    # an engineer in the office with no monitor gets one auto-approved
    P(R + "hardware.approval", order("monitor", LISTED_MONITOR, JUNIOR)),
    T(R + "hardware.listed_models", assign(UNLISTED_SF_MONITOR, ENGINEER)),
    T(R + "hardware.listed_models", order("headset", "Sony WH-1000XM5", ENGINEER)),
    P(
        R + "hardware.listed_models",
        assign("VDB-HW-90001", ENGINEER),
        patch={ASSETS: [asset("VDB-HW-90001", "monitor", 'Dell S2725HSM 27"', "sf")]},
    ),
    T(R + "hardware.order_first_model", order("monitor", 'Amazon Basics 24"', ENGINEER)),
    T(R + "hardware.order_first_model", order("laptop_standard", "Dell Latitude 5440", ENGINEER)),
    P(R + "hardware.order_first_model", order("monitor", LISTED_MONITOR, ENGINEER)),
    P(R + "hardware.order_first_model", order("laptop_standard", "Lenovo ThinkBook 14+", ENGINEER)),
    T(
        R + "hardware.order_only_out_of_stock",
        order("monitor", LISTED_MONITOR, ENGINEER),
        patch={ASSETS: [asset("VDB-HW-90001", "monitor", "Amazon Basics 24 inch", "sf")]},
    ),
    P(
        R + "hardware.order_only_out_of_stock",
        order("monitor", LISTED_MONITOR, ENGINEER),
        patch={ASSETS: [asset("VDB-HW-90001", "monitor", "Amazon Basics 24 inch", "nyc")]},
    ),
    T(
        R + "hardware.assign_from_local_stock",
        assign("VDB-HW-90001", ENGINEER),
        patch={ASSETS: [asset("VDB-HW-90001", "monitor", LISTED_MONITOR, "nyc")]},
    ),
    P(
        R + "hardware.assign_from_local_stock",
        assign("VDB-HW-90001", "emma.wilson@vdb.com"),
        patch={ASSETS: [asset("VDB-HW-90001", "headset", "Logitech H650e", "remote_ship")]},
    ),
    TC(
        R + "hardware.replaced_laptop_retired",
        assign("VDB-HW-90001", ENGINEER),
        patch={ASSETS: [asset("VDB-HW-90001", "laptop_standard", "Dell Latitude 5440", "sf")]},
    ),
    PC(
        R + "hardware.replaced_laptop_retired",
        assign("VDB-HW-90001", ENGINEER),
        ("asset_management_api_retire_device", {"asset_id": PREMIUM_LAPTOP}),
        patch={ASSETS: [asset("VDB-HW-90001", "laptop_standard", "Dell Latitude 5440", "sf")]},
    ),
    # Okta security actions
    T(R + "security.no_unlock", security(ENGINEER, "unlock_account")),
    P(R + "security.no_unlock", security(ENGINEER, "force_password_reset")),
    T(R + "security.verification_method", security(ENGINEER, "send_verification_sms")),
    T(R + "security.verification_method", security(CEO, "send_verification_manager")),
    T(R + "security.verification_method", security(CONTRACTOR, "send_verification_video_call")),
    P(R + "security.verification_method", security(ENGINEER, "send_verification_manager")),
    P(R + "security.verification_method", security(CEO, "send_verification_assistant")),
    P(R + "security.verification_method", security(CONTRACTOR, "send_verification_sms")),
    T(
        R + "security.bypass_authorised",
        security(ENGINEER, "set_temporary_bypass", bypass_duration_hours=2),
        setup=no_active_incidents,
    ),
    P(
        R + "security.bypass_authorised",
        security(CEO, "set_temporary_bypass", bypass_duration_hours=4),
        setup=no_active_incidents,
    ),
    P(
        R + "security.bypass_authorised",
        security(ENGINEER, "set_temporary_bypass", bypass_duration_hours=2),
        setup=no_active_incidents,
        patch={APPROVALS: [approved("APR-10000001", "WD-847291", "WD-753918", "exception_request")]},
    ),
    P(R + "security.bypass_authorised", security(ENGINEER, "set_temporary_bypass", bypass_duration_hours=2)),
    # approval requests
    T(
        R + "approvals.approver_available",
        approval(ENGINEER, ENG_MANAGER, ticket_id=None),
        patch={
            EMPLOYEES: [
                employee(
                    ENG_MANAGER,
                    "product_engineering",
                    "Engineering Manager",
                    id="WD-681453",
                    level=7,
                    manager_id="WD-573926",
                    employment_status="on_leave",
                )
            ]
        },
    ),
    P(
        R + "approvals.approver_available",
        approval(ENGINEER, VP_ENG, ticket_id=None),
        patch={
            EMPLOYEES: [
                employee(
                    ENG_MANAGER,
                    "product_engineering",
                    "Engineering Manager",
                    id="WD-681453",
                    level=7,
                    manager_id="WD-573926",
                    employment_status="on_leave",
                )
            ]
        },
    ),
    T(R + "approvals.approver_identified", approval(ENGINEER, IT_OPS, ticket_id=None)),
    T(R + "approvals.approver_identified", approval(ENGINEER, JUNIOR, ticket_id=None)),
    P(R + "approvals.approver_identified", approval(ENGINEER, SECURITY_MANAGER, ticket_id=None)),
    P(R + "approvals.approver_identified", approval(ENGINEER, VP_ENG, ticket_id=None)),
    P(R + "approvals.approver_identified", approval(SWE, FINANCE_MANAGER, ticket_id=None)),
]


@pytest.fixture(scope="module")
def domain(bench: BenchData) -> Domain:
    return load_domain(DOMAIN, bench.bundle)


@pytest.fixture(scope="module")
def pack(domain: Domain) -> PolicyPack:
    return load_domain_policy(PACK, domain)


def _run(case: Case, domain: Domain, database: Database, pack: PolicyPack) -> list[str]:
    problems: list[str] = []
    with Environment(domain, database) as env:
        if case.setup is not None:
            case.setup(env)
        env.apply_patch(case.patch)
        session = GuardSession(backend_for(env), executor_for(env), tool_infos(env), pack, session_id=case.id)
        for i, (tool, args, expect) in enumerate(case.calls):
            outcome = session.call(tool, args)
            got = {v.rule_id for v in outcome.violations}
            if got != expect:
                rows = [(v.rule_id, v.rows) for v in outcome.violations]
                problems.append(
                    f"call {i} {tool}: expected {sorted(expect)}, got {rows} ({outcome.verdict.value})"
                )
            elif not expect and outcome.result is not None and outcome.result.startswith('{"error"'):
                problems.append(f"call {i} {tool}: the tool failed: {outcome.result}")
        if case.commit is not None:
            commit = session.commit()
            got = {v.rule_id for v in commit.violations}
            if got != case.commit:
                rows = [(v.rule_id, v.rows) for v in commit.violations]
                problems.append(f"commit: expected {sorted(case.commit)}, got {rows}")
            if not commit.committed:
                session.rollback()
        else:
            session.rollback()
    return problems


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rule_case(case: Case, domain: Domain, sqlite_db: Database, pack: PolicyPack) -> None:
    assert _run(case, domain, sqlite_db, pack) == []


PG_RULES = {
    # the SQL rules
    R + "license.individual_needs_purchase_approval",
    R + "security.no_unlock",
    R + "security.verification_method",
    R + "security.bypass_authorised",
    R + "approvals.approver_available",
    # Python rules whose queries compare booleans or join tables
    R + "access.forbidden_by_role",
    R + "hardware.order_only_out_of_stock",
    R + "hardware.replaced_laptop_retired",
    R + "tickets.not_solved_while_approval_pending",
    R + "tickets.executive_priority",
}


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.rule in PG_RULES],
    ids=lambda c: c.id,
)
@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
def test_rule_case_on_postgresql(case: Case, domain: Domain, database: Database, pack: PolicyPack) -> None:
    """The SQL rules and the Python rules whose queries compare booleans, on PostgreSQL too."""
    assert _run(case, domain, database, pack) == []


def test_every_rule_has_a_triggering_and_a_passing_case(pack: PolicyPack) -> None:
    rules = {c.id for c in pack.checks}
    triggered = {c.rule for c in CASES if not c.passes}
    passing = {c.rule for c in CASES if c.passes}
    assert {c.rule for c in CASES} <= rules
    assert rules - triggered == set()
    assert rules - passing == set()


def test_pack_loads_against_its_domain(pack: PolicyPack, domain: Domain) -> None:
    model = pack.model
    assert model.domain == DOMAIN and not model.approvals
    assert not pack.allows("zendesk_delete_item")
    assert set(model.tools.effects) == set(domain.tools)
    writes = {
        name for name, tool in domain.tools.items() if tool.writes and name != "knowledge_base_search_policy"
    }
    assert {t for t, e in model.tools.effects.items() if e is not EffectClass.READ} == writes
    irreversible = {t for t, e in model.tools.effects.items() if e is EffectClass.IRREVERSIBLE}
    assert len(writes) == 13 and len(irreversible) == 9  # SPEC §4: 13 write state, 9 business-irreversible


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("**", "").replace("\\", "")).strip().lower()


def _policy_corpus(bench: BenchData) -> str:
    folder = Path(bench.bundle) / "data" / "derived_policy"
    text = (folder / f"{DOMAIN}.policy_kb_sources.md").read_text(encoding="utf-8")
    text += "\n" + (folder / f"{DOMAIN}.system_prompt.md").read_text(encoding="utf-8")
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)  # bullets and headings
    text = re.sub(r"(?m)^[ \t]*\|?[ \t]*|[ \t]*\|?[ \t]*$", "", text)  # table borders
    return _normalise(text)


def test_quotes_are_verbatim_and_no_record_is_named(bench: BenchData, pack: PolicyPack) -> None:
    """Every quote (fragments between "[...]") is in the policy texts, modulo whitespace and markup."""
    corpus = _policy_corpus(bench)
    for rule in pack.model.checks:
        assert rule.source.quote and rule.source.ref, rule.id
        for fragment in rule.source.quote.split("[...]"):
            piece = _normalise(fragment).strip(" .:")
            assert not piece or piece in corpus, f"{rule.id}: {piece!r} is not in the policy text"
    ids = re.compile(r"\b(?:WD|OAA|APR|ASN|LAL|OGM|OSA|NTF|SEC|LIC|HW-ORDER)-\d|VDB-HW-\d|test_[a-z]{2}_\d")
    for path in (PACK, PACK.with_name("checks.py")):
        assert not ids.search(path.read_text(encoding="utf-8")), f"{path} names a record or task"


def test_golden_sample_commits_through_the_pack(
    bench: BenchData, sqlite_db: Database, pack: PolicyPack
) -> None:
    """Every 4th task replayed through the pack commits its golden end state (the CLI replays all)."""
    tasks: list[Task] = bench.tasks([DOMAIN])[::4]
    result = replay(bench, sqlite_db, DOMAIN, tasks, "guard", pack)
    assert [(t.task_id, t.messages) for t in result.tasks if not (t.committed and t.golden)] == []
    assert result.committed_golden == len(tasks) and result.violations == 0 and result.rolled_back == 0
