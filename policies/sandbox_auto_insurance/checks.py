"""Python checks of the auto-insurance pack: what SQL cannot say well.

* Vehicle rules that classify a make and model (VIN format, excluded vehicles, high-risk classes).
* Ticket rules that read the row-level change set of a call (``after_call``) or of the session
  (``at_commit``), so that tickets already in the helpdesk, which the agent did not touch, are not
  judged.
* Date rules. The policy's dates are relative to "today", which no tool argument carries. At commit,
  "today" is the moment the helpdesk stamped on the tickets this session wrote (``updated_at``; the
  policy requires every interaction to be documented with a ticket). A session that wrote no ticket
  has no such moment, and the date rules then find nothing.

Each function receives a :class:`guard.checks.CheckContext` and returns violating rows.
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


# -- vehicles (before_call) -----------------------------------------------------------------------
def vin_is_valid(ctx: CheckContext) -> list[dict[str, Any]]:
    vin = str(_arguments(ctx).get("vin") or "").strip()
    return [] if VIN.match(vin) else [{"vin": vin, "expected": "17 letters and digits"}]


def vehicle_not_excluded(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _arguments(ctx)
    name = _vehicle_name(args.get("make"), args.get("model"))
    if any(p.search(name) for p in EXCLUDED_VEHICLES):
        return [{"make": args.get("make"), "model": args.get("model")}]
    return []


def high_risk_vehicle_flagged(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _arguments(ctx)
    if _truthy(args.get("uw_pending")):
        return []
    name = _vehicle_name(args.get("make"), args.get("model"))
    if not any(p.search(name) for p in HIGH_RISK_VEHICLES):
        return []
    tier = _one(ctx, _POLICY_TIER, {"id": args.get("policy_id")})
    if tier is None or tier["tier"] != "Standard":
        return []
    return [{"policy_id": args.get("policy_id"), "make": args.get("make"), "model": args.get("model")}]


# -- dates (at_commit) ----------------------------------------------------------------------------
def driver_changes_today(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change in _rows(ctx, DRIVERS):
        after = change.after or {}
        if change.op == "insert":
            field = "effective_date"
        elif _became(change, "status", "Removed"):
            field = "removal_date"
        else:
            continue
        if _date(after.get(field)) != today:
            out.append({"driver_id": change.key, field: after.get(field), "today": today.isoformat()})
    return out


def vehicle_add_backdating(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change in _rows(ctx, VEHICLES):
        if change.op != "insert":
            continue
        after = change.after or {}
        policy = _one(ctx, _POLICY, {"id": after.get("policy_id")})
        if policy is None:
            continue
        if policy["state"] in NO_BACKDATING_STATES:
            earliest = today
        else:
            earliest = today - dt.timedelta(days=int(policy["automatic_extension_days"] or 0))
        effective = _date(after.get("effective_date"))
        if effective is None or effective < earliest:
            out.append(
                {
                    "vehicle_id": change.key,
                    "state": policy["state"],
                    "effective_date": after.get("effective_date"),
                    "earliest": earliest.isoformat(),
                }
            )
    return out


def vehicle_removal_today(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    return [
        {"vehicle_id": c.key, "removal_date": c.after.get("removal_date"), "today": today.isoformat()}
        for c in _rows(ctx, VEHICLES)
        if c.after is not None
        and _became(c, "status", "Removed")
        and _date(c.after.get("removal_date")) != today
    ]


def extension_due_date(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    due = now.date() + dt.timedelta(days=EXTENSION_DAYS)
    out = []
    for change in _rows(ctx, ACCOUNTS):
        after = change.after or {}
        if after.get("arrangement_type") != "Extension" or not (
            _changed(change, "new_due_date") or _changed(change, "arrangements_12_months")
        ):
            continue
        if _date(after.get("new_due_date")) != due:
            out.append(
                {
                    "billing_account_id": change.key,
                    "new_due_date": after.get("new_due_date"),
                    "expected": due.isoformat(),
                }
            )
    return out


def cancellation_notice(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change in _rows(ctx, POLICIES):
        after = change.after or {}
        if after.get("status") != "Pending Cancellation" or not (
            _changed(change, "status") or _changed(change, "cancellation_date")
        ):
            continue
        earliest = today + dt.timedelta(days=1) if after.get("state") in NO_BACKDATING_STATES else today
        date = _date(after.get("cancellation_date"))
        if date is None or date < earliest:
            out.append(
                {
                    "policy_id": change.key,
                    "state": after.get("state"),
                    "cancellation_date": after.get("cancellation_date"),
                    "earliest": earliest.isoformat(),
                }
            )
    return out


def _reinstatements(ctx: CheckContext) -> Iterator[tuple[RowChange, dt.date]]:
    """Policies this session took from cancelled/lapsed to Active, with their cancellation date."""
    for change in _rows(ctx, POLICIES):
        before = change.before or {}
        after = change.after or {}
        if change.op != "update" or after.get("status") != "Active":
            continue
        if before.get("status") not in ("Cancelled for Non-Payment", "Lapsed"):
            continue
        cancelled = _date(before.get("cancellation_date"))
        if cancelled is not None:
            yield change, cancelled


def reinstatement_window(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    out = []
    for change, cancelled in _reinstatements(ctx):
        tier = _one(ctx, _POLICY_TIER, {"id": change.key})
        window = REINSTATEMENT_WINDOW_DAYS.get(tier["tier"]) if tier else None
        days = (now.date() - cancelled).days
        if window is not None and days > window:
            out.append(
                {"policy_id": change.key, "tier": tier and tier["tier"], "days": days, "window": window}
            )
    return out


def reinstatement_lapse(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change, cancelled in _reinstatements(ctx):
        after = change.after or {}
        lapse = _truthy(after.get("lapse_flag"))
        row = {
            "policy_id": change.key,
            "cancellation_date": cancelled.isoformat(),
            "lapse_flag": after.get("lapse_flag"),
            "lapse_end": after.get("lapse_end"),
            "today": today.isoformat(),
        }
        after_cancellation = today > cancelled and (not lapse or _date(after.get("lapse_end")) != today)
        before_cancellation = today < cancelled and lapse
        if after_cancellation or before_cancellation:
            out.append(row)
    return out


def document_link_expiry(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    expected = now + LINK_LIFETIME
    out = []
    for change in _rows(ctx, DOCUMENTS):
        if change.op != "insert":
            continue
        expires = _moment((change.after or {}).get("expires_at"))
        if expires is None or abs(expires - expected) > LINK_TOLERANCE:
            out.append(
                {
                    "document_id": change.key,
                    "expires_at": (change.after or {}).get("expires_at"),
                    "expected": expected.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            )
    return out


def loss_not_in_future(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change in _rows(ctx, CLAIMS):
        loss = (change.after or {}).get("date_of_loss")
        date = _date(loss)
        if change.op == "insert" and (date is None or date > today):
            out.append({"claim_id": change.key, "date_of_loss": loss, "today": today.isoformat()})
    return out


_CLAIM_VEHICLE = (
    "SELECT id, year, date_added_to_policy FROM policy_vehicles"
    " WHERE policy_id = :policy_id AND (id = :vehicle_id OR vin = :vin)"
)


def siu_theft_triggers(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change in _rows(ctx, CLAIMS):
        after = change.after or {}
        if change.op != "insert" or after.get("claim_type") != THEFT:
            continue
        if (after.get("siu_flag") or "None") != "None":
            continue
        vehicles = ctx.query(
            _CLAIM_VEHICLE,
            {
                "policy_id": after.get("policy_id"),
                "vehicle_id": after.get("vehicle_id") or "",
                "vin": after.get("vehicle_vin") or "",
            },
        )
        for vehicle in vehicles:
            added = _date(vehicle.get("date_added_to_policy"))
            old = today.year - int(vehicle["year"]) >= SIU_VEHICLE_AGE_YEARS
            recent = added is not None and (today - added).days <= SIU_RECENTLY_ADDED_DAYS
            if old or recent:
                out.append(
                    {
                        "claim_id": change.key,
                        "vehicle_id": vehicle["id"],
                        "year": vehicle["year"],
                        "date_added_to_policy": vehicle.get("date_added_to_policy"),
                    }
                )
    return out


# -- tickets (after_call) -------------------------------------------------------------------------
def no_ticket_comments(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"table": c.table, "id": c.key, "op": c.op}
        for c in ctx.changes
        if c.table in COMMENT_TABLES and c.op != "delete"
    ]


def no_unused_ticket_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        used = [
            field
            for field in ("organization_id", "due_at", "tags")
            if after.get(field) not in (None, "", []) and _changed(change, field)
        ]
        if used:
            out.append({"ticket_id": change.key, "fields": used})
    return out


def every_interaction_has_a_ticket(ctx: CheckContext) -> list[dict[str, Any]]:
    if any(c.after is not None for c in _rows(ctx, TICKETS)):
        return []
    return [{"tickets_written": 0, "tables_written": sorted({c.table for c in ctx.changes})}]


def tickets_assigned_to_agent(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "assignee_id": c.after.get("assignee_id")}
        for c in _rows(ctx, TICKETS)
        if c.after is not None and _changed(c, "assignee_id") and str(c.after.get("assignee_id")) != AGENT_ID
    ]


def tickets_created_open(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": c.after.get("status"), "expected": "open"}
        for c in _rows(ctx, TICKETS)
        if c.after is not None and c.op == "insert" and c.after.get("status") != "open"
    ]


def no_system_statuses(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {"ticket_id": c.key, "status": c.after.get("status")}
        for c in _rows(ctx, TICKETS)
        if c.after is not None and _changed(c, "status") and c.after.get("status") in SYSTEM_STATUSES
    ]


def custom_field_values(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        for field, allowed in CUSTOM_FIELD_VALUES.items():
            value = after.get(field)
            if value is not None and _changed(change, field) and value not in allowed:
                out.append({"ticket_id": change.key, "field": field, "value": value})
        date = after.get("effective_date_of_change")
        if (
            date is not None
            and _changed(change, "effective_date_of_change")
            and (not DATE_FORMAT.match(str(date)) or _date(date) is None)
        ):
            out.append({"ticket_id": change.key, "field": "effective_date_of_change", "value": date})
    return out


def requester_is_user(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        requester = (change.after or {}).get("requester_id")
        if requester is None or not _changed(change, "requester_id"):
            continue
        if not ctx.query("SELECT id FROM zendesk_users WHERE id = :id", {"id": str(requester)}):
            out.append({"ticket_id": change.key, "requester_id": requester})
    return out


# -- authority (at_commit) ------------------------------------------------------------------------
# §2.5 Authority Matrix: only the Named Insured or a Co-Insured may add/remove vehicles and drivers,
# request a billing arrangement, cancel or reinstate. The changes that record those actions, and the
# policy each one is about.
AUTHORITY_TABLES = frozenset({"policy_vehicles", "policy_drivers", "billing_billing_accounts"})
CANCEL_OR_REINSTATE = (
    "status",
    "cancellation_date",
    "cancellation_reason",
    "lapse_flag",
    "lapse_start",
    "lapse_end",
)


def _authorized_policies(ctx: CheckContext) -> set[str]:
    policies = set()
    for change in ctx.changes:
        row = change.after or change.before or {}
        if change.table in AUTHORITY_TABLES and row.get("policy_id"):
            policies.add(str(row["policy_id"]))
        elif change.table == "policy_policies" and any(_changed(change, f) for f in CANCEL_OR_REINSTATE):
            policies.add(change.key)
    return policies


def _insured_emails(ctx: CheckContext, policy_id: str) -> set[str]:
    rows = ctx.query(
        "SELECT c.email FROM crm_customers AS c JOIN policy_policies AS p"
        " ON c.id = p.named_insured_id OR c.id = p.co_insured_id WHERE p.id = :policy"
        " UNION SELECT c.email FROM crm_customers AS c JOIN policy_drivers AS d ON c.id = d.customer_id"
        " WHERE d.policy_id = :policy AND (d.is_named_insured = TRUE OR d.is_co_insured = TRUE)",
        {"policy": policy_id},
    )
    return {str(r["email"]).strip().lower() for r in rows}


def requester_may_authorize(ctx: CheckContext) -> list[dict[str, Any]]:
    policies = _authorized_policies(ctx)
    if not policies:
        return []
    out = []
    for change in _rows(ctx, TICKETS):
        requester = (change.after or {}).get("requester_id")
        if requester is None or not _changed(change, "requester_id"):
            continue
        users = ctx.query("SELECT email FROM zendesk_users WHERE id = :id", {"id": str(requester)})
        if not users:
            continue
        email = str(users[0]["email"]).strip().lower()
        for policy_id in sorted(policies):
            if email not in _insured_emails(ctx, policy_id):
                out.append({"ticket_id": change.key, "requester_id": requester, "policy_id": policy_id})
    return out


# -- tickets (at_commit) --------------------------------------------------------------------------
def ticket_required_fields(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        missing = [f for f in REQUIRED_TICKET_FIELDS if after.get(f) in (None, "")]
        if missing:
            out.append({"ticket_id": change.key, "missing": missing})
    return out


def ticket_outcome_and_category(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        missing = [] if after.get("outcome_summary") else ["outcome_summary"]
        if after.get("status") != "open" and not after.get("request_category"):
            missing.append("request_category")
        if missing:
            out.append({"ticket_id": change.key, "status": after.get("status"), "missing": missing})
    return out


def status_matches_outcome(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        expected = STATUS_FOR_OUTCOME.get(str(after.get("outcome_summary")))
        if expected is not None and after.get("status") != expected:
            out.append(
                {
                    "ticket_id": change.key,
                    "outcome_summary": after.get("outcome_summary"),
                    "status": after.get("status"),
                    "expected": expected,
                }
            )
    return out


def fnol_tickets_incident(ctx: CheckContext) -> list[dict[str, Any]]:
    """Only a session that opens a claim: a ticket coded FNOL without a new claim is an inquiry."""
    if not any(c.op == "insert" for c in _rows(ctx, CLAIMS)):
        return []
    return [
        {
            "ticket_id": c.key,
            "claims_action_type": c.after.get("claims_action_type"),
            "type": c.after.get("type"),
        }
        for c in _rows(ctx, TICKETS)
        if c.after is not None
        and str(c.after.get("claims_action_type") or "").startswith("FNOL")
        and c.after.get("type") != "incident"
    ]


def document_tickets_task(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, DOCUMENTS):
        if change.op != "insert":
            continue
        ticket_id = str((change.after or {}).get("ticket_id"))
        ticket = _one(ctx, "SELECT id, type FROM zendesk_tickets WHERE id = :id", {"id": ticket_id})
        if ticket is not None and ticket["type"] != "task":
            out.append({"ticket_id": ticket_id, "type": ticket["type"], "document_id": change.key})
    return out


_REQUESTER_POLICIES = (
    "SELECT p.id AS policy_id"
    " FROM zendesk_users AS u"
    " JOIN crm_customers AS c ON c.email = u.email"
    " JOIN policy_policies AS p"
    "   ON p.customer_id = c.id OR p.named_insured_id = c.id OR p.co_insured_id = c.id"
    " WHERE u.id = :requester_id"
)
_REQUESTER_ACCOUNTS = (
    "SELECT a.id, a.status"
    " FROM zendesk_users AS u"
    " JOIN crm_customers AS c ON c.email = u.email"
    " JOIN billing_billing_accounts AS a ON a.customer_id = c.id"
    "   OR a.policy_id IN (SELECT p.id FROM policy_policies AS p"
    "                      WHERE p.customer_id = c.id OR p.named_insured_id = c.id"
    "                         OR p.co_insured_id = c.id)"
    " WHERE u.id = :requester_id"
)


def major_claim_ticket_priority(ctx: CheckContext) -> list[dict[str, Any]]:
    major = {
        str(c.after.get("policy_id"))
        for c in _rows(ctx, CLAIMS)
        if c.after is not None and c.op == "insert" and c.after.get("severity") == "Major"
    }
    if not major:
        return []
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        if after.get("request_category") != "Claims" or after.get("priority") in HIGH_PRIORITIES:
            continue
        requester = after.get("requester_id")
        if requester is None:
            continue
        policies = {r["policy_id"] for r in ctx.query(_REQUESTER_POLICIES, {"requester_id": str(requester)})}
        if policies & major:
            out.append(
                {
                    "ticket_id": change.key,
                    "priority": after.get("priority"),
                    "policies": sorted(policies & major),
                }
            )
    return out


def pending_cancellation_ticket_priority(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _rows(ctx, TICKETS):
        after = change.after or {}
        if after.get("request_category") != "Billing & Payments" or after.get("priority") in HIGH_PRIORITIES:
            continue
        requester = after.get("requester_id")
        if requester is None:
            continue
        accounts = ctx.query(_REQUESTER_ACCOUNTS, {"requester_id": str(requester)})
        pending = sorted({r["id"] for r in accounts if r["status"] == "Pending Cancellation"})
        if pending:
            out.append(
                {"ticket_id": change.key, "priority": after.get("priority"), "billing_accounts": pending}
            )
    return out


def tickets_one_requester(ctx: CheckContext) -> list[dict[str, Any]]:
    """The tickets the session wrote are its requester's: one requester across all of them."""
    requesters: dict[str, list[str]] = {}
    for change in _rows(ctx, TICKETS):
        requester = (change.after or {}).get("requester_id")
        if requester is not None:
            requesters.setdefault(str(requester), []).append(change.key)
    if len(requesters) <= 1:
        return []
    return [{"requester_id": r, "tickets": keys} for r, keys in sorted(requesters.items())]
