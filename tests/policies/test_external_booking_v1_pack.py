"""The StayBridge (external_booking_v1) policy pack: every rule fires on a state that breaks it and
stays quiet on one that does not.

Each case is a fresh environment of the domain with a small hand-made data patch (the ids below are
made up for these tests; no rule names any of them), a few calls through a GuardSession with the whole
pack, the rule ids each call must report ([] = allowed) and, where given, the commit's. No golden
trajectory is read. A case that triggers a rule fails when that rule is removed from the pack; the
coverage test checks that every rule has such a case.
"""

from __future__ import annotations

import html
import re
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

DOMAIN = "external_booking_v1"
PACK = Path(__file__).resolve().parents[2] / "policies" / DOMAIN / "policy.yaml"

AGENT = "AG-83945"
USER = "USR-T0000001"
NOW = "2025-09-01T10:00:00Z"
STAY = ("2026-03-10T15:00:00Z", "2026-03-13T11:00:00Z")  # 3 nights
PAST_STAY = ("2025-09-20T15:00:00Z", "2025-09-23T11:00:00Z")  # 3 nights, checked out

STD, OUT, BUD, MID, ENT, PLAT, HIGH, FAIL, EXP = (f"BKG-T000000{i}" for i in range(1, 10))
LARGE_1, LARGE_2, PLARGE_1 = "BKG-T0000011", "BKG-T0000012", "BKG-T0000013"
SMALL_1, SMALL_2, SMALL_3 = "BKG-T0000021", "BKG-T0000022", "BKG-T0000023"
HOTEL_STD, HOTEL_BUD, HOTEL_PREM = "HTL-TSTD", "HTL-TBUD", "HTL-TPREM"
FIRST_TICKET = "14"  # 12 default tickets + 1 patched; zendesk numbers a new one len + 1


# -- the data patch ---------------------------------------------------------------------------------
def _hotel(hotel_id: str, tier: str, *, pets: bool, accessible: bool) -> dict[str, Any]:
    return {
        "id": hotel_id,
        "hotel_id": hotel_id,
        "hotel_name": f"Test {tier} hotel",
        "location": "Springfield",
        "partner_tier": tier,
        "contact_name": "Front Desk",
        "contact_email": f"desk@{tier}.example.com",
        "contact_phone": "+1-555-0100",
        "escalation_contact": None,
        "amenities": [],
        "supports_pets": pets,
        "accessible_rooms_available": accessible,
        "created_at": NOW,
        "updated_at": NOW,
    }


def _booking(ref: str, customer: str, hotel: str, value: str, **extra: Any) -> dict[str, Any]:
    row = {
        "id": ref,
        "booking_reference": ref,
        "customer_id": customer,
        "hotel_id": hotel,
        "check_in_date": STAY[0],
        "check_out_date": STAY[1],
        "booking_value": value,
        "room_type": "deluxe_room",
        "board_type": "with_breakfast",
        "adults_count": 2,
        "children_count": 0,
        "booking_status": "confirmed",
        "corporate_account_id": None,
        "group_booking_id": None,
        "modification_history": [],
        "special_requests": [],
        "created_at": NOW,
        "updated_at": NOW,
    }
    row.update(extra)
    return row


def _profile(customer: str, email: str, tier: str, complaints: int = 0) -> dict[str, Any]:
    return {
        "id": customer,
        "customer_id": customer,
        "email": email,
        "full_name": "Test Guest",
        "vip_tier": tier,
        "loyalty_program_status": None,
        "lifetime_value": "1000",
        "total_bookings_count": 3,
        "preferences": [],
        "special_notes": [],
        "complaint_count": complaints,
        "last_booking_date": None,
        "created_at": NOW,
        "updated_at": NOW,
    }


def _account(account_id: str, tier: str, status: str) -> dict[str, Any]:
    return {
        "id": account_id,
        "corporate_account_id": account_id,
        "company_name": f"Test {tier}",
        "account_tier": tier,
        "account_status": status,
        "contact_name": "Buyer",
        "contact_email": f"buyer@{tier}.example.org",
        "contact_phone": "+1-555-0200",
        "booking_limit": 10,
        "credit_limit": "10000",
        "payment_terms": "Net 30",
        "expiration_date": None,
        "created_at": NOW,
        "updated_at": NOW,
    }


def _group(group_id: str, rooms: int, hotel: str, refs: list[str]) -> dict[str, Any]:
    return {
        "id": group_id,
        "group_booking_id": group_id,
        "coordinator_name": "Coordinator",
        "coordinator_email": "coord@example.com",
        "coordinator_phone": "+1-555-0300",
        "total_rooms": rooms,
        "check_in_date": STAY[0],
        "check_out_date": STAY[1],
        "hotel_id": hotel,
        "booking_references": refs,
        "created_at": NOW,
        "updated_at": NOW,
    }


