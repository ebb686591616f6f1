"""Zendesk tickets at commit: the session's refunds and hotel escalations recorded on the customer's
ticket (refund amounts, escalation reasons).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guard.checks import CheckContext

from .lookups import (
    TRANSACTIONS,
    _booking,
    _changed,
    _close,
    _fits,
    _group,
    _group_references,
    _inserted,
    _money,
    _tier,
    _unit,
)
from .tickets import _agent_tickets, _resolved, _tracking_tickets


def _ticket_refs(ctx: CheckContext, ticket: Mapping[str, Any]) -> set[str]:
    """The bookings a ticket's refund may be recorded on: its booking, or its group's bookings."""
    refs = {str(ticket.get("booking_reference"))} if ticket.get("booking_reference") else set()
    if ticket.get("group_booking_id"):
        refs |= _group_references(ctx, ticket.get("group_booking_id"))
    return refs


def refund_amount_recorded(ctx: CheckContext) -> list[dict[str, Any]]:
    """Refunds processed in the session on a booking appear as the refund_amount of its ticket."""
    by_ref: dict[str, float] = {}
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") == "refund":
            ref = str(txn.get("booking_reference"))
            by_ref[ref] = by_ref.get(ref, 0.0) + (_money(txn.get("amount")) or 0.0)
    if not by_ref:
        return []
    tickets = [(key, t, _ticket_refs(ctx, t)) for key, t in _resolved(ctx)]
    out = []
    for ref, refunded in by_ref.items():
        about = [(key, t, refs) for key, t, refs in tickets if ref in refs]
        if not about:
            continue  # no resolved ticket names the booking; resolution_fields covers the ticket
        recorded = [_money(t.get("refund_amount")) or 0.0 for _, t, _ in about]
        unit_refunded = sum(v for r, v in by_ref.items() if r in about[0][2])
        if any(_close(x, refunded) or _close(x, unit_refunded) for x in recorded):
            continue
        if _close(sum(recorded), refunded) or _close(sum(recorded), unit_refunded):
            continue
        out.append(
            {
                "booking_reference": ref,
                "refunded": round(refunded, 2),
                "tickets": [key for key, _, _ in about],
                "refund_amount": recorded,
            }
        )
    return out


def refund_amount_processed(ctx: CheckContext) -> list[dict[str, Any]]:
    """A refund_amount above 0 set in the session is a refund processed on the ticket's booking(s)."""
    out = []
    for change in _agent_tickets(ctx):
        ticket = change.after
        assert ticket is not None
        amount = _money(ticket.get("refund_amount")) or 0.0
        if amount <= 0 or not _changed(change, "refund_amount"):
            continue
        refs = _ticket_refs(ctx, ticket)
        rows = []
        for ref in refs:
            rows += ctx.query(
                "SELECT amount, payment_status FROM payment_api_transactions"
                " WHERE booking_reference = :ref AND transaction_type = 'refund'",
                {"ref": ref},
            )
        amounts = [_money(r.get("amount")) or 0.0 for r in rows if r.get("payment_status") != "failed"]
        session = [
            _money(t.get("amount")) or 0.0
            for t in _inserted(ctx, TRANSACTIONS)
            if t.get("transaction_type") == "refund" and str(t.get("booking_reference")) in refs
        ]
        candidates = {*amounts, sum(amounts), sum(session)}
        if not _fits(amount, candidates):
            out.append(
                {
                    "ticket_id": change.key,
                    "booking_reference": ticket.get("booking_reference"),
                    "refund_amount": amount,
                    "refunds_on_record": amounts,
                }
            )
    return out


def refund_resolution_has_amount(ctx: CheckContext) -> list[dict[str, Any]]:
    return [
        {
            "ticket_id": key,
            "resolution_action": t.get("resolution_action"),
            "refund_amount": t.get("refund_amount"),
        }
        for key, t in _resolved(ctx)
        if t.get("resolution_action") in ("refund-full", "refund-partial")
        and (_money(t.get("refund_amount")) or 0) <= 0
    ]


def escalation_recorded(ctx: CheckContext) -> list[dict[str, Any]]:
    """An escalation to the hotel in the session shows as the escalation_reason of the customer ticket."""
    agent = [t.after for t in _agent_tickets(ctx) if t.after is not None]
    out = []
    for tracking in _tracking_tickets(ctx):
        booking = _booking(ctx, tracking.get("booking_reference"))
        refs = {str(tracking.get("booking_reference"))}
        if booking is not None:
            refs |= _unit(ctx, booking)[1]
        reason = tracking.get("escalation_reason")
        if any(
            t.get("escalation_reason") == reason
            and (str(t.get("booking_reference")) in refs or _ticket_refs(ctx, t) & refs)
            for t in agent
        ):
            continue
        out.append({"booking_reference": tracking.get("booking_reference"), "escalation_reason": reason})
    return out


def _reason_problem(
    ctx: CheckContext, reason: Any, booking: Mapping[str, Any] | None, group_id: Any
) -> str | None:
    if booking is None:
        return None
    if reason == "large-group-booking":
        group = _group(ctx, group_id or booking.get("group_booking_id"))
        if group is None or int(group.get("total_rooms") or 0) < 16:
            return "large-group-booking needs a group of 16 or more rooms"
    elif reason == "high-value-dispute":
        if (_money(booking.get("booking_value")) or 0) <= 2000:
            return "high-value-dispute needs a booking_value above $2,000"
    elif reason == "guest-complaint":
        if booking.get("booking_status") != "checked_out":
            return "guest-complaint is a post-stay complaint (booking checked_out)"
    elif reason == "same-day-modification" and _tier(ctx, booking.get("hotel_id")) == "budget":
        return "budget partner hotels do not take same-day modifications"
    return None


def ticket_escalation_reason_fits(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _agent_tickets(ctx):
        ticket = change.after
        assert ticket is not None
        if not _changed(change, "escalation_reason") or not ticket.get("escalation_reason"):
            continue
        booking = _booking(ctx, ticket.get("booking_reference"))
        problem = _reason_problem(
            ctx, ticket.get("escalation_reason"), booking, ticket.get("group_booking_id")
        )
        if problem:
            out.append(
                {
                    "ticket_id": change.key,
                    "booking_reference": ticket.get("booking_reference"),
                    "escalation_reason": ticket.get("escalation_reason"),
                    "problem": problem,
                }
            )
    return out
