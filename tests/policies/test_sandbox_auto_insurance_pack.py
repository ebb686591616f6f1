"""The sandbox_auto_insurance pack: it loads against its domain, quotes the policy verbatim, and each of
its rules refuses a hand-made fault and lets the correct version through.

The cases are golden-free: the domain's default environment plus a small patch of invented records (a
Standard customer with a California policy, two vehicles, two drivers, a past-due billing account and
a Zendesk user), and hand-made calls. Every trigger case expects exactly its rule's id, so removing
the rule from the pack fails the case. They run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import copy
import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.guarded import backend_for, executor_for, load_domain_policy, tool_infos
from benchmark.tasks import BenchData
from guard.models import EffectClass, Verdict
from guard.policy import PolicyPack
from guard.session import GuardSession

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "policies" / "sandbox_auto_insurance" / "policy.yaml"
AUTO = "sandbox_auto_insurance"
TODAY = "2025-10-01"  # the day the reference helpdesk stamps on ticket writes (its frozen clock)


@pytest.fixture(scope="module")
def auto(bench: BenchData) -> Domain:
    return load_domain(AUTO, bench.bundle)


@pytest.fixture(scope="module")
def pack(auto: Domain) -> PolicyPack:
    return load_domain_policy(PACK, auto)


# -- the test world ---------------------------------------------------------------------------------
BASE: dict[str, dict[str, dict[str, Any]]] = {
    "crm_customers": {
        "CUS-T1": {
            "id": "CUS-T1",
            "email": "pat.tester@example.com",
            "first_name": "Pat",
            "last_name": "Tester",
            "date_of_birth": "1980-02-02",
            "tier": "Standard",
            "fraud_flag": False,
            "ssn_last_4": "4321",
        }
    },
    "zendesk_users": {
        "50": {
            "id": "50",
            "name": "Pat Tester",
            "email": "pat.tester@example.com",
            "role": "end-user",
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
        }
    },
    "policy_policies": {
        "POL-T1": {
            "id": "POL-T1",
            "customer_id": "CUS-T1",
            "state": "CA",
            "status": "Active",
            "effective_date": "2025-01-01",
            "expiration_date": "2026-01-01",
            "renewal_date": "2026-01-01",
            "named_insured_id": "CUS-T1",
            "automatic_extension_days": 14,
            "at_fault_claims_3_years": 0,
        }
    },
    "policy_vehicles": {
        "VEH-T1": {
            "id": "VEH-T1",
            "policy_id": "POL-T1",
            "vin": "1HGCM82633A000001",
            "year": 2020,
            "make": "Honda",
            "model": "Civic",
            "status": "Active",
            "effective_date": "2025-01-01",
            "date_added_to_policy": "2025-01-01",
            "collision_coverage": True,
            "comprehensive_coverage": True,
        },
        "VEH-T2": {
            "id": "VEH-T2",
            "policy_id": "POL-T1",
            "vin": "2T1BURHE1HC000002",
            "year": 2019,
            "make": "Toyota",
            "model": "Camry",
            "status": "Active",
            "effective_date": "2025-01-01",
            "date_added_to_policy": "2025-01-01",
            "collision_coverage": True,
            "comprehensive_coverage": False,
        },
    },
    "policy_drivers": {
        "DRV-T1": {
            "id": "DRV-T1",
            "policy_id": "POL-T1",
            "customer_id": "CUS-T1",
            "name": "Pat Tester",
            "date_of_birth": "1980-02-02",
            "relationship": "Self",
            "status": "Rated",
            "effective_date": "2025-01-01",
            "is_named_insured": True,
        },
        "DRV-T2": {
            "id": "DRV-T2",
            "policy_id": "POL-T1",
            "name": "Sam Tester",
            "date_of_birth": "2005-06-06",
            "relationship": "Son",
            "status": "Rated",
            "effective_date": "2025-01-01",
        },
    },
    "billing_billing_accounts": {
        "BILL-T1": {
            "id": "BILL-T1",
            "policy_id": "POL-T1",
            "customer_id": "CUS-T1",
            "status": "Past Due",
            "monthly_payment": 20000,
            "past_due_amount": 35000,
            "current_due_date": "2025-09-15",
            "payment_received": False,
            "arrangements_12_months": 0,
        }
    },
}


def _patch(rows: dict[str, dict[str, dict[str, Any]]], extra: dict[str, list[dict[str, Any]]]) -> dict:
    world = copy.deepcopy(BASE)
    for table, by_id in rows.items():
        for row_id, changes in by_id.items():
            world.setdefault(table, {}).setdefault(row_id, {"id": row_id}).update(changes)
    patch = {table: list(by_id.values()) for table, by_id in world.items()}
    for table, more in extra.items():
        patch.setdefault(table, []).extend(more)
    return patch


def _claim(**fields: Any) -> dict[str, Any]:
    return {
        "id": "CLM-T1",
        "policy_id": "POL-T1",
        "vehicle_id": "VEH-T1",
        "driver_id": "DRV-T2",
        "date_of_loss": "2025-09-01",
        "loss_location": "Fresno, CA",
        "claim_type": "Collision \u2013 Single Vehicle",
        "claim_stage": "Open \u2013 Investigation",
        "severity": "Moderate",
        "created_date": "2025-09-01",
        **fields,
    }


# -- calls --------------------------------------------------------------------------------------------
def ticket(**fields: Any) -> tuple[str, dict[str, Any]]:
    """A ticket create that satisfies every ticket rule, also at commit (outcome Referred, left open)."""
    item = {
        "subject": "Policy change",
        "description": "Customer asked for a policy change.",
        "status": "open",
        "priority": "normal",
        "type": "task",
        "requester_id": "50",
        "assignee_id": "585",
        "request_category": "Policy Servicing",
        "outcome_summary": "Referred",
        "user_type": "Named Insured",
        **fields,
    }
    return "zendesk_create_item", {
        "table": "tickets",
        "item": {k: v for k, v in item.items() if v is not None},
    }


def update_ticket(ticket_id: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return "zendesk_update_item", {"table": "tickets", "id": ticket_id, "item": fields}


NEW_TICKET = "6"  # five default tickets; the first create gets id "6"


def add_vehicle(**args: Any) -> tuple[str, dict[str, Any]]:
    base = {
        "policy_id": "POL-T1",
        "vin": "1HGCM82633A000009",
        "year": 2024,
        "make": "Honda",
        "model": "Accord",
        "effective_date": TODAY,
    }
    return "policy_add_vehicle", {**base, **args}


def add_driver(**args: Any) -> tuple[str, dict[str, Any]]:
    base = {
        "policy_id": "POL-T1",
        "name": "Alex Tester",
        "date_of_birth": "2007-07-07",
        "license_number": "D7654321",
        "license_state": "CA",
        "relationship": "Daughter",
        "status": "Rated",
        "effective_date": TODAY,
    }
    return "policy_add_driver", {**base, **args}


def vehicle_status(vehicle_id: str = "VEH-T1", **args: Any) -> tuple[str, dict[str, Any]]:
    return "policy_update_vehicle_status", {
        "vehicle_id": vehicle_id,
        "new_status": "Removed",
        "effective_date": TODAY,
        **args,
    }


def driver_status(driver_id: str = "DRV-T2", **args: Any) -> tuple[str, dict[str, Any]]:
    return "policy_update_driver_status", {
        "driver_id": driver_id,
        "new_status": "Removed",
        "effective_date": TODAY,
        **args,
    }


def extension(new_due_date: str = "2025-10-11") -> tuple[str, dict[str, Any]]:
    return "billing_grant_extension", {"policy_id": "POL-T1", "new_due_date": new_due_date}


def installments(count: int = 2, amount: int = 17500) -> tuple[str, dict[str, Any]]:
    return "billing_create_installment_plan", {
        "policy_id": "POL-T1",
        "installment_count": count,
        "installment_amount": amount,
    }


def fnol(**args: Any) -> tuple[str, dict[str, Any]]:
    base = {
        "policy_id": "POL-T1",
        "vehicle_id": "VEH-T1",
        "driver_id": "DRV-T1",
        "date_of_loss": "2025-09-30",
        "loss_location": "Fresno, CA",
        "claim_type": "Collision \u2013 Single Vehicle",
        "severity": "Moderate",
        "siu_flag": "None",
        "unlisted_driver_flag": False,
        "has_bodily_injury": False,
        "police_report_required": False,
    }
    return "claims_create_fnol", {**base, **args}


def cancel(**args: Any) -> tuple[str, dict[str, Any]]:
    base = {"policy_id": "POL-T1", "cancellation_date": "2025-10-15", "cancellation_reason": "User Requested"}
    return "policy_schedule_cancellation", {**base, **args}


def reinstate(**args: Any) -> tuple[str, dict[str, Any]]:
    base = {"policy_id": "POL-T1", "lapse_flag": True, "lapse_start": "2025-09-25", "lapse_end": TODAY}
    return "policy_reinstate_policy", {**base, **args}


def document(ticket_id: str = NEW_TICKET, expiration_date: str = "2025-10-02T13:00:00Z") -> tuple[str, dict]:
    return "policy_generate_document_link", {
        "policy_id": "POL-T1",
        "document_type": "id_card",
        "ticket_id": ticket_id,
        "expiration_date": expiration_date,
    }


CANCELLED = {
    "policy_policies": {
        "POL-T1": {
            "status": "Cancelled for Non-Payment",
            "cancellation_date": "2025-09-25",
            "cancellation_reason": "Non-Payment",
        }
    },
    "billing_billing_accounts": {"BILL-T1": {"payment_received": True}},
}


@dataclass
class Case:
    """Steps run in order; every step but the last must be allowed. ``expect`` is the rule ids of the
    last step, or of the commit (after all steps were allowed) when ``commit`` is set."""

    id: str
    steps: list[tuple[str, dict[str, Any]]]
    expect: set[str]
    commit: bool = False
    rows: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    extra: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def merge(*parts: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for part in parts:
        for table, by_id in part.items():
            for row_id, changes in by_id.items():
                out.setdefault(table, {}).setdefault(row_id, {}).update(changes)
    return out


def policy(**fields: Any) -> dict[str, dict[str, dict[str, Any]]]:
    return {"policy_policies": {"POL-T1": fields}}


def customer(**fields: Any) -> dict[str, dict[str, dict[str, Any]]]:
    return {"crm_customers": {"CUS-T1": fields}}


def account(**fields: Any) -> dict[str, dict[str, dict[str, Any]]]:
    return {"billing_billing_accounts": {"BILL-T1": fields}}


MAJOR_CLAIM = {"claims_claims": [_claim(severity="Major")]}
OPEN_CLAIM = {"claims_claims": [_claim()]}
CLOSED_CLAIM = {"claims_claims": [_claim(claim_stage="Closed \u2013 Paid")]}
INJURY = {"severity": "Major", "has_bodily_injury": True, "police_report_required": True}
FNOL_TICKET = {
    "type": "incident",
    "request_category": "Claims",
    "claims_action_type": "FNOL \u2013 Collision",
}

CASES = [
    # vehicles
    Case(
        "vehicle.add_policy_active",
        [add_vehicle()],
        {"auto.vehicle.add_policy_active"},
        rows=policy(status="Pending Cancellation"),
    ),
    Case("vehicle.add_policy_active/grace", [add_vehicle()], set(), rows=policy(status="In Grace Period")),
    Case("vehicle.valid_vin", [add_vehicle(vin="1HGCM8263")], {"auto.vehicle.valid_vin"}),
    Case("vehicle.valid_vin/ok", [add_vehicle()], set()),
    Case(
        "vehicle.excluded",
        [add_vehicle(make="Lamborghini", model="Huracan")],
        {"auto.vehicle.excluded_vehicle"},
    ),
    Case(
        "vehicle.excluded/model",
        [add_vehicle(make="Dodge", model="Challenger SRT Hellcat", uw_pending=True)],
        {"auto.vehicle.excluded_vehicle"},
    ),
    Case(
        "vehicle.excluded/base-corvette",
        [add_vehicle(make="Chevrolet", model="Corvette Stingray", uw_pending=True)],
        set(),
    ),
    Case(
        "vehicle.uw_at_fault",
        [add_vehicle()],
        {"auto.vehicle.uw_at_fault_claims"},
        rows=policy(at_fault_claims_3_years=2),
    ),
    Case(
        "vehicle.uw_at_fault/flagged",
        [add_vehicle(uw_pending=True)],
        set(),
        rows=policy(at_fault_claims_3_years=2),
    ),
    Case(
        "vehicle.uw_high_risk",
        [add_vehicle(make="Porsche", model="911")],
        {"auto.vehicle.uw_high_risk_standard_tier"},
    ),
    Case(
        "vehicle.uw_high_risk/sports",
        [add_vehicle(make="Ford", model="Mustang GT")],
        {"auto.vehicle.uw_high_risk_standard_tier"},
    ),
    Case("vehicle.uw_high_risk/flagged", [add_vehicle(make="Porsche", model="911", uw_pending=True)], set()),
    Case(
        "vehicle.uw_high_risk/preferred",
        [add_vehicle(make="Porsche", model="911")],
        set(),
        rows=customer(tier="Preferred"),
    ),
    Case(
        "vehicle.remove_policy_active",
        [vehicle_status()],
        {"auto.vehicle.remove_policy_active"},
        rows=policy(status="Lapsed"),
    ),
    Case("vehicle.remove/ok", [vehicle_status()], set()),
    Case(
        "vehicle.remove_only_vehicle",
        [vehicle_status()],
        {"auto.vehicle.remove_only_vehicle"},
        rows={"policy_vehicles": {"VEH-T2": {"status": "Removed"}}},
    ),
    Case(
        "vehicle.remove_open_claim", [vehicle_status()], {"auto.vehicle.remove_open_claim"}, extra=OPEN_CLAIM
    ),
    Case("vehicle.remove_open_claim/closed", [vehicle_status()], set(), extra=CLOSED_CLAIM),
    # drivers
    Case(
        "driver.add_policy_active",
        [add_driver()],
        {"auto.driver.add_policy_active"},
        rows=policy(status="Lapsed"),
    ),
    Case("driver.add/ok", [add_driver()], set()),
    Case(
        "driver.add_rated_or_excluded", [add_driver(status="Removed")], {"auto.driver.add_rated_or_excluded"}
    ),
    Case(
        "driver.no_exclusion_ca",
        [add_driver(status="Excluded", exclusion_form_required=True)],
        {"auto.driver.no_exclusion_in_ca_ny"},
    ),
    Case(
        "driver.exclusion_tx",
        [add_driver(status="Excluded", exclusion_form_required=True)],
        set(),
        rows=policy(state="TX"),
    ),
    Case(
        "driver.exclusion_form",
        [add_driver(status="Excluded")],
        {"auto.driver.exclusion_form_flag"},
        rows=policy(state="FL"),
    ),
    Case(
        "driver.no_exclusion_update_ny",
        [driver_status(new_status="Excluded")],
        {"auto.driver.no_exclusion_update_in_ca_ny"},
        rows=policy(state="NY"),
    ),
    Case(
        "driver.exclusion_update_tx", [driver_status(new_status="Excluded")], set(), rows=policy(state="TX")
    ),
    Case(
        "driver.remove_policy_active",
        [driver_status()],
        {"auto.driver.remove_policy_active"},
        rows=policy(status="Lapsed"),
    ),
    Case("driver.remove/ok", [driver_status()], set()),
    Case(
        "driver.remove_named_insured", [driver_status("DRV-T1")], {"auto.driver.remove_named_or_co_insured"}
    ),
    Case(
        "driver.remove_co_insured",
        [driver_status()],
        {"auto.driver.remove_named_or_co_insured"},
        rows={"policy_drivers": {"DRV-T2": {"is_co_insured": True}}},
    ),
    Case("driver.remove_open_claim", [driver_status()], {"auto.driver.remove_open_claim"}, extra=OPEN_CLAIM),
    Case("driver.remove_open_claim/closed", [driver_status()], set(), extra=CLOSED_CLAIM),
    # billing
    Case(
        "billing.status",
        [extension()],
        {"auto.billing.eligible_account_status"},
        rows=account(status="Current"),
    ),
    Case("billing.status/grace", [extension()], set(), rows=account(status="In Grace Period")),
    Case(
        "billing.limit",
        [extension()],
        {"auto.billing.arrangement_limit"},
        rows=account(arrangements_12_months=1),
    ),
    Case(
        "billing.limit/preferred",
        [extension()],
        set(),
        rows=merge(account(arrangements_12_months=1), customer(tier="Preferred")),
    ),
    Case(
        "billing.limit/premium-full",
        [installments()],
        {"auto.billing.arrangement_limit"},
        rows=merge(account(arrangements_12_months=3), customer(tier="Premium")),
    ),
    Case("billing.major_extension", [extension()], {"auto.billing.major_claim_extension"}, extra=MAJOR_CLAIM),
    Case(
        "billing.major_extension/preferred",
        [extension()],
        set(),
        rows=customer(tier="Preferred"),
        extra=MAJOR_CLAIM,
    ),
    Case(
        "billing.major_installment",
        [installments()],
        {"auto.billing.major_claim_installment"},
        rows=customer(tier="Preferred"),
        extra=MAJOR_CLAIM,
    ),
    Case(
        "billing.major_installment/premium",
        [installments()],
        set(),
        rows=customer(tier="Premium"),
        extra=MAJOR_CLAIM,
    ),
    Case("billing.installment/ok", [installments()], set()),
    Case(
        "billing.threshold",
        [installments(2, 14500)],
        {"auto.billing.installment_threshold"},
        rows=account(past_due_amount=29000),
    ),
    Case("billing.count", [installments(3, 11667)], {"auto.billing.installment_count"}),
    Case("billing.count/three", [installments(3, 15000)], set(), rows=account(past_due_amount=45000)),
    Case("billing.amount", [installments(2, 20000)], {"auto.billing.installment_amount"}),
    Case(
        "billing.amount/dollars",
        [installments(2, 17500)],
        set(),
        rows=account(monthly_payment=200, past_due_amount=350),
    ),
    # claims
    Case("claims.policy_status", [fnol()], {"auto.claims.policy_status"}, rows=policy(status="Lapsed")),
    Case("claims.fnol/ok", [fnol()], set()),
    Case("claims.vehicle_of_policy", [fnol(vehicle_id="VEH-T9")], {"auto.claims.vehicle_of_policy"}),
    Case(
        "claims.coverage",
        [fnol(vehicle_id="VEH-T2", claim_type="Comprehensive \u2013 Weather")],
        {"auto.claims.coverage_for_claim_type"},
    ),
    Case(
        "claims.coverage/liability-with-both",
        [fnol(claim_type="Liability Only")],
        {"auto.claims.coverage_for_claim_type"},
    ),
    Case("claims.coverage/liability", [fnol(vehicle_id="VEH-T2", claim_type="Liability Only")], set()),
    Case(
        "claims.severity/glass",
        [fnol(claim_type="Comprehensive \u2013 Glass Only")],
        {"auto.claims.severity"},
    ),
    Case(
        "claims.severity/glass-minor",
        [fnol(claim_type="Comprehensive \u2013 Glass Only", severity="Minor")],
        set(),
    ),
    Case(
        "claims.severity/injury",
        [fnol(has_bodily_injury=True, police_report_required=True)],
        {"auto.claims.severity"},
    ),
    Case("claims.severity/injury-major", [fnol(**INJURY)], set()),
    Case(
        "claims.police_report",
        [fnol(claim_type="Comprehensive \u2013 Theft")],
        {"auto.claims.police_report_required"},
    ),
    Case(
        "claims.police_report/set",
        [fnol(claim_type="Comprehensive \u2013 Theft", police_report_required=True)],
        set(),
    ),
    Case("claims.siu_fraud", [fnol()], {"auto.claims.siu_fraud_flag"}, rows=customer(fraud_flag=True)),
    Case(
        "claims.siu_fraud/flagged",
        [fnol(siu_flag="Suspicious Activity Flagged")],
        set(),
        rows=customer(fraud_flag=True),
    ),
    Case("claims.unlisted", [fnol(driver_id="DRV-T9")], {"auto.claims.unlisted_driver_flag"}),
    Case("claims.unlisted/flagged", [fnol(driver_id="DRV-T9", unlisted_driver_flag=True)], set()),
    Case(
        "claims.unlisted/listed-driver-flagged",
        [fnol(unlisted_driver_flag=True)],
        {"auto.claims.unlisted_driver_flag"},
    ),
    # cancellation, reinstatement, documents
    Case("cancel.status", [cancel()], {"auto.cancel.eligible_status"}, rows=policy(status="Lapsed")),
    Case("cancel/ok", [cancel()], set()),
    Case("cancel.reason", [cancel(cancellation_reason="Fraud")], {"auto.cancel.customer_requested"}),
    Case(
        "reinstate.status",
        [reinstate()],
        {"auto.reinstate.eligible_status"},
        rows=account(payment_received=True),
    ),
    Case("reinstate/ok", [reinstate()], set(), rows=CANCELLED),
    Case(
        "reinstate.payment",
        [reinstate()],
        {"auto.reinstate.payment_received"},
        rows=merge(CANCELLED, account(payment_received=False)),
    ),
    Case(
        "reinstate.lapse_start",
        [reinstate(lapse_start="2025-09-26")],
        {"auto.reinstate.lapse_start"},
        rows=CANCELLED,
    ),
    Case("document.ticket", [document("999")], {"auto.document.ticket_exists"}),
    Case("document/ok", [ticket(), document()], set()),
    # dates, at commit ("today" from this session's ticket stamps)
    Case(
        "dates.driver_add",
        [ticket(), add_driver(effective_date="2025-09-01")],
        {"auto.dates.driver_changes_today"},
        commit=True,
    ),
    Case("dates.driver_add/today", [ticket(), add_driver()], set(), commit=True),
    Case(
        "dates.driver_removal",
        [ticket(), driver_status(effective_date="2025-10-05")],
        {"auto.dates.driver_changes_today"},
        commit=True,
    ),
    Case("dates.driver_removal/today", [ticket(), driver_status()], set(), commit=True),
    Case(
        "dates.vehicle_ca",
        [ticket(), add_vehicle(effective_date="2025-09-30")],
        {"auto.dates.vehicle_add_backdating"},
        commit=True,
    ),
    Case("dates.vehicle_ca/future", [ticket(), add_vehicle(effective_date="2025-10-05")], set(), commit=True),
    Case(
        "dates.vehicle_tx/window",
        [ticket(), add_vehicle(effective_date="2025-09-20")],
        set(),
        commit=True,
        rows=policy(state="TX"),
    ),
    Case(
        "dates.vehicle_tx/outside",
        [ticket(), add_vehicle(effective_date="2025-09-10")],
        {"auto.dates.vehicle_add_backdating"},
        commit=True,
        rows=policy(state="TX"),
    ),
    Case(
        "dates.vehicle_removal",
        [ticket(), vehicle_status(effective_date="2025-09-28")],
        {"auto.dates.vehicle_removal_today"},
        commit=True,
    ),
    Case("dates.vehicle_removal/today", [ticket(), vehicle_status()], set(), commit=True),
    Case(
        "dates.extension", [ticket(), extension("2025-09-25")], {"auto.dates.extension_due_date"}, commit=True
    ),
    Case("dates.extension/plus-10", [ticket(), extension()], set(), commit=True),
    Case(
        "dates.cancel_ca",
        [ticket(), cancel(cancellation_date=TODAY)],
        {"auto.dates.cancellation_notice"},
        commit=True,
    ),
    Case("dates.cancel_ca/tomorrow", [ticket(), cancel(cancellation_date="2025-10-02")], set(), commit=True),
    Case(
        "dates.cancel_tx/today",
        [ticket(), cancel(cancellation_date=TODAY)],
        set(),
        commit=True,
        rows=policy(state="TX"),
    ),
    Case(
        "dates.cancel_tx/past",
        [ticket(), cancel(cancellation_date="2025-09-30")],
        {"auto.dates.cancellation_notice"},
        commit=True,
        rows=policy(state="TX"),
    ),
    Case("dates.reinstate/ok", [ticket(), reinstate()], set(), commit=True, rows=CANCELLED),
    Case(
        "dates.reinstate_window",
        [ticket(), reinstate(lapse_start="2025-09-01")],
        {"auto.dates.reinstatement_window"},
        commit=True,
        rows=merge(CANCELLED, policy(cancellation_date="2025-09-01")),
    ),
    Case(
        "dates.reinstate_window/preferred",
        [ticket(), reinstate(lapse_start="2025-09-05")],
        set(),
        commit=True,
        rows=merge(CANCELLED, policy(cancellation_date="2025-09-05"), customer(tier="Preferred")),
    ),
    Case(
        "dates.reinstate_lapse",
        [ticket(), reinstate(lapse_flag=False)],
        {"auto.dates.reinstatement_lapse"},
        commit=True,
        rows=CANCELLED,
    ),
    Case(
        "dates.reinstate_lapse/end",
        [ticket(), reinstate(lapse_end="2025-09-30")],
        {"auto.dates.reinstatement_lapse"},
        commit=True,
        rows=CANCELLED,
    ),
    Case(
        "dates.reinstate_lapse/before-cancellation",
        [ticket(), reinstate(lapse_flag=False)],
        set(),
        commit=True,
        rows=merge(CANCELLED, policy(cancellation_date="2025-10-10")),
    ),
    Case(
        "dates.document",
        [ticket(), document(expiration_date="2025-10-08T13:00:00Z")],
        {"auto.dates.document_link_expiry"},
        commit=True,
    ),
    Case("dates.document/24h", [ticket(), document()], set(), commit=True),
    Case(
        "dates.siu_old_vehicle",
        [ticket(**FNOL_TICKET), fnol(claim_type="Comprehensive \u2013 Theft", police_report_required=True)],
        {"auto.dates.siu_theft_triggers"},
        commit=True,
        rows={"policy_vehicles": {"VEH-T1": {"year": 2008}}},
    ),
    Case(
        "dates.siu_recent_vehicle",
        [ticket(**FNOL_TICKET), fnol(claim_type="Comprehensive \u2013 Theft", police_report_required=True)],
        {"auto.dates.siu_theft_triggers"},
        commit=True,
        rows={"policy_vehicles": {"VEH-T1": {"date_added_to_policy": "2025-09-20"}}},
    ),
    Case(
        "dates.siu/flagged",
        [
            ticket(**FNOL_TICKET),
            fnol(
                claim_type="Comprehensive \u2013 Theft",
                police_report_required=True,
                siu_flag="Suspicious Activity Flagged",
            ),
        ],
        set(),
        commit=True,
        rows={"policy_vehicles": {"VEH-T1": {"year": 2008}}},
    ),
    Case(
        "dates.siu/not-triggered",
        [ticket(**FNOL_TICKET), fnol(claim_type="Comprehensive \u2013 Theft", police_report_required=True)],
        set(),
        commit=True,
    ),
    # tickets, per call
    Case(
        "tickets.comment",
        [
            ticket(),
            (
                "zendesk_create_item",
                {
                    "table": "comments",
                    "item": {"ticket_id": NEW_TICKET, "author_id": "585", "body": "Called back."},
                },
            ),
        ],
        {"auto.tickets.no_comments"},
    ),
    Case("tickets.tags", [ticket(tags=["billing"])], {"auto.tickets.no_unused_fields"}),
    Case(
        "tickets.due_at",
        [ticket(), update_ticket(NEW_TICKET, due_at="2025-10-05T00:00:00Z")],
        {"auto.tickets.no_unused_fields"},
    ),
    Case("tickets.assignee", [ticket(assignee_id="2")], {"auto.tickets.assignee_is_agent"}),
    Case("tickets.created_open", [ticket(status="pending")], {"auto.tickets.created_open"}),
    Case(
        "tickets.closed",
        [ticket(), update_ticket(NEW_TICKET, status="closed")],
        {"auto.tickets.no_system_statuses"},
    ),
    Case(
        "tickets.solved",
        [ticket(), update_ticket(NEW_TICKET, status="solved", outcome_summary="Completed")],
        set(),
    ),
    Case("tickets.outcome_value", [ticket(outcome_summary="Done")], {"auto.tickets.custom_field_values"}),
    Case(
        "tickets.date_value",
        [ticket(effective_date_of_change="10/01/2025")],
        {"auto.tickets.custom_field_values"},
    ),
    Case(
        "tickets.values/ok",
        [
            ticket(
                **FNOL_TICKET,
                internal_review_type="SIU",
                escalation_level="Regulatory Risk",
                effective_date_of_change=TODAY,
            )
        ],
        set(),
    ),
    Case("tickets.requester", [ticket(requester_id="CUS-T1")], {"auto.tickets.requester_is_user"}),
    # tickets, at commit
    Case("tickets/commit-ok", [ticket()], set(), commit=True),
    Case("tickets.required", [ticket(priority=None)], {"auto.tickets.required_fields"}, commit=True),
    Case(
        "tickets.outcome_missing",
        [ticket(outcome_summary=None)],
        {"auto.tickets.outcome_and_category_set"},
        commit=True,
    ),
    Case(
        "tickets.category_missing",
        [
            ticket(request_category=None),
            update_ticket(NEW_TICKET, status="hold", outcome_summary="Pending \u2013 Internal Review"),
        ],
        {"auto.tickets.outcome_and_category_set"},
        commit=True,
    ),
    Case(
        "tickets.status_outcome",
        [ticket(outcome_summary="Completed")],
        {"auto.tickets.status_matches_outcome"},
        commit=True,
    ),
    Case(
        "tickets.status_outcome/pending",
        [ticket(), update_ticket(NEW_TICKET, status="pending", outcome_summary="Pending \u2013 User Action")],
        set(),
        commit=True,
    ),
    Case(
        "tickets.fnol_incident",
        [ticket(**{**FNOL_TICKET, "type": "task"}), fnol()],
        {"auto.tickets.fnol_incident"},
        commit=True,
    ),
    Case("tickets.fnol_incident/ok", [ticket(**FNOL_TICKET), fnol()], set(), commit=True),
    Case(
        "tickets.fnol_incident/no-claim", [ticket(**{**FNOL_TICKET, "type": "question"})], set(), commit=True
    ),
    Case(
        "tickets.document_task",
        [ticket(type="incident", request_category="Documents"), document()],
        {"auto.tickets.document_request_task"},
        commit=True,
    ),
    Case(
        "tickets.priority_major",
        [ticket(**FNOL_TICKET), fnol(**INJURY)],
        {"auto.tickets.priority_major_claim"},
        commit=True,
    ),
    Case(
        "tickets.priority_major/high",
        [ticket(**FNOL_TICKET, priority="high"), fnol(**INJURY)],
        set(),
        commit=True,
    ),
    Case(
        "tickets.priority_pending_cancellation",
        [ticket(request_category="Billing & Payments")],
        {"auto.tickets.priority_pending_cancellation"},
        commit=True,
        rows=account(status="Pending Cancellation"),
    ),
    Case(
        "tickets.priority_pending_cancellation/high",
        [ticket(request_category="Billing & Payments", priority="high")],
        set(),
        commit=True,
        rows=account(status="Pending Cancellation"),
    ),
    # added after the mutation run: the exclusion flag without an exclusion, and a loss dated ahead
    Case(
        "driver.exclusion_form/rated",
        [add_driver(exclusion_form_required=True)],
        {"auto.driver.exclusion_form_flag"},
    ),
    Case(
        "dates.loss_future",
        [ticket(**FNOL_TICKET), fnol(date_of_loss="2025-10-03")],
        {"auto.dates.loss_not_in_future"},
        commit=True,
    ),
    Case("dates.loss_today", [ticket(**FNOL_TICKET), fnol(date_of_loss=TODAY)], set(), commit=True),
]


@contextmanager
def _session(auto: Domain, database: Database, pack: PolicyPack, case: Case) -> Iterator[GuardSession]:
    with Environment(auto, database) as env:
        env.apply_patch(_patch(case.rows, case.extra), where=case.id)
        session = GuardSession(backend_for(env), executor_for(env), tool_infos(env), pack, session_id=case.id)
        try:
            yield session
        finally:
            if not session.closed:
                session.rollback()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_case(auto: Domain, database: Database, pack: PolicyPack, case: Case) -> None:
    with _session(auto, database, pack, case) as session:
        last = len(case.steps) - 1
        for i, (tool, args) in enumerate(case.steps):
            outcome = session.call(tool, args)
            got = {v.rule_id for v in outcome.violations}
            if i < last or case.commit:
                assert outcome.verdict is Verdict.ALLOWED, (i, tool, outcome.violations, outcome.result)
                continue
            assert got == case.expect, outcome.violations
            if case.expect:
                assert outcome.verdict in (Verdict.REFUSED, Verdict.ROLLED_BACK)
                assert all(v.source is not None and v.source.quote for v in outcome.violations)
            else:
                assert outcome.verdict is Verdict.ALLOWED, outcome.result
        if case.commit:
            commit = session.commit()
            assert {v.rule_id for v in commit.violations} == case.expect, commit.violations
            assert commit.committed is not case.expect


def test_every_rule_has_a_trigger_and_the_world_is_clean(pack: PolicyPack) -> None:
    """Each rule is expected by some case, and the bare world (one ticket) commits."""
    triggered = {rule for c in CASES for rule in c.expect}
    assert triggered == {c.id for c in pack.checks}
    assert any(not c.expect and c.commit for c in CASES)


def test_pack_loads_against_its_domain(pack: PolicyPack, auto: Domain) -> None:
    model = pack.model
    assert model.domain == AUTO
    assert set(model.tools.effects) == set(auto.tools)
    for cut in ("zendesk_delete_item", "billing_reset_account_status"):
        assert not pack.allows(cut)
    assert all(
        pack.allows(t) for t in auto.tools if t not in {"zendesk_delete_item", "billing_reset_account_status"}
    )
    writes = {
        name for name, tool in auto.tools.items() if tool.writes and name != "knowledge_base_search_policy"
    }
    assert {t for t, e in model.tools.effects.items() if e is not EffectClass.READ} == writes
    irreversible = {t for t, e in model.tools.effects.items() if e is EffectClass.IRREVERSIBLE}
    assert len(irreversible) == 8  # SPEC §4: 14 write state, 8 business-irreversible
    assert not model.approvals


def test_cut_tools_are_refused(auto: Domain, sqlite_db: Database, pack: PolicyPack) -> None:
    case = Case("cut", [], set())
    with _session(auto, sqlite_db, pack, case) as session:
        for tool, args in [
            ("zendesk_delete_item", {"table": "tickets", "id": "1"}),
            ("billing_reset_account_status", {"policy_id": "POL-T1"}),
        ]:
            outcome = session.call(tool, args)
            assert outcome.verdict is Verdict.REFUSED
            assert session.pending_changes() == session.pending_changes().__class__()


def _policy_corpus(bench: BenchData, auto: Domain) -> str:
    """The texts a rule may quote: the KB, the system prompt and the Zendesk articles they send to."""
    folder = Path(bench.bundle) / "data" / "derived_policy"
    text = (folder / f"{AUTO}.policy_kb_sources.md").read_text(encoding="utf-8")
    text += "\n" + (folder / f"{AUTO}.system_prompt.md").read_text(encoding="utf-8")
    with Environment(auto, Database()) as env:
        for article in env.table("zendesk_articles").all():
            body = html.unescape(str(getattr(article, "body", "")))
            text += "\n" + re.sub(r"<[^>]+>", "\n", body)
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)
    return _normalise(text)


def _normalise(text: str) -> str:
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)
    return re.sub(r"\s+", " ", text.replace("**", "").replace("\\", "")).strip().lower()


def test_rules_quote_the_policy_and_name_no_records(bench: BenchData, auto: Domain, pack: PolicyPack) -> None:
    """Every quote (fragments between "[...]", sentence by sentence) is in the policy text verbatim."""
    corpus = _policy_corpus(bench, auto)
    for rule in pack.model.checks:
        assert rule.source.quote and rule.source.ref, rule.id
        for fragment in rule.source.quote.split("[...]"):
            for sentence in re.split(r"(?<=[a-z`)\"0-9])\. (?=[A-Z`$])", fragment):
                piece = _normalise(sentence).strip(" .:")
                assert not piece or piece in corpus, f"{rule.id}: {piece!r} is not in the policy text"
    ids = re.compile(r"\b(?:POL|CUS|VEH|DRV|CLM|BILL|DOC|VIOLATION)-\w|test_|\b(?:bil|fnol)_\d")
    for path in (PACK, PACK.with_name("checks.py")):
        assert not ids.search(path.read_text(encoding="utf-8")), f"{path} names a record or task"