def _txn(txn_id: str, ref: str, customer: str, amount: str, kind: str = "charge", status: str = "successful"):
    return {
        "id": txn_id,
        "transaction_id": txn_id,
        "booking_reference": ref,
        "customer_id": customer,
        "amount": amount,
        "currency": "USD",
        "transaction_type": kind,
        "payment_status": status,
        "payment_method": "Visa ending in 0000",
        "reason": None,
        "processing_time_estimate": None,
        "created_at": NOW,
        "updated_at": NOW,
    }


def _night(hotel: str, room: str, day: str, count: int, price: str) -> dict[str, Any]:
    return {
        "id": f"INV-T-{hotel}-{room}-{day}",
        "hotel_id": hotel,
        "room_type": room,
        "board_type": "with_breakfast",
        "date": f"{day}T00:00:00Z",
        "available_count": count,
        "price_per_night": price,
        "created_at": NOW,
        "updated_at": NOW,
    }


BOOKINGS = [
    _booking(STD, "CUS-T1", HOTEL_STD, "300.00"),
    _booking(
        OUT,
        "CUS-T1",
        HOTEL_STD,
        "600.00",
        booking_status="checked_out",
        check_in_date=PAST_STAY[0],
        check_out_date=PAST_STAY[1],
    ),
    _booking(BUD, "CUS-T1", HOTEL_BUD, "400.00"),
    _booking(MID, "CUS-T3", HOTEL_STD, "1500.00", corporate_account_id="CRP-TMID"),
    _booking(ENT, "CUS-T3", HOTEL_PREM, "500.00", corporate_account_id="CRP-TENT"),
    _booking(PLAT, "CUS-T2", HOTEL_PREM, "800.00"),
    _booking(HIGH, "CUS-T1", HOTEL_STD, "2500.00"),
    _booking(FAIL, "CUS-T4", HOTEL_STD, "200.00"),
    _booking(EXP, "CUS-T3", HOTEL_STD, "1500.00", corporate_account_id="CRP-TEXP"),
    _booking(LARGE_1, "CUS-T1", HOTEL_STD, "200.00", group_booking_id="GRP-TLARGE"),
    _booking(LARGE_2, "CUS-T1", HOTEL_STD, "200.00", group_booking_id="GRP-TLARGE"),
    _booking(PLARGE_1, "CUS-T1", HOTEL_PREM, "200.00", group_booking_id="GRP-TPLARGE"),
    _booking(SMALL_1, "CUS-T1", HOTEL_STD, "200.00", group_booking_id="GRP-TSMALL"),
    _booking(SMALL_2, "CUS-T1", HOTEL_STD, "200.00", group_booking_id="GRP-TSMALL"),
    _booking(
        SMALL_3, "CUS-T1", HOTEL_STD, "200.00", group_booking_id="GRP-TSMALL", booking_status="cancelled"
    ),
]

BASE: dict[str, list[dict[str, Any]]] = {
    "hotel_partner_api_hotels": [
        _hotel(HOTEL_STD, "standard", pets=False, accessible=False),
        _hotel(HOTEL_BUD, "budget", pets=False, accessible=False),
        _hotel(HOTEL_PREM, "premium", pets=True, accessible=True),
    ],
    "crm_api_customer_profiles": [
        _profile("CUS-T1", "guest.one@example.com", "standard", complaints=1),
        _profile("CUS-T2", "guest.two@example.com", "platinum"),
        _profile("CUS-T3", "traveller@example.net", "standard"),
        _profile("CUS-T4", "guest.four@example.com", "standard"),
    ],
    "corporate_api_corporate_accounts": [
        _account("CRP-TMID", "mid_market", "active"),
        _account("CRP-TENT", "enterprise", "active"),
        _account("CRP-TEXP", "mid_market", "expired"),
    ],
    "booking_api_bookings": BOOKINGS,
    "booking_api_group_bookings": [
        _group("GRP-TLARGE", 20, HOTEL_STD, [LARGE_1, LARGE_2]),
        _group("GRP-TPLARGE", 20, HOTEL_PREM, [PLARGE_1]),
        _group("GRP-TSMALL", 3, HOTEL_STD, [SMALL_1, SMALL_2, SMALL_3]),
    ],
    "payment_api_transactions": [
        *(
            _txn(
                f"TXN-T{b['booking_reference'][-7:]}",
                b["booking_reference"],
                b["customer_id"],
                b["booking_value"],
            )
            for b in BOOKINGS
            if b["booking_reference"] not in (FAIL, SMALL_3)
        ),
        _txn("TXN-T-FAILED", FAIL, "CUS-T4", "200.00", status="failed"),
        _txn("TXN-T-REFUND", OUT, "CUS-T1", "20.00", kind="refund"),
    ],
    "booking_api_hotel_inventory": [
        *(_night(HOTEL_STD, "deluxe_room", f"2026-03-{d}", 3, "100.00") for d in (10, 11, 12)),
        *(_night(HOTEL_STD, "deluxe_room", f"2026-04-{d}", 5, "120.00") for d in (10, 11, 12)),
        *(_night(HOTEL_STD, "suite", f"2026-03-{d}", 0, "200.00") for d in (10, 11, 12)),
    ],
    "zendesk_users": [
        {
            "id": USER,
            "name": "Test Guest",
            "email": "guest.one@example.com",
            "role": "end-user",
            "organization_id": None,
            "phone": None,
            "verified": True,
            "active": True,
            "created_at": NOW,
            "updated_at": NOW,
        }
    ],
    "zendesk_tickets": [
        {
            "id": "TCK-T0000001",
            "subject": "Earlier request",
            "description": "An older ticket of the guest",
            "status": "solved",
            "priority": "normal",
            "type": "question",
            "requester_id": USER,
            "assignee_id": AGENT,
            "tags": ["b2c-customer"],
            "created_at": NOW,
            "updated_at": NOW,
            "request_type_detail": "other",
            "resolution_action": "information-provided",
            "refund_amount": 0.0,
        }
    ],
}


