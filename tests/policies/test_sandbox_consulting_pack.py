"""The consulting pack (policies/sandbox_consulting): it loads against its domain, quotes the policy
verbatim, names no record or task, and every rule refuses a hand-made fault and lets the corrected call
(or session) through.

The cases are golden-free: a small world of made-up employees, engagements, clients, courses, licences,
folders, devices and expense reports is patched over the domain's default state, and each case makes
its own calls. A fault case expects exactly its rule (so removing the rule fails the test); its pass
case changes the one thing the rule is about.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.guarded import backend_for, executor_for, load_domain_policy, tool_infos
from benchmark.tasks import BenchData
from guard.models import EffectClass, Verdict
from guard.policy import PolicyPack
from guard.session import GuardSession

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "policies" / "sandbox_consulting" / "policy.yaml"
DOMAIN = "sandbox_consulting"


@pytest.fixture(scope="module")
def consulting(bench: BenchData) -> Domain:
    return load_domain(DOMAIN, bench.bundle)


@pytest.fixture(scope="module")
def pack(consulting: Domain) -> PolicyPack:
    return load_domain_policy(PACK, consulting)


# -- the world the cases run in ------------------------------------------------------------------------
ANA = "ana.analyst@msg.com"  # Analyst on an active engagement, every client prerequisite complete
CARL = "carl.consultant@msg.com"  # Consultant on the same engagement, clearance in progress, no NDA
DAN = "dan.ready@msg.com"  # prerequisites complete, no client access approval
FAY = "fay.fresh@msg.com"  # cleared, assigned, NDA not yet signed
NINA = "nina.newhire@msg.com"  # new hire with the four mandatory courses completed
MIA = "mia.manager@msg.com"
PAT = "pat.partner@msg.com"
SAM = "sam.senior@msg.com"  # the engagement's senior manager
EVE = "eve.engmgr@msg.com"  # the engagement's manager (Salesforce)
BOB = "bob.backup@msg.com"

ENG = "ENG-7000001"  # active, client CLT-7000001
ENG_OTHER = "ENG-7000003"  # active, nobody of the world assigned
ENG_B = "ENG-7000004"  # active, client CLT-7000002 (no NDA required)
CLIENT = "CLT-7000001"
CLIENT_NO_NDA = "CLT-7000002"
CLIENT_UNSTAFFED = "CLT-7000003"


def _employee(email: str, level: str, **extra: Any) -> dict[str, Any]:
    return {
        "email": email,
        "name": email.split("@")[0].replace(".", " ").title(),
        "level": level,
        "office_location": "New York",
        "start_date": "2022-01-10T00:00:00Z",
        "manager_email": MIA,
        "partner_email": PAT,
        "onboarding_phase": "completed",
        "availability_status": "available",
        "backup_approver_email": None,
        **extra,
    }


def _assignment(n: int, email: str, code: str = ENG, status: str = "active") -> dict[str, Any]:
    return {
        "id": f"ASN-70000{n:02d}",
        "employee_email": email,
        "engagement_code": code,
        "assignment_status": status,
        "start_date": "2025-01-01T00:00:00Z",
        "end_date": "2026-06-30T00:00:00Z",
        "senior_manager_email": SAM,
    }


def _course(cid: str, title: str, **extra: Any) -> dict[str, Any]:
    row = {
        "id": cid,
        "title": title,
        "cost": 0,
        "training_category": "must_have",
        "max_seats": None,
        "start_date": None,
        "end_date": None,
        "prerequisites": [],
    }
    return {**row, **extra}


def _approval(n: int, kind: str, requester: str, approver: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"APR-70000{n:02d}",
        "request_type": kind,
        "requester_email": requester,
        "approver_email": approver,
        "amount": None,
        "engagement_code": None,
        "status": status,
        **extra,
    }


def _enrolled(n: int, email: str, course: str, done: bool = True) -> dict[str, Any]:
    return {
        "id": f"ENR-70000{n:02d}",
        "employee_email": email,
        "course_id": course,
        "completion_date": "2025-06-01T00:00:00Z" if done else None,
    }


MANDATORY = {
    "CRS-7000011": "Ethics & Code of Conduct",
    "CRS-7000012": "Security Awareness",
    "CRS-7000013": "Data Privacy",
    "CRS-7000014": "Anti-harassment",
}

WORLD: dict[str, list[dict[str, Any]]] = {
    "workday_employees": [
        _employee(ANA, "Analyst"),
        _employee(CARL, "Consultant"),
        _employee(DAN, "Consultant"),
        _employee(FAY, "Consultant"),
        _employee(
            NINA, "Analyst", start_date="2025-09-15T00:00:00Z", onboarding_phase="day_7_30_engagement_ramp"
        ),
        _employee(MIA, "Manager", manager_email=PAT, backup_approver_email=BOB),
        _employee(PAT, "Partner", manager_email=None, partner_email=None),
        _employee(SAM, "Senior Manager", manager_email=PAT),
        _employee(EVE, "Manager", manager_email=PAT),
        _employee(BOB, "Senior Manager", manager_email=PAT),
    ],
    "mavenlink_mv_engagements": [
        {
            "engagement_code": code,
            "status": "active",
            "start_date": "2025-01-01T00:00:00Z",
            "end_date": "2026-06-30T00:00:00Z",
            "senior_manager_email": SAM,
        }
        for code in (ENG, ENG_OTHER, ENG_B)
    ],
    "salesforce_crm_sf_engagements": [
        {
            "engagement_code": code,
            "client_id": client,
            "engagement_manager_email": EVE,
            "status": "active",
            "start_date": "2025-01-01T00:00:00Z",
            "end_date": "2026-06-30T00:00:00Z",
        }
        for code, client in ((ENG, CLIENT), (ENG_OTHER, "CLT-7000009"), (ENG_B, CLIENT_NO_NDA))
    ],
    "mavenlink_employee_assignments": [
        _assignment(1, ANA),
        _assignment(2, CARL),
        _assignment(3, DAN),
        _assignment(4, FAY),
        _assignment(5, FAY, ENG_B),
    ],
    "salesforce_crm_clients": [
        {
            "id": CLIENT,
            "name": "Client One",
            "requires_nda": True,
            "clearance_level": "standard",
            "required_training_courses": ["CRS-7000009"],
        },
        {
            "id": CLIENT_NO_NDA,
            "name": "Client Two",
            "requires_nda": False,
            "clearance_level": "standard",
            "required_training_courses": [],
        },
        {
            "id": CLIENT_UNSTAFFED,
            "name": "Client Three",
            "requires_nda": True,
            "clearance_level": "standard",
            "required_training_courses": [],
        },
    ],
    "client_access_clearance_record": [
        {"employee_email": ANA, "clearance_level": "standard", "status": "cleared"},
        {"employee_email": CARL, "clearance_level": "standard", "status": "in_progress"},
        {"employee_email": DAN, "clearance_level": "standard", "status": "cleared"},
        {"employee_email": FAY, "clearance_level": "standard", "status": "cleared"},
    ],
    "client_access_nda_record": [
        {"employee_email": ANA, "client_id": CLIENT, "status": "signed"},
        {"employee_email": DAN, "client_id": CLIENT, "status": "signed"},
        {"employee_email": CARL, "client_id": CLIENT, "status": "not_signed"},
        {"employee_email": FAY, "client_id": CLIENT, "status": "not_signed"},
    ],
    "degreed_training_courses": [
        _course(
            "CRS-7000001",
            "Overlapping Workshop",
            training_category="nice_to_have",
            start_date="2025-11-10T09:00:00Z",
            end_date="2025-11-12T17:00:00Z",
        ),
        _course("CRS-7000002", "Internal Basics"),
        _course(
            "CRS-7000003",
            "Tech Conference",
            training_category="conference",
            max_seats=50,
            start_date="2025-11-20T08:00:00Z",
            end_date="2025-11-22T18:00:00Z",
        ),
        _course("CRS-7000004", "Full Session", max_seats=1),
        _course("CRS-7000005", "Internal Advanced", prerequisites=["CRS-7000002"]),
        _course(
            "CRS-7000006",
            "Later Conference",
            training_category="conference",
            start_date="2026-09-01T08:00:00Z",
            end_date="2026-09-03T18:00:00Z",
        ),
        _course("CRS-7000007", "Paid External Course", cost=1200, training_category="nice_to_have"),
        _course("CRS-7000009", "Client Security Training"),
        *(_course(cid, title) for cid, title in MANDATORY.items()),
    ],
    "degreed_training_enrollments": [
        _enrolled(1, ANA, "CRS-7000009"),
        _enrolled(2, DAN, "CRS-7000009"),
        _enrolled(3, "someone.else@msg.com", "CRS-7000004", done=False),
        *(_enrolled(10 + i, NINA, cid) for i, cid in enumerate(MANDATORY)),
    ],
    "software_catalog_software_catalog": [
        {"id": "CAT-7000001", "name": "Specialized Tool", "annual_cost": 300, "pool_type": "standard"},
        {"id": "CAT-7000002", "name": "Pricey Suite", "annual_cost": 900, "pool_type": "enterprise"},
        {"id": "CAT-7000003", "name": "Salesforce", "annual_cost": 0, "pool_type": "enterprise"},
        {"id": "CAT-7000004", "name": "Full Tool", "annual_cost": 100, "pool_type": "standard"},
    ],
    "license_management_license_pool_record": [
        {"catalog_id": "CAT-7000001", "pool_type": "standard", "total_licenses": 10},
        {"catalog_id": "CAT-7000002", "pool_type": "enterprise", "total_licenses": None},
        {"catalog_id": "CAT-7000003", "pool_type": "enterprise", "total_licenses": None},
        {"catalog_id": "CAT-7000004", "pool_type": "standard", "total_licenses": 1},
    ],
    "license_management_license_allocation": [
        {
            "id": "LIC-7000001",
            "catalog_id": "CAT-7000004",
            "employee_email": "someone.else@msg.com",
            "engagement_code": None,
            "pool_type": "standard",
            "deallocated_at": None,
        }
    ],
    "approval_approval_requests": [
        _approval(1, "software_access", ANA, MIA, "approved", amount=300, engagement_code=ENG),
        _approval(2, "client_access", ANA, EVE, "approved"),
        _approval(3, "client_access", CARL, EVE, "approved"),
    ],
    "box_folders": [
        {
            "id": "FLD-7000001",
            "folder_name": "Confidential Finance",
            "confidentiality_level": "confidential",
            "owner_email": "finance@msg.com",
            "client_id": None,
            "engagement_code": None,
        },
        {
            "id": "FLD-7000002",
            "folder_name": "Client One Documents",
            "confidentiality_level": "client_confidential",
            "owner_email": EVE,
            "client_id": CLIENT,
            "engagement_code": ENG,
        },
        {
            "id": "FLD-7000003",
            "folder_name": "Public Templates",
            "confidentiality_level": "public",
            "owner_email": "marketing@msg.com",
            "client_id": None,
            "engagement_code": None,
        },
    ],
    "asset_management_devices": [
        {
            "id": f"MSG7000000{n}",
            "device_type": "laptop",
            "model": "Standard Laptop",
            "age_months": age,
            "inventory_status": status,
            "location": "New York",
        }
        for n, age, status in ((1, 1, "available"), (2, 40, "assigned"), (3, 50, "retired"))
    ],
    "asset_management_device_assignments": [
        {"id": "ASMT-7000001", "asset_id": "MSG70000002", "employee_email": ANA, "returned_at": None}
    ],
    "concur_expense_reports": [
        {
            "id": report,
            "employee_email": ANA,
            "amount": amount,
            "category": "meals",
            "trip_location_city": "Boston",
            "trip_location_state": "MA",
            "expense_date": "2025-09-01T00:00:00Z",
            "receipt_status": receipt,
            "rejection_reason": reason,
            "override_approved": False,
            "override_approved_by": None,
            "override_reason": None,
        }
        for report, amount, receipt, reason in (
            ("EXP-7000001", 120, "missing", "Receipt missing"),
            ("EXP-7000002", 40, "attached", None),
            ("EXP-7000003", 60, "attached", "Flagged by the system"),
        )
    ],
    "zendesk_users": [
        {
            "id": str(901 + i),
            "name": email.split("@")[0],
            "email": email,
            "role": "end-user",
            "created_at": "2025-01-01T00:00:00Z",
            "updated_at": "2025-01-01T00:00:00Z",
        }
        for i, email in enumerate((ANA, PAT, CARL, NINA, FAY))
    ],
    "zendesk_tickets": [
        {
            "id": "950",
            "subject": "Existing request",
            "description": "An earlier request of Ana's",
            "status": "open",
            "priority": "normal",
            "type": "task",
            "requester_id": "901",
            "assignee_id": "157",
            "tags": ["other"],
            "created_at": "2025-09-30T10:00:00Z",
            "updated_at": "2025-09-30T10:00:00Z",
        }
    ],
}

# -- calls -------------------------------------------------------------------------------------------
Call = tuple[str, dict[str, Any]]
TICKET: dict[str, Any] = {
    "subject": "Request",
    "description": "What the employee asked for",
    "status": "open",
    "priority": "normal",
    "type": "task",
    "requester_id": "901",
    "assignee_id": "157",
    "tags": ["software_access"],
}


def ticket(**fields: Any) -> Call:
    return "zendesk_create_item", {"table": "tickets", "item": {**TICKET, **fields}}


def update(ticket_id: str, **fields: Any) -> Call:
    return "zendesk_update_item", {"table": "tickets", "id": ticket_id, "item": fields}


def solve(end: str = "solved", **fields: Any) -> list[Call]:
    """A new ticket (the session's first: id 7 after the five defaults and the world's one), resolved."""
    return [ticket(**fields), update("7", status=end)]


def approval(kind: str, requester: str, approver: str, **extra: Any) -> Call:
    args = {"request_type": kind, "requester_email": requester, "approver_email": approver, **extra}
    return "approval_create_request", args


def allocate(email: str, catalog_id: str, pool: str, code: str | None = ENG) -> Call:
    args = {"action": "allocate", "email": email, "catalog_id": catalog_id, "pool_type": pool}
    return "license_management_api", {**args, **({"engagement_code": code} if code else {})}


def enroll(email: str, course_id: str) -> Call:
    return "degreed_api", {"action": "enroll_employee", "email": email, "course_id": course_id}


def client(action: str, email: str, client_id: str) -> Call:
    args = {"action": action, "email": email, "client_id": client_id}
    if action == "provision_client_system":
        args |= {"system_name": "Client Portal", "access_type": "read_only"}
    return "client_access_api", args


def nda(email: str, client_id: str) -> Call:
    return "nda_api", {"action": "send_for_signature", "email": email, "client_id": client_id}


def grant(email: str, folder_id: str, permission: str = "viewer") -> Call:
    args = {"action": "grant_folder_access", "email": email, "folder_id": folder_id}
    return "box_api", {**args, "permission_level": permission}


def device(action: str, asset_id: str, email: str | None = ANA) -> Call:
    return "asset_management_api", {
        "action": action,
        "asset_id": asset_id,
        **({"email": email} if email else {}),
    }


def override(report: str, reason: str, approver: str = MIA) -> Call:
    args = {"action": "override_expense_rejection", "expense_report_id": report}
    return "concur_api", {**args, "override_reason": reason, "approver_email": approver}


APPROVED_EXPENSE = {"approval_approval_requests": [_approval(20, "expense_override", ANA, MIA, "approved")]}
APPROVED_DOCUMENT = {"approval_approval_requests": [_approval(21, "document_access", ANA, MIA, "approved")]}
APPROVED_TRAINING_COST = {
    "approval_approval_requests": [_approval(22, "training_cost", ANA, MIA, "approved")]
}
APPROVED_COORDINATION = {
    "approval_approval_requests": [_approval(23, "training_engagement_coordination", ANA, SAM, "approved")]
}
PENDING_DOCUMENT = {"approval_approval_requests": [_approval(24, "document_access", ANA, MIA, "pending")]}
PENDING_HARDWARE = {
    "approval_approval_requests": [_approval(25, "hardware_replacement", ANA, MIA, "pending")]
}
ANA_DID_BASICS = {"degreed_training_enrollments": [_enrolled(30, ANA, "CRS-7000002")]}


@dataclass
class Case:
    """Calls made in order on the world (+ ``patch``). A call case judges the last call; a commit
    case (``commit=True``) makes every call and then commits."""

    rule: str
    calls: list[Call]
    patch: Mapping[str, list[dict[str, Any]]] = field(default_factory=dict)
    commit: bool = False


def c(rule: str, *calls: Call, patch: Mapping[str, list[dict[str, Any]]] | None = None) -> Case:
    return Case(rule, list(calls), patch or {})


def at_commit(rule: str, *calls: Call | list[Call], patch: Mapping[str, Any] | None = None) -> Case:
    flat: list[Call] = []
    for item in calls:
        flat.extend(item if isinstance(item, list) else [item])
    return Case(rule, flat, patch or {}, commit=True)


# Each rule: (a fault it refuses, the corrected call or session that passes it).
CASES: list[tuple[Case, Case]] = [
    # approvals
    (
        c("consult.approval.approver_by_request_type", approval("hardware_replacement", ANA, PAT)),
        c("consult.approval.approver_by_request_type", approval("hardware_replacement", ANA, MIA)),
    ),
    (
        c("consult.approval.software_tier", approval("software_access", PAT, MIA, amount=300)),
        c("consult.approval.software_tier", approval("software_access", ANA, MIA, amount=300)),
    ),
    (
        c("consult.approval.training_cost_tier", approval("training_cost", ANA, MIA, amount=0)),
        c("consult.approval.training_cost_tier", approval("training_cost", ANA, MIA, amount=1200)),
    ),
    (
        c("consult.approval.amount_only_cost_based", approval("hardware_replacement", ANA, MIA, amount=100)),
        c("consult.approval.amount_only_cost_based", approval("hardware_replacement", ANA, MIA)),
    ),
    (
        c("consult.approval.amount_for_cost_based", approval("travel", ANA, MIA)),
        c("consult.approval.amount_for_cost_based", approval("travel", ANA, MIA, amount=500)),
    ),
    (
        c("consult.approval.amount_is_the_cost", approval("expense_override", ANA, MIA, amount=999)),
        c("consult.approval.amount_is_the_cost", approval("expense_override", ANA, MIA, amount=120)),
    ),
    (
        c(
            "consult.approval.engagement_code_validated",
            approval("software_access", ANA, MIA, amount=300, engagement_code=ENG_OTHER),
        ),
        c(
            "consult.approval.engagement_code_validated",
            approval("software_access", ANA, MIA, amount=300, engagement_code=ENG),
        ),
    ),
    (
        c("consult.approval.client_access_after_prerequisites", approval("client_access", CARL, EVE)),
        c("consult.approval.client_access_after_prerequisites", approval("client_access", DAN, EVE)),
    ),
    (
        c(
            "consult.approval.no_duplicate_pending",
            approval("hardware_replacement", ANA, MIA),
            patch=PENDING_HARDWARE,
        ),
        c("consult.approval.no_duplicate_pending", approval("hardware_replacement", ANA, MIA)),
    ),
    # provisioning and expense overrides
    (
        c("consult.provisioning.no_open_approval", grant(ANA, "FLD-7000003"), patch=PENDING_DOCUMENT),
        c("consult.provisioning.no_open_approval", grant(ANA, "FLD-7000003")),
    ),
    (
        c("consult.expense.override_after_approval", override("EXP-7000001", "receipt_exception")),
        c(
            "consult.expense.override_after_approval",
            override("EXP-7000001", "receipt_exception"),
            patch=APPROVED_EXPENSE,
        ),
    ),
    (
        c("consult.expense.override_only_rejected", override("EXP-7000002", "system_error")),
        c("consult.expense.override_only_rejected", override("EXP-7000003", "system_error")),
    ),
    (
        c(
            "consult.expense.receipt_exception_needs_receipt_gap",
            override("EXP-7000003", "receipt_exception"),
            patch=APPROVED_EXPENSE,
        ),
        c(
            "consult.expense.receipt_exception_needs_receipt_gap",
            override("EXP-7000001", "receipt_exception"),
            patch=APPROVED_EXPENSE,
        ),
    ),
    (
        c("consult.expense.system_error_only_compliant_receipt", override("EXP-7000001", "system_error")),
        c("consult.expense.system_error_only_compliant_receipt", override("EXP-7000003", "system_error")),
    ),
    # licences and onboarding
    (
        c("consult.license.pool_of_the_catalog", allocate(ANA, "CAT-7000001", "enterprise")),
        c("consult.license.pool_of_the_catalog", allocate(ANA, "CAT-7000001", "standard")),
    ),
    (
        c("consult.license.standard_pool_capacity", allocate(ANA, "CAT-7000004", "standard")),
        c("consult.license.standard_pool_capacity", allocate(ANA, "CAT-7000001", "standard")),
    ),
    (
        c("consult.license.engagement_code_required", allocate(ANA, "CAT-7000001", "standard", code=None)),
        c("consult.license.engagement_code_required", allocate(NINA, "CAT-7000003", "enterprise", code=None)),
    ),
    (
        c("consult.license.engagement_code_validated", allocate(ANA, "CAT-7000001", "standard", ENG_OTHER)),
        c("consult.license.engagement_code_validated", allocate(ANA, "CAT-7000001", "standard", ENG)),
    ),
    (
        c("consult.license.approved_when_required", allocate(CARL, "CAT-7000001", "standard")),
        c("consult.license.approved_when_required", allocate(ANA, "CAT-7000001", "standard")),
    ),
    (
        c(
            "consult.onboarding.phase_3_after_mandatory_training",
            ("okta_provision_access", {"email": ANA, "app_name": "Salesforce"}),
        ),
        c(
            "consult.onboarding.phase_3_after_mandatory_training",
            ("okta_provision_access", {"email": NINA, "app_name": "Salesforce"}),
        ),
    ),
    # training
    (
        c("consult.training.seat_available", enroll(ANA, "CRS-7000004")),
        c("consult.training.seat_available", enroll(ANA, "CRS-7000002")),
    ),
    (
        c("consult.training.prerequisites_completed", enroll(ANA, "CRS-7000005")),
        c("consult.training.prerequisites_completed", enroll(ANA, "CRS-7000005"), patch=ANA_DID_BASICS),
    ),
    (
        c(
            "consult.training.no_conference_during_active_engagement",
            enroll(ANA, "CRS-7000003"),
            patch=APPROVED_COORDINATION,
        ),
        c("consult.training.no_conference_during_active_engagement", enroll(ANA, "CRS-7000006")),
    ),
    (
        c("consult.training.cost_approved", enroll(ANA, "CRS-7000007")),
        c("consult.training.cost_approved", enroll(ANA, "CRS-7000007"), patch=APPROVED_TRAINING_COST),
    ),
    (
        c("consult.training.overlap_approved", enroll(ANA, "CRS-7000001")),
        c("consult.training.overlap_approved", enroll(ANA, "CRS-7000001"), patch=APPROVED_COORDINATION),
    ),
    # client access, clearance, NDA
    (
        c("consult.client_access.engagement_assignment", client("provision_vpn", ANA, CLIENT_NO_NDA)),
        c("consult.client_access.engagement_assignment", client("provision_vpn", ANA, CLIENT)),
    ),
    (
        c("consult.client_access.prerequisites_complete", client("provision_client_system", CARL, CLIENT)),
        c("consult.client_access.prerequisites_complete", client("provision_client_system", ANA, CLIENT)),
    ),
    (
        c("consult.client_access.approved", client("provision_vpn", DAN, CLIENT)),
        c("consult.client_access.approved", client("provision_vpn", ANA, CLIENT)),
    ),
    (
        c(
            "consult.clearance.not_already_cleared",
            ("background_check_api", {"action": "initiate", "email": ANA, "clearance_level": "standard"}),
        ),
        c(
            "consult.clearance.not_already_cleared",
            (
                "background_check_api",
                {"action": "initiate", "email": ANA, "clearance_level": "high_security"},
            ),
        ),
    ),
    (
        c("consult.nda.not_already_signed", nda(ANA, CLIENT)),
        c("consult.nda.not_already_signed", nda(FAY, CLIENT)),
    ),
    (
        c("consult.nda.only_when_required", nda(FAY, CLIENT_NO_NDA)),
        c("consult.nda.only_when_required", nda(FAY, CLIENT)),
    ),
    (
        c("consult.nda.after_clearance", nda(CARL, CLIENT)),
        c("consult.nda.after_clearance", nda(FAY, CLIENT)),
    ),
    (
        c("consult.nda.after_engagement_assignment", nda(FAY, CLIENT_UNSTAFFED)),
        c("consult.nda.after_engagement_assignment", nda(FAY, CLIENT)),
    ),
    # Box folders
    (
        c("consult.box.viewer_only", grant(ANA, "FLD-7000003", "editor")),
        c("consult.box.viewer_only", grant(ANA, "FLD-7000003", "viewer")),
    ),
    (
        c("consult.box.confidential_approved", grant(ANA, "FLD-7000001")),
        c("consult.box.confidential_approved", grant(ANA, "FLD-7000001"), patch=APPROVED_DOCUMENT),
    ),
    (
        c("consult.box.client_confidential_prerequisites", grant(CARL, "FLD-7000002")),
        c("consult.box.client_confidential_prerequisites", grant(ANA, "FLD-7000002")),
    ),
    # hardware
    (
        c("consult.assets.assign_from_inventory", device("assign_device", "MSG70000003")),
        c("consult.assets.assign_from_inventory", device("assign_device", "MSG70000001")),
    ),
    (
        c("consult.assets.retire_the_old_device", device("retire_device", "MSG70000001", email=None)),
        c("consult.assets.retire_the_old_device", device("retire_device", "MSG70000002", email=None)),
    ),
    # tickets: one call
    (
        c(
            "consult.tickets.no_comments",
            (
                "zendesk_create_item",
                {"table": "comments", "item": {"ticket_id": "950", "author_id": "157", "body": "note"}},
            ),
        ),
        c("consult.tickets.no_comments", update("950", description="Details go into the description")),
    ),
    (
        c("consult.tickets.created_open", ticket(status="pending")),
        c("consult.tickets.created_open", ticket(status="open")),
    ),
    (
        c("consult.tickets.never_closed", update("950", status="closed")),
        c("consult.tickets.never_closed", update("950", status="solved")),
    ),
    (
        c("consult.tickets.assignee_is_agent", ticket(assignee_id="2")),
        c("consult.tickets.assignee_is_agent", ticket(assignee_id="157")),
    ),
    (
        c("consult.tickets.required_fields", ticket(priority=None)),
        c("consult.tickets.required_fields", ticket(priority="normal")),
    ),
    (
        c("consult.tickets.no_incident_type", update("950", type="incident")),
        c("consult.tickets.no_incident_type", update("950", type="problem")),
    ),
    (
        c("consult.tickets.unused_fields", ticket(organization_id="1")),
        c("consult.tickets.unused_fields", ticket()),
    ),
    (
        c("consult.tickets.tags_without_hash", ticket(tags=["#software_access"])),
        c("consult.tickets.tags_without_hash", ticket(tags=["software_access"])),
    ),
    (
        c("consult.tickets.custom_field_formats", ticket(catalog_id="CAT-123")),
        c("consult.tickets.custom_field_formats", ticket(catalog_id="CAT-7000001,CAT-7000002")),
    ),
    (
        c("consult.tickets.approver_id_format", ticket(approver_id=f"{PAT}, {MIA}")),
        c("consult.tickets.approver_id_format", ticket(approver_id=f"{MIA},{PAT}")),
    ),
    (
        c("consult.tickets.engagement_code_validated", ticket(engagement_code=ENG_OTHER)),
        c("consult.tickets.engagement_code_validated", ticket(engagement_code=ENG)),
    ),
    # tickets: the session's end state
    (
        at_commit("consult.tickets.resolved_before_commit", ticket()),
        at_commit("consult.tickets.resolved_before_commit", solve()),
    ),
    (
        at_commit(
            "consult.tickets.every_request_has_a_ticket",
            ("background_check_api", {"action": "initiate", "email": CARL, "clearance_level": "standard"}),
        ),
        at_commit(
            "consult.tickets.every_request_has_a_ticket",
            ("background_check_api", {"action": "initiate", "email": CARL, "clearance_level": "standard"}),
            solve("pending", requester_id="903", tags=["client_access"]),
        ),
    ),
    (
        at_commit(
            "consult.tickets.pending_while_approval_pending",
            approval("hardware_replacement", ANA, MIA),
            solve(tags=["hardware_request"], approval_required="yes", approver_id=MIA),
        ),
        at_commit(
            "consult.tickets.pending_while_approval_pending",
            approval("hardware_replacement", ANA, MIA),
            solve("pending", tags=["hardware_request"], approval_required="yes", approver_id=MIA),
        ),
    ),
    (
        at_commit(
            "consult.tickets.pending_while_prerequisite_in_progress",
            nda(FAY, CLIENT),
            solve(requester_id="905", tags=["client_access"], client_id=CLIENT),
        ),
        at_commit(
            "consult.tickets.pending_while_prerequisite_in_progress",
            nda(FAY, CLIENT),
            solve("pending", requester_id="905", tags=["client_access"], client_id=CLIENT),
        ),
    ),
    (
        at_commit("consult.tickets.one_category_tag", solve(tags=["software_access", "other"])),
        at_commit("consult.tickets.one_category_tag", solve(tags=["software_access", "follow_up"])),
    ),
    (
        at_commit("consult.tickets.partner_urgent", solve(requester_id="902")),
        at_commit("consult.tickets.partner_urgent", solve(requester_id="902", priority="urgent")),
    ),
    (
        at_commit(
            "consult.tickets.rejected_expense_high",
            solve(expense_report_id="EXP-7000001", tags=["expense_support"]),
        ),
        at_commit(
            "consult.tickets.rejected_expense_high",
            solve(expense_report_id="EXP-7000001", tags=["expense_support"], priority="high"),
        ),
    ),
    (
        at_commit("consult.tickets.low_only_informational", solve(priority="low")),
        at_commit("consult.tickets.low_only_informational", solve(priority="low", type="question")),
    ),
    (
        at_commit("consult.tickets.custom_field_references", solve(folder_id="FLD-7999999")),
        at_commit("consult.tickets.custom_field_references", solve(folder_id="FLD-7000003")),
    ),
    (
        at_commit(
            "consult.tickets.license_pool_of_the_catalog",
            solve(catalog_id="CAT-7000001", license_pool="enterprise"),
        ),
        at_commit(
            "consult.tickets.license_pool_of_the_catalog",
            solve(catalog_id="CAT-7000001", license_pool="standard"),
        ),
    ),
    (
        at_commit(
            "consult.tickets.device_type_of_the_asset",
            solve(asset_id="MSG70000001", device_type="phone", tags=["hardware_request"]),
        ),
        at_commit(
            "consult.tickets.device_type_of_the_asset",
            solve(asset_id="MSG70000001", device_type="laptop", tags=["hardware_request"]),
        ),
    ),
    (
        at_commit("consult.tickets.approval_required_names_approvers", solve(approval_required="yes")),
        at_commit(
            "consult.tickets.approval_required_names_approvers",
            solve(approval_required="yes", approver_id=MIA),
        ),
    ),
    (
        at_commit(
            "consult.tickets.approvals_recorded",
            approval("hardware_replacement", ANA, MIA),
            solve("pending", tags=["hardware_request"]),
        ),
        at_commit(
            "consult.tickets.approvals_recorded",
            approval("hardware_replacement", ANA, MIA),
            solve("pending", tags=["hardware_request"], approval_required="yes", approver_id=MIA),
        ),
    ),
    (
        at_commit("consult.tickets.license_recorded", allocate(ANA, "CAT-7000001", "standard"), solve()),
        at_commit(
            "consult.tickets.license_recorded",
            allocate(ANA, "CAT-7000001", "standard"),
            solve(catalog_id="CAT-7000001", license_pool="standard"),
        ),
    ),
    (
        at_commit(
            "consult.tickets.folder_recorded", grant(ANA, "FLD-7000003"), solve(tags=["document_access"])
        ),
        at_commit(
            "consult.tickets.folder_recorded",
            grant(ANA, "FLD-7000003"),
            solve(tags=["document_access"], folder_id="FLD-7000003"),
        ),
    ),
    (
        at_commit(
            "consult.tickets.asset_recorded",
            device("assign_device", "MSG70000001"),
            solve(tags=["hardware_request"]),
        ),
        at_commit(
            "consult.tickets.asset_recorded",
            device("assign_device", "MSG70000001"),
            solve(tags=["hardware_request"], asset_id="MSG70000001", device_type="laptop"),
        ),
    ),
    (
        at_commit(
            "consult.tickets.expense_recorded",
            override("EXP-7000003", "system_error"),
            solve(tags=["expense_support"]),
        ),
        at_commit(
            "consult.tickets.expense_recorded",
            override("EXP-7000003", "system_error"),
            solve(tags=["expense_support"], expense_report_id="EXP-7000003", priority="high"),
        ),
    ),
]


def _case_id(case: Case) -> str:
    return case.rule.removeprefix("consult.")


FAULTS = [pytest.param(fault, id=_case_id(fault)) for fault, _ in CASES]
PASSES = [pytest.param(ok, id=_case_id(ok)) for _, ok in CASES]


# -- running a case ------------------------------------------------------------------------------------
@contextmanager
def _session(
    consulting: Domain, database: Database, pack: PolicyPack, patch: Mapping[str, Any]
) -> Iterator[tuple[Environment, GuardSession]]:
    with Environment(consulting, database) as env:
        env.apply_patch(WORLD)
        if patch:
            env.apply_patch(patch)
        session = GuardSession(backend_for(env), executor_for(env), tool_infos(env), pack, session_id="test")
        try:
            yield env, session
        finally:
            if not session.closed:
                session.rollback()


def _run(consulting: Domain, database: Database, pack: PolicyPack, case: Case) -> tuple[Any, set[str]]:
    """(the verdict of the judged call or the commit, the rule ids it reported)."""
    with _session(consulting, database, pack, case.patch) as (_env, session):
        *before, last = case.calls
        for tool, args in before if not case.commit else case.calls:
            outcome = session.call(tool, args)
            assert outcome.verdict is Verdict.ALLOWED, (tool, args, outcome.violations, outcome.result)
        if case.commit:
            result = session.commit()
            return result.committed, {v.rule_id for v in result.violations}
        pending = session.pending_changes()
        outcome = session.call(*last)
        rules = {v.rule_id for v in outcome.violations}
        if outcome.verdict is not Verdict.ALLOWED:
            assert session.pending_changes() == pending, "a refused or rolled-back call left a change"
        return outcome, rules


@pytest.mark.parametrize("case", FAULTS)
def test_rule_refuses_its_fault(
    consulting: Domain, sqlite_db: Database, pack: PolicyPack, case: Case
) -> None:
    verdict, rules = _run(consulting, sqlite_db, pack, case)
    assert rules == {case.rule}
    if case.commit:
        assert verdict is False
    else:
        phase = pack.model.checks[[r.id for r in pack.model.checks].index(case.rule)].phase
        expected = Verdict.REFUSED if phase == "before_call" else Verdict.ROLLED_BACK
        assert verdict.verdict is expected


@pytest.mark.parametrize("case", PASSES)
def test_rule_passes_the_corrected_call(
    consulting: Domain, sqlite_db: Database, pack: PolicyPack, case: Case
) -> None:
    verdict, rules = _run(consulting, sqlite_db, pack, case)
    assert rules == set()
    if case.commit:
        assert verdict is True
    else:
        assert verdict.verdict is Verdict.ALLOWED, verdict.result


_SQL_RULES = {
    rule["id"] for rule in yaml.safe_load(PACK.read_text(encoding="utf-8"))["checks"] if "sql" in rule
}
# Every 2nd SQL rule (their SQL is transpiled per dialect) and every 12th Python rule (plain queries).
SAMPLE = [p for p in CASES if p[0].rule in _SQL_RULES][::2] + [
    p for p in CASES if p[0].rule not in _SQL_RULES
][::12]


@pytest.mark.parametrize("fault,ok", [pytest.param(f, o, id=_case_id(f)) for f, o in SAMPLE])
def test_rules_on_postgresql(
    consulting: Domain, database: Database, pack: PolicyPack, fault: Case, ok: Case
) -> None:
    """A sample of the rules, fault and fix, on PostgreSQL too."""
    if database.dialect == "sqlite":
        pytest.skip("every rule runs on SQLite in the two tests above")
    assert _run(consulting, database, pack, fault)[1] == {fault.rule}
    assert _run(consulting, database, pack, ok)[1] == set()


def test_every_rule_has_a_fault_and_a_pass_case(pack: PolicyPack) -> None:
    ids = [r.id for r in pack.model.checks]
    assert len(ids) == len(set(ids))
    assert sorted(f.rule for f, _ in CASES) == sorted(ids)
    assert all(f.rule == o.rule for f, o in CASES)


# -- the pack as a whole -------------------------------------------------------------------------------
def test_pack_loads_against_its_domain(pack: PolicyPack, consulting: Domain) -> None:
    model = pack.model
    assert model.domain == DOMAIN and model.name == DOMAIN
    assert not pack.allows("zendesk_delete_item")
    assert set(model.tools.effects) == set(consulting.tools)
    assert set(model.tools.allow or ()) == set(consulting.tools) - {"zendesk_delete_item"}
    writes = {n for n, t in consulting.tools.items() if t.writes and n != "knowledge_base_search_policy"}
    writes.add("hardware_procurement_create_order")  # a purchase order: nothing recorded, nothing undone
    assert {t for t, e in model.tools.effects.items() if e is not EffectClass.READ} == writes
    assert not model.approvals
    assert pack.retry_for("license_management_api").max_attempts == 1


def _policy_corpus(bench: BenchData) -> str:
    """The consulting policy texts a rule may quote: the knowledge base and the system prompt."""
    folder = Path(bench.bundle) / "data" / "derived_policy"
    text = (folder / f"{DOMAIN}.policy_kb_sources.md").read_text(encoding="utf-8")
    text += "\n" + (folder / f"{DOMAIN}.system_prompt.md").read_text(encoding="utf-8")
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", html.unescape(text))
    return _normalise(text)


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("**", "").replace("\\", "")).strip().lower()


def test_rules_quote_the_policy_verbatim(bench: BenchData, pack: PolicyPack) -> None:
    """Every quote (fragments between "[...]", sentence by sentence) is in the policy text verbatim."""
    corpus = _policy_corpus(bench)
    for rule in pack.model.checks:
        assert rule.source is not None and rule.source.quote and rule.source.ref, rule.id
        assert rule.source.ref.startswith(("Policy KB", "System prompt")), rule.id
        for fragment in rule.source.quote.split("[...]"):
            for sentence in re.split(r"(?<=[a-z`)\"0-9])\. (?=[A-Z`$])", fragment):
                piece = _normalise(sentence).strip(" .:")
                assert not piece or piece in corpus, f"{rule.id}: {piece!r} is not in the policy text"


def test_pack_names_no_record_or_task() -> None:
    """Identifiers appear only as the policy's formats (ENG-####### ...), never as a record's id."""
    ids = re.compile(
        r"\b(?:ENG|CAT|CLT|EXP|CRS|FLD|HWO|APR|ASN|LIC|ENR|TRV|AAL|VPN|CSA|FAL)-\d|\bMSG\d|test_\w+_\d"
    )
    for path in (PACK, PACK.with_name("checks.py")):
        assert not ids.search(path.read_text(encoding="utf-8")), f"{path} names a record or task"
