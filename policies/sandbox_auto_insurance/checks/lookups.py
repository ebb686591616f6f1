"""The auto-insurance pack's tables and the policy's constants (custom field values, windows,
excluded and high-risk vehicles), and the helpers the checks share: call arguments, written rows,
dates, the session's "today" and single-row lookups.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

TICKETS = "zendesk_tickets"
COMMENT_TABLES = frozenset({"zendesk_comments", "zendesk_ticket_comments"})
POLICIES = "policy_policies"
DRIVERS = "policy_drivers"
VEHICLES = "policy_vehicles"
DOCUMENTS = "policy_policy_documents"
ACCOUNTS = "billing_billing_accounts"
CLAIMS = "claims_claims"

AGENT_ID = "585"
SYSTEM_STATUSES = frozenset({"new", "closed"})
NO_BACKDATING_STATES = frozenset({"CA", "NY"})
HIGH_PRIORITIES = frozenset({"high", "urgent"})

# System prompt §5.6.1–5.6.6 and §2.4: the values each custom field takes.
CUSTOM_FIELD_VALUES: dict[str, frozenset[str]] = {
    "request_category": frozenset(
        {"Claims", "Policy Servicing", "Billing & Payments", "Documents", "Account/Access"}
    ),
    "claims_action_type": frozenset(
        {
            "FNOL \u2013 Collision",
            "FNOL \u2013 Comprehensive",
            "FNOL \u2013 Glass Only",
            "FNOL \u2013 Liability Only",
        }
    ),
    "internal_review_type": frozenset(
        {"Not Required", "Underwriting", "SIU", "Claims Adjuster", "Supervisor", "Billing"}
    ),
    "outcome_summary": frozenset(
        {
            "Completed",
            "Declined",
            "Pending \u2013 User Action",
            "Pending \u2013 Internal Review",
            "Referred",
        }
    ),
    "escalation_level": frozenset({"Standard", "Supervisor Review Required", "Regulatory Risk"}),
    "user_type": frozenset(
        {"Named Insured", "Co-Insured", "Listed Driver", "Third-Party Claimant", "Repair Provider"}
    ),
}
DATE_FORMAT = re.compile(r"^\d{4}-\d{2}-\d{2}$")

# System prompt §5.3 / §5.6.5: the status each outcome ends in ("Referred" has none).
STATUS_FOR_OUTCOME = {
    "Completed": "solved",
    "Declined": "solved",
    "Pending \u2013 User Action": "pending",
    "Pending \u2013 Internal Review": "hold",
}
REQUIRED_TICKET_FIELDS = (
    "subject",
    "description",
    "status",
    "priority",
    "type",
    "requester_id",
    "assignee_id",
)

# Zendesk article "Payment Arrangement Limits" / "Policy Reinstatement Windows".
REINSTATEMENT_WINDOW_DAYS = {"Standard": 15, "Preferred": 30, "Premium": 60}
EXTENSION_DAYS = 10
LINK_LIFETIME = dt.timedelta(hours=24)
LINK_TOLERANCE = dt.timedelta(hours=1)
SIU_VEHICLE_AGE_YEARS = 15
SIU_RECENTLY_ADDED_DAYS = 30
THEFT = "Comprehensive \u2013 Theft"

VIN = re.compile(r"^[A-Za-z0-9]{17}$")

# Zendesk article "Vehicles We Cannot Insure" (matched on "make model", lower case, words only).
EXCLUDED_VEHICLES = (
    re.compile(r"^(ferrari|lamborghini|mclaren|bugatti)\b"),
    re.compile(r"^dodge (srt )?viper\b"),
    re.compile(r"^dodge challenger\b.*\b(hellcat|demon)\b"),
    re.compile(r"^chevrolet corvette\b.*\b(z06|zr1)\b"),
    re.compile(r"^ford (mustang )?(shelby )?\b.*\bgt500\b"),
)
# Policy KB §7.1.4 High-Risk Vehicle Classifications.
HIGH_RISK_VEHICLES = (
    re.compile(r"^porsche\b"),
    re.compile(r"^bmw m[3458]\b"),
    re.compile(r"^mercedes\b.*\bamg\b"),
    re.compile(r"^audi rs ?[3567]\b"),
    re.compile(r"^tesla model s plaid\b"),
    re.compile(r"^maserati\b"),
    re.compile(r"^jaguar f ?type\b"),
    re.compile(r"^land rover range rover\b(?! (sport|velar|evoque)\b)"),
    re.compile(r"^chevrolet corvette\b(?!.*\b(z06|zr1)\b)"),
    re.compile(r"^ford mustang gt\b"),
    re.compile(r"^chevrolet camaro (ss|zl1)\b"),
    re.compile(r"^dodge challenger (r t|scat pack)\b"),
    re.compile(r"^nissan (\d{3})?z\b"),
    re.compile(r"^toyota (gr )?supra\b"),
    re.compile(r"^mazda (mx 5|miata)\b"),
    re.compile(r"^subaru (impreza )?wrx sti\b"),
)
MAKE_ALIASES = {"chevy": "chevrolet", "mercedes benz": "mercedes", "vw": "volkswagen"}


# -- helpers --------------------------------------------------------------------------------------
def _arguments(ctx: CheckContext) -> dict[str, Any]:
    return dict(ctx.call.arguments) if ctx.call is not None else {}


def _vehicle_name(make: Any, model: Any) -> str:
    make_text = " ".join(re.sub(r"[^a-z0-9]+", " ", str(make or "").lower()).split())
    make_text = MAKE_ALIASES.get(make_text, make_text)
    model_text = " ".join(re.sub(r"[^a-z0-9]+", " ", str(model or "").lower()).split())
    return f"{make_text} {model_text}".strip()


def _rows(ctx: CheckContext, table: str) -> Iterator[RowChange]:
    for change in ctx.changes:
        if change.table == table and change.after is not None:
            yield change


def _changed(change: RowChange, field: str) -> bool:
    before = change.before or {}
    after = change.after or {}
    return change.op == "insert" or before.get(field) != after.get(field)


def _became(change: RowChange, field: str, value: str) -> bool:
    return (change.after or {}).get(field) == value and _changed(change, field)


def _date(value: Any) -> dt.date | None:
    try:
        return dt.date.fromisoformat(str(value)[:10])
    except ValueError:
        return None


def _moment(value: Any) -> dt.datetime | None:
    text = str(value or "").strip()
    if not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _session_now(ctx: CheckContext) -> dt.datetime | None:
    """The latest helpdesk stamp on a ticket this session wrote: the session's "now"."""
    stamps = [_moment(c.after.get("updated_at")) for c in _rows(ctx, TICKETS) if c.after is not None]
    known = [s for s in stamps if s is not None]
    return max(known) if known else None


def _one(ctx: CheckContext, sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
    rows = ctx.query(sql, params)
    return rows[0] if rows else None


_POLICY = "SELECT id, state, automatic_extension_days, customer_id FROM policy_policies WHERE id = :id"
_POLICY_TIER = (
    "SELECT c.tier FROM policy_policies AS p JOIN crm_customers AS c ON c.id = p.customer_id WHERE p.id = :id"
)


def _truthy(value: Any) -> bool:
    return bool(value) and value not in ("0", "false", "False")