# -- cases ------------------------------------------------------------------------------------------
Call = tuple[str, dict[str, Any], list[str]]


@dataclass
class Case:
    name: str
    calls: list[Call]
    commit: list[str] | None = None
    patch: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def expected(self) -> set[str]:
        return {rule for _, _, rules in self.calls for rule in rules} | set(self.commit or ())


def ticket(**fields: Any) -> dict[str, Any]:
    item = {
        "subject": "Guest request",
        "description": "What the guest asked, what was found, what was done",
        "status": "open",
        "priority": "normal",
        "type": "question",
        "requester_id": USER,
        "assignee_id": AGENT,
        "tags": ["b2c-customer"],
        "request_type_detail": "other",
        "resolution_action": "information-provided",
        "refund_amount": 0,
    }
    item.update(fields)
    return item


def about(ref: str, value: str = "300.00", hotel: str = HOTEL_STD, **fields: Any) -> dict[str, Any]:
    """Ticket fields for a request about an existing booking."""
    return {
        "booking_reference": ref,
        "hotel_id": hotel,
        "booking_value": float(value),
        "check_in_date": STAY[0],
    } | fields


def create(item: dict[str, Any], expect: list[str] | None = None) -> Call:
    return ("zendesk_create_item", {"table": "tickets", "item": item}, expect or [])


def update(ticket_id: str, expect: list[str] | None = None, **fields: Any) -> Call:
    return ("zendesk_update_item", {"table": "tickets", "id": ticket_id, "item": fields}, expect or [])


def resolved(status: str = "solved", **fields: Any) -> list[Call]:
    """A ticket created open with these fields, then moved to ``status``."""
    return [create(ticket(**fields)), update(FIRST_TICKET, status=status)]


def modify(ref: str, expect: list[str] | None = None, **fields: Any) -> Call:
    return ("booking_api_modify_booking", {"booking_reference": ref, **fields}, expect or [])


def refund(
    ref: str, amount: float, reason: str = "billing_correction", expect: list[str] | None = None
) -> Call:
    return (
        "payment_api_process_refund",
        {"booking_reference": ref, "refund_amount": amount, "reason": reason},
        expect or [],
    )


def charge(
    ref: str, amount: float, reason: str = "modification_fee", expect: list[str] | None = None
) -> Call:
    return (
        "payment_api_process_charge",
        {"booking_reference": ref, "charge_amount": amount, "reason": reason},
        expect or [],
    )


def escalate(ref: str, hotel: str, issue: str, expect: list[str] | None = None) -> Call:
    return (
        "hotel_partner_api_escalate_to_hotel",
        {"booking_reference": ref, "hotel_id": hotel, "issue_type": issue, "description": "Needs the hotel"},
        expect or [],
    )


def group_move(group: str, cascade: bool, expect: list[str] | None = None) -> Call:
    return (
        "booking_api_modify_group_booking",
        {
            "group_booking_id": group,
            "modification_details": {
                "check_in_date": "2026-04-10T15:00:00Z",
                "check_out_date": "2026-04-13T11:00:00Z",
            },
            "cascade_to_individual_bookings": cascade,
        },
        expect or [],
    )


APRIL = {"check_in_date": "2026-04-10T15:00:00Z", "check_out_date": "2026-04-13T11:00:00Z"}
GOOD_CHANGE = [modify(STD, adults_count=1)]  # no price change, first modification: no fee
P = "booking."

CASES: list[Case] = [
    # -- modification eligibility ------------------------------------------------------------------
    Case(
        "a checked-out booking is not modified", [modify(OUT, [P + "modify.confirmed_only"], adults_count=1)]
    ),
    Case("a confirmed booking is modified", [modify(STD, adults_count=1)]),
    Case(
        "an agent does not check a booking in",
        [modify(STD, [P + "modify.status_only_cancelled"], booking_status="checked_in")],
    ),
    Case("an agent cancels a booking", [modify(STD, booking_status="cancelled")]),
    Case(
        "a group move rewrites a cancelled member",
        [group_move("GRP-TSMALL", True, [P + "modify.group_members_confirmed"])],
    ),
    Case(
        "a group move of confirmed members",
        [group_move("GRP-TSMALL", True)],
        patch={"booking_api_bookings": [{**BOOKINGS[-1], "booking_status": "confirmed"}]},
    ),
    Case(
        "three adults do not fit a deluxe room", [modify(STD, [P + "modify.room_capacity"], adults_count=3)]
    ),
    Case("two adults and two children fit a deluxe room", [modify(STD, adults_count=2, children_count=2)]),
    Case("a sold-out room type", [modify(STD, [P + "modify.available_inventory"], room_type="suite")]),
    Case("dates with rooms left", [modify(STD, **APRIL)]),
    Case(
        "an accessible room at a hotel without any",
        [modify(STD, [P + "modify.accessible_room_available"], room_type="accessible_room")],
    ),
    Case("an accessible room at a hotel with them", [modify(PLAT, room_type="accessible_room")]),
    Case(
        "a dog at a hotel that takes no pets",
        [modify(STD, [P + "modify.pets_supported"], special_requests=["pet-friendly room for a small dog"])],
    ),
    Case(
        "a dog at a hotel that takes pets",
        [modify(PLAT, special_requests=["pet-friendly room for a small dog"])],
    ),
    Case("a high floor at any hotel", [modify(STD, special_requests=["high floor"])]),
    Case(
        "a $1,500 mid-market corporate booking waits for a manager",
        [modify(MID, [P + "modify.mid_market_approval"], adults_count=1)],
    ),
    Case("an expired mid-market account gets B2C treatment", [modify(EXP, adults_count=1)]),
    Case(
        "a large group at a standard hotel waits for the hotel",
        [modify(LARGE_1, [P + "modify.large_group_approval"], adults_count=1)],
    ),
    Case(
        "a large group's dates at a standard hotel",
        [group_move("GRP-TLARGE", False, [P + "modify.large_group_approval"])],
    ),
    Case("a large group at a premium hotel", [modify(PLARGE_1, adults_count=1)]),
    # -- refunds, charges, disputes ------------------------------------------------------------------
    Case("a refund above the booking's value", [refund(STD, 400, expect=[P + "refund.within_paid"])]),
    Case("a zero refund", [refund(STD, 0, expect=[P + "refund.within_paid"])]),
    Case("a refund within the booking's value", [refund(STD, 285)]),
    Case("a group refund on the group's first booking", [refund(SMALL_1, 370)]),
    Case(
        "post-stay compensation on a booking not checked out",
        [refund(STD, 150, "post_stay_compensation", [P + "refund.post_stay_checked_out"])],
    ),
    Case(
        "post-stay compensation off the formula",
        [refund(OUT, 123.45, "post_stay_compensation", [P + "refund.post_stay_amount"])],
    ),
    Case(
        "post-stay compensation of 50% of the stay, complaint counted, ticket filed",
        [
            refund(OUT, 300, "post_stay_compensation"),
            ("crm_api_update_customer_info", {"customer_id": "CUS-T1", "complaint_count": 2}, []),
            *resolved(
                **about(OUT, "600.00"),
                type="task",
                priority="normal",
                request_type_detail="post-stay-issue",
                resolution_action="refund-partial",
                refund_amount=300,
            ),
        ],
        commit=[],
    ),
    Case(
        "post-stay compensation without counting the complaint",
        [refund(OUT, 300, "post_stay_compensation")],
        commit=[P + "crm.complaint_counted"],
    ),
    Case(
        "complaint_count jumps by 4",
        [
            (
                "crm_api_update_customer_info",
                {"customer_id": "CUS-T1", "complaint_count": 5},
                [P + "crm.complaint_count_increment"],
            )
        ],
    ),
    Case(
        "a cancellation refund off the formula",
        [modify(STD, booking_status="cancelled"), refund(STD, 250, "cancellation")],
        commit=[P + "refund.cancellation_amount"],
    ),
    Case(
        "a 50% cancellation refund minus the service fee",
        [modify(STD, booking_status="cancelled"), refund(STD, 135, "cancellation")],
        commit=[],
    ),
    Case(
        "a 75% refund at a budget hotel",
        [modify(BUD, booking_status="cancelled"), refund(BUD, 285, "cancellation")],
        commit=[],
    ),
    Case(
        "two group rooms cancelled, refunded on the first booking",
        [
            modify(SMALL_1, booking_status="cancelled"),
            modify(SMALL_2, booking_status="cancelled"),
            refund(SMALL_1, 370, "cancellation"),
        ],
        commit=[],
    ),
    Case(
        "a date change: price difference plus the $25 fee",
        [modify(STD, **APRIL), charge(STD, 85)],
        commit=[],
    ),
    Case(
        "a date change charged a fee off the schedule",
        [modify(STD, **APRIL), charge(STD, 100)],
        commit=[P + "charge.difference_plus_fee"],
    ),
    Case(
        "a date change whose price difference is not charged",
        [modify(STD, **APRIL)],
        commit=[P + "charge.difference_plus_fee"],
    ),
    Case(
        "a second modification: $60 difference + $25 + $15 surcharge",
        [modify(STD, **APRIL), charge(STD, 100)],
        commit=[],
        patch={
            "booking_api_bookings": [
                {**BOOKINGS[0], "modification_history": ["2025-09-02: adults_count: 1 -> 2"]}
            ]
        },
    ),
    Case(
        "an enterprise booking is modified for free",
        [modify(ENT, adults_count=1), charge(ENT, 25)],
        commit=[P + "charge.difference_plus_fee"],
    ),
    Case(
        "a fee charged for a change that was not made",
        [charge(STD, 25)],
        commit=[P + "charge.follows_a_change"],
    ),
    Case(
        "a dispute larger than the charge",
        [
            (
                "payment_api_process_charge_dispute",
                {"transaction_id": "TXN-T0000001", "dispute_reason": "duplicate", "dispute_amount": 500},
                [P + "dispute.against_a_charge"],
            )
        ],
    ),
    Case(
        "a dispute against a refund",
        [
            (
                "payment_api_process_charge_dispute",
                {"transaction_id": "TXN-T-REFUND", "dispute_reason": "wrong", "dispute_amount": 10},
                [P + "dispute.against_a_charge"],
            )
        ],
    ),
    Case(
        "a dispute case, ticket solved as the policy says",
        [
            (
                "payment_api_process_charge_dispute",
                {"transaction_id": "TXN-T0000001", "dispute_reason": "duplicate", "dispute_amount": 100},
                [],
            ),
            *resolved(**about(STD), type="incident", request_type_detail="billing-inquiry"),
        ],
        commit=[],
    ),
    Case(
        "a dispute case whose ticket says no action",
        [
            (
                "payment_api_process_charge_dispute",
                {"transaction_id": "TXN-T0000001", "dispute_reason": "duplicate", "dispute_amount": 100},
                [],
            ),
            *resolved(
                **about(STD),
                type="incident",
                request_type_detail="billing-inquiry",
                resolution_action="policy-applied-no-action",
            ),
        ],
        commit=[P + "tickets.dispute_case_resolution"],
    ),
    # -- invoices and payment methods ----------------------------------------------------------------
    Case(
        "a corporate invoice for a B2C booking",
        [
            (
                "payment_api_generate_invoice",
                {"booking_reference": STD, "invoice_type": "invoice"},
                [P + "invoice.type_by_account"],
            )
        ],
    ),
    Case(
        "an invoice type the policy does not name",
        [
            (
                "payment_api_generate_invoice",
                {"booking_reference": STD, "invoice_type": "pdf"},
                [P + "invoice.type_by_account"],
            )
        ],
    ),
    Case(
        "a receipt, and an invoice for an active corporate account",
        [
            ("payment_api_generate_invoice", {"booking_reference": STD, "invoice_type": "receipt"}, []),
            ("payment_api_generate_invoice", {"booking_reference": ENT, "invoice_type": "invoice"}, []),
        ],
    ),
    Case(
        "a corporate invoice for an expired account",
        [
            (
                "corporate_api_generate_corporate_invoice",
                {"booking_reference": EXP, "corporate_account_id": "CRP-TEXP"},
                [P + "invoice.corporate_account_active"],
            )
        ],
    ),
    Case(
        "a corporate invoice for an active account",
        [
            (
                "corporate_api_generate_corporate_invoice",
                {"booking_reference": ENT, "corporate_account_id": "CRP-TENT"},
                [],
            )
        ],
    ),
    Case(
        "a payment method that is not a token",
        [
            (
                "payment_api_update_payment_method",
                {"customer_id": "CUS-T4", "new_payment_method": "4521"},
                [P + "payment_method.token_format"],
            )
        ],
    ),
    Case(
        "a payment method for a customer whose payment did not fail",
        [
            (
                "payment_api_update_payment_method",
                {"customer_id": "CUS-T1", "new_payment_method": "tok_card_ending_4521"},
                [P + "payment_method.after_failed_payment"],
            )
        ],
    ),
    Case(
        "a new card after a failed payment",
        [
            (
                "payment_api_update_payment_method",
                {"customer_id": "CUS-T4", "new_payment_method": "tok_card_ending_4521"},
                [],
            )
        ],
    ),
    # -- hotel escalations --------------------------------------------------------------------------
    Case(
        "an escalation to another booking's hotel",
        [escalate(STD, HOTEL_PREM, "hotel-confirmation-required", [P + "escalation.hotel_of_booking"])],
    ),
    Case(
        "issue types that do not fit the booking",
        [
            escalate(STD, HOTEL_STD, "large-group-booking", [P + "escalation.reason_fits_booking"]),
            escalate(STD, HOTEL_STD, "high-value-dispute", [P + "escalation.reason_fits_booking"]),
            escalate(STD, HOTEL_STD, "guest-complaint", [P + "escalation.reason_fits_booking"]),
        ],
    ),
    Case(
        "issue types that fit the booking",
        [
            escalate(LARGE_1, HOTEL_STD, "large-group-booking"),
            escalate(HIGH, HOTEL_STD, "high-value-dispute"),
            escalate(OUT, HOTEL_STD, "guest-complaint"),
            escalate(STD, HOTEL_STD, "same-day-modification"),
        ],
    ),
    Case(
        "a same-day modification escalated to a budget hotel",
        [escalate(BUD, HOTEL_BUD, "same-day-modification", [P + "escalation.no_same_day_at_budget"])],
    ),
    Case(
        "an escalation with the customer ticket on hold",
        [
            create(ticket(**about(STD), type="task", escalation_reason="hotel-confirmation-required")),
            escalate(STD, HOTEL_STD, "hotel-confirmation-required"),
            update(FIRST_TICKET, status="hold"),
        ],
        commit=[],
    ),
    Case(
        "an escalation the customer ticket does not record",
        [*resolved(**about(STD), type="task"), escalate(STD, HOTEL_STD, "hotel-confirmation-required")],
        commit=[P + "tickets.escalation_recorded"],
    ),
    Case(
        "an escalation whose customer ticket is solved at once",
        [
            *resolved(**about(STD), type="task", escalation_reason="hotel-confirmation-required"),
            escalate(STD, HOTEL_STD, "hotel-confirmation-required"),
        ],
        commit=[P + "tickets.escalated_on_hold"],
    ),
    # -- tickets: what a call writes -----------------------------------------------------------------
    Case(
        "a ticket comment",
        [
            (
                "zendesk_create_item",
                {
                    "table": "comments",
                    "item": {"ticket_id": "TCK-T0000001", "author_id": AGENT, "body": "note"},
                },
                [P + "tickets.no_comments"],
            )
        ],
    ),
    Case(
        "a ticket for another assignee",
        [
            create(ticket(assignee_id="USR-10000002"), [P + "tickets.assignee_is_agent"]),
            update("TCK-T0000001", [P + "tickets.assignee_is_agent"], assignee_id="USR-10000002"),
        ],
    ),
    Case(
        "a ticket created pending, and one closed",
        [
            create(ticket(status="pending"), [P + "tickets.status_lifecycle"]),
            update("TCK-T0000001", [P + "tickets.status_lifecycle"], status="closed"),
        ],
    ),
    Case(
        "a ticket with an organization and a due date",
        [
            create(ticket(organization_id="ORG-10000001"), [P + "tickets.no_organization_or_due_date"]),
            update(
                "TCK-T0000001", [P + "tickets.no_organization_or_due_date"], due_at="2026-01-01T00:00:00Z"
            ),
        ],
    ),
    Case("a ticket of type problem", [create(ticket(type="problem"), [P + "tickets.no_problem_type"])]),
    Case(
        "a ticket created without priority", [create(ticket(priority=None), [P + "tickets.creation_fields"])]
    ),
    Case("a complete ticket, solved", resolved(), commit=[]),
    # -- tickets at commit ---------------------------------------------------------------------------
    Case("a ticket left open", [create(ticket())], commit=[P + "tickets.resolved_before_commit"]),
    Case(
        "a solved ticket without a resolution",
        resolved(resolution_action=None),
        commit=[P + "tickets.resolution_fields"],
    ),
    Case(
        "a ticket on hold without a request type",
        resolved("hold", request_type_detail=None),
        commit=[P + "tickets.resolution_fields"],
    ),
    Case(
        "a booking ticket without hotel_id",
        resolved(booking_reference=STD, booking_value=300.0),
        commit=[P + "tickets.booking_fields"],
    ),
    Case(
        "a cancellation ticket without check-in date",
        [
            modify(STD, booking_status="cancelled"),
            refund(STD, 285, "cancellation"),
            *resolved(
                **about(STD, check_in_date=None),
                type="task",
                request_type_detail="cancel-booking",
                resolution_action="refund-partial",
                refund_amount=285,
            ),
        ],
        commit=[P + "tickets.booking_fields"],
    ),
    Case(
        "a cancellation ticket as the policy says",
        [
            modify(STD, booking_status="cancelled"),
            refund(STD, 285, "cancellation"),
            *resolved(
                **about(STD),
                type="task",
                request_type_detail="cancel-booking",
                resolution_action="refund-partial",
                refund_amount=285,
            ),
        ],
        commit=[],
    ),
    Case(
        "a cancellation ticket with another request type",
        [
            modify(STD, booking_status="cancelled"),
            refund(STD, 285, "cancellation"),
            *resolved(
                **about(STD),
                type="task",
                request_type_detail="request-refund",
                resolution_action="refund-partial",
                refund_amount=285,
            ),
        ],
        commit=[P + "tickets.cancellation_request_type"],
    ),
    Case(
        "a ticket naming another hotel",
        resolved(**about(STD, hotel=HOTEL_PREM)),
        commit=[P + "tickets.booking_fields_match"],
    ),
    Case(
        "a group ticket on a later booking of the group",
        resolved(**about(SMALL_2, "200.00"), group_booking_id="GRP-TSMALL", tags=["group-coordinator"]),
        commit=[P + "tickets.group_first_reference"],
    ),
    Case(
        "a group ticket on the group's first booking",
        resolved(**about(SMALL_1, "600.00"), group_booking_id="GRP-TSMALL", tags=["group-coordinator"]),
        commit=[],
    ),
    Case("a resolved ticket without user type", resolved(tags=[]), commit=[P + "tickets.user_type_tag"]),
    Case(
        "a ticket with two user types",
        resolved(tags=["b2c-customer", "corporate-account"]),
        commit=[P + "tickets.user_type_tag"],
    ),
    Case(
        "a ticket keeping a tag outside the categories",
        resolved(tags=["b2c-customer", "refund"]),
        commit=[P + "tickets.tags_from_categories"],
    ),
    Case(
        "a corporate booking tagged b2c",
        resolved(**about(MID, "1500.00")),
        commit=[P + "tickets.b2c_tag_matches_booking"],
    ),
    Case(
        "a corporate booking tagged corporate-account, check-in upcoming",
        resolved(**about(MID, "1500.00"), tags=["corporate-account", "check-in-upcoming"]),
        commit=[],
    ),
    Case(
        "a refund the ticket does not record",
        [refund(STD, 100), *resolved(**about(STD), type="task", request_type_detail="billing-inquiry")],
        commit=[P + "tickets.refund_amount_recorded"],
    ),
    Case(
        "a refund the ticket records",
        [
            refund(STD, 100),
            *resolved(
                **about(STD),
                type="task",
                request_type_detail="billing-inquiry",
                resolution_action="refund-partial",
                refund_amount=100,
            ),
        ],
        commit=[],
    ),
    Case(
        "a ticket claiming a refund that was never processed",
        resolved(**about(STD), refund_amount=50),
        commit=[P + "tickets.refund_amount_processed"],
    ),
    Case(
        "a refund resolution without an amount",
        resolved(**about(STD), resolution_action="refund-partial"),
        commit=[P + "tickets.refund_resolution_has_amount"],
    ),
    Case(
        "a full refund on a booking that stays confirmed",
        [
            refund(STD, 100),
            *resolved(
                **about(STD),
                type="task",
                request_type_detail="billing-inquiry",
                resolution_action="refund-full",
                refund_amount=100,
            ),
        ],
        commit=[P + "tickets.refund_full_only_for_whole_booking"],
    ),
    Case(
        "a full refund for a system error",
        [
            refund(STD, 300),
            *resolved(
                **about(STD),
                type="task",
                request_type_detail="billing-inquiry",
                resolution_action="refund-full",
                refund_amount=300,
                escalation_reason="system-error",
            ),
        ],
        commit=[],
    ),
    Case(
        "a high-value dispute reason on a $300 booking",
        resolved(**about(STD), escalation_reason="high-value-dispute"),
        commit=[P + "tickets.escalation_reason_fits"],
    ),
    Case(
        "post-stay compensation filed as another request type",
        [
            refund(OUT, 300, "post_stay_compensation"),
            ("crm_api_update_customer_info", {"customer_id": "CUS-T1", "complaint_count": 2}, []),
            *resolved(
                **about(OUT, "600.00"),
                type="task",
                request_type_detail="billing-inquiry",
                resolution_action="refund-partial",
                refund_amount=300,
            ),
        ],
        commit=[P + "tickets.post_stay_request_type"],
    ),
    Case(
        "a guest-count change filed as a date change",
        [
            *GOOD_CHANGE,
            *resolved(
                **about(STD),
                type="task",
                request_type_detail="modify-dates",
                resolution_action="modification-completed",
            ),
        ],
        commit=[P + "tickets.modification_request_type"],
    ),
    Case(
        "a guest-count change filed as such",
        [
            *GOOD_CHANGE,
            *resolved(
                **about(STD),
                type="task",
                request_type_detail="modify-guests",
                resolution_action="modification-completed",
            ),
        ],
        commit=[],
    ),
    Case(
        "a modification resolved as no action",
        [
            *GOOD_CHANGE,
            *resolved(
                **about(STD),
                type="task",
                request_type_detail="modify-guests",
                resolution_action="policy-applied-no-action",
            ),
        ],
        commit=[P + "tickets.no_action_means_no_change"],
    ),
    Case(
        "a modification filed as a question",
        [
            *GOOD_CHANGE,
            *resolved(
                **about(STD),
                type="question",
                request_type_detail="modify-guests",
                resolution_action="modification-completed",
            ),
        ],
        commit=[P + "tickets.task_type_for_actions"],
    ),
    Case(
        "a missing booking's ticket at normal priority",
        resolved(booking_reference="BKG-T9999999", priority="normal"),
        commit=[P + "tickets.missing_booking_priority"],
    ),
    Case(
        "a missing booking's ticket at low priority",
        resolved(booking_reference="BKG-T9999999", priority="low"),
        commit=[],
    ),
    Case(
        "a check-in tag on a stay that is over",
        resolved(**about(OUT, "600.00"), tags=["b2c-customer", "check-in-upcoming"]),
        commit=[P + "tickets.check_in_tag_needs_upcoming_booking"],
    ),
    Case(
        "the workflow never deletes",
        [("zendesk_delete_item", {"table": "tickets", "id": "TCK-T0000001"}, ["tool_not_allowed"])],
    ),
]


# -- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def booking(bench: BenchData) -> Domain:
    return load_domain(DOMAIN, bench.bundle)


@pytest.fixture(scope="module")
def pack(booking: Domain) -> PolicyPack:
    return load_domain_policy(PACK, booking)


def _run(
    case: Case, domain: Domain, database: Database, pack: PolicyPack
) -> tuple[list[list[str]], list[str] | None]:
    with Environment(domain, database) as env:
        env.apply_patch(BASE)
        if case.patch:
            env.apply_patch(case.patch)
        session = GuardSession(
            backend_for(env), executor_for(env), tool_infos(env), pack, session_id=case.name
        )
        got = []
        for tool, arguments, _ in case.calls:
            outcome = session.call(tool, arguments)
            got.append(sorted(v.rule_id for v in outcome.violations))
            if not outcome.violations:
                assert outcome.verdict is Verdict.ALLOWED, (case.name, tool, outcome.result)
        commit = None
        if case.commit is not None:
            result = session.commit()
            commit = sorted(v.rule_id for v in result.violations)
            if not result.committed:
                session.rollback()
        else:
            session.rollback()
    return got, commit


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule_case(case: Case, booking: Domain, database: Database, pack: PolicyPack) -> None:
    got, commit = _run(case, booking, database, pack)
    assert got == [sorted(rules) for _, _, rules in case.calls], case.name
    if case.commit is not None:
        assert commit == sorted(case.commit), case.name


def test_every_rule_has_a_triggering_case(pack: PolicyPack) -> None:
    triggered = set().union(*(c.expected for c in CASES))
    missing = [c.id for c in pack.checks if c.id not in triggered]
    assert not missing, f"rules no case triggers: {missing}"
    assert triggered - {"tool_not_allowed"} <= {c.id for c in pack.checks}


def test_pack_loads_against_its_domain(pack: PolicyPack, booking: Domain) -> None:
    model = pack.model
    assert model.domain == DOMAIN
    assert not pack.allows("zendesk_delete_item")
    assert set(model.tools.effects) == set(booking.tools)
    writes = {n for n, t in booking.tools.items() if t.writes and n != "knowledge_base_search_policy"}
    assert {t for t, e in model.tools.effects.items() if e is not EffectClass.READ} == writes
    irreversible = {t for t, e in model.tools.effects.items() if e is EffectClass.IRREVERSIBLE}
    assert len(writes) == 10 and len(irreversible) == 6  # SPEC §4: 10 write state, 6 irreversible
    assert not model.approvals  # approvals hold calls; every correct trajectory must commit


# -- quotes -----------------------------------------------------------------------------------------
def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("**", "").replace("\\", "")).strip().lower()


def _policy_corpus(bench: BenchData) -> str:
    folder = Path(bench.bundle) / "data" / "derived_policy"
    text = (folder / f"{DOMAIN}.policy_kb_sources.md").read_text(encoding="utf-8")
    text += "\n" + (folder / f"{DOMAIN}.system_prompt.md").read_text(encoding="utf-8")
    text = html.unescape(text)
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)
    return _normalise(text)


def test_rules_quote_the_policy_and_name_no_records(bench: BenchData, pack: PolicyPack) -> None:
    """Every quote (fragments between "[...]", sentence by sentence) is in the policy text verbatim."""
    corpus = _policy_corpus(bench)
    for rule in pack.model.checks:
        assert rule.source.quote, rule.id
        assert rule.source.ref, rule.id
        for fragment in rule.source.quote.split("[...]"):
            for sentence in re.split(r"(?<=[a-z`)\"0-9])\. (?=[A-Z`$])", fragment):
                piece = _normalise(sentence).strip(" .:")
                assert not piece or piece in corpus, f"{rule.id}: {piece!r} is not in the policy text"
    ids = re.compile(r"\b(?:BKG|CUS|HTL|GRP|CRP|TXN|TCK|USR|ZDSK|DSP|INV|ORG)-\w|test_[a-z]{3}_\d{3}")
    for path in (PACK, PACK.with_name("checks.py")):
        assert not ids.search(path.read_text(encoding="utf-8")), f"{path} names a record or task"
