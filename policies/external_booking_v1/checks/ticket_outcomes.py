"""Zendesk tickets at commit: what the ticket says about what the session did (request type,
resolution, escalation, priority, tags).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

from .lookups import (
    BOOKINGS,
    CHECK_IN_TAGS,
    TRANSACTIONS,
    _booking,
    _changed,
    _inserted,
    _is_cancellation,
    _is_modification,
    _norm_reason,
    _unit,
    _updates,
)
from .ticket_records import _ticket_refs
from .tickets import _agent_tickets, _resolved, _tags, _tracking_tickets


# -- Zendesk tickets at commit: what the ticket says about what the session did ------------------------
def _tickets_about(ctx: CheckContext, refs: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """Resolved agent tickets whose booking (or group) is one of these bookings."""
    return [(key, t) for key, t in _resolved(ctx) if _ticket_refs(ctx, t) & refs]


def _session_bookings(ctx: CheckContext) -> Iterator[tuple[RowChange, set[str]]]:
    for change in _updates(ctx, BOOKINGS):
        assert change.before is not None
        yield change, _unit(ctx, change.before)[1]


def _session_refunds(ctx: CheckContext) -> Iterator[dict[str, Any]]:
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") == "refund":
            yield txn


def dispute_case_resolution(ctx: CheckContext) -> list[dict[str, Any]]:
    """§4.3.2: after a dispute case, the ticket is solved as billing-inquiry / information-provided."""
    out = []
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") != "dispute":
            continue
        ref = str(txn.get("booking_reference"))
        booking = _booking(ctx, ref)
        refs = _unit(ctx, booking)[1] if booking is not None else {ref}
        about = _tickets_about(ctx, refs)
        if not about:
            continue
        if any(
            t.get("status") == "solved"
            and t.get("request_type_detail") == "billing-inquiry"
            and t.get("resolution_action") == "information-provided"
            for _, t in about
        ):
            continue
        out.append(
            {
                "dispute_case_id": txn.get("transaction_id"),
                "booking_reference": ref,
                "tickets": [
                    {k: t.get(k) for k in ("status", "request_type_detail", "resolution_action")}
                    | {"id": key}
                    for key, t in about
                ],
            }
        )
    return out


def cancellation_request_type(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change, refs in _session_bookings(ctx):
        if not _is_cancellation(change):
            continue
        about = _tickets_about(ctx, refs)
        if about and not any(t.get("request_type_detail") == "cancel-booking" for _, t in about):
            out.append(
                {
                    "booking_reference": (change.before or {}).get("booking_reference"),
                    "tickets": {key: t.get("request_type_detail") for key, t in about},
                }
            )
    return out


def post_stay_request_type(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for txn in _session_refunds(ctx):
        if _norm_reason(txn.get("reason")) != "post_stay_compensation":
            continue
        ref = str(txn.get("booking_reference"))
        booking = _booking(ctx, ref)
        refs = _unit(ctx, booking)[1] if booking is not None else {ref}
        about = _tickets_about(ctx, refs)
        if about and not any(t.get("request_type_detail") == "post-stay-issue" for _, t in about):
            out.append(
                {"booking_reference": ref, "tickets": {key: t.get("request_type_detail") for key, t in about}}
            )
    return out


MODIFICATION_TYPES = (
    (("check_in_date", "check_out_date"), "modify-dates"),
    (("adults_count", "children_count"), "modify-guests"),
    (("room_type",), "modify-room-type"),
    (("board_type",), "modify-board-type"),
    (("special_requests",), "add-special-request"),
)


def modification_request_type(ctx: CheckContext) -> list[dict[str, Any]]:
    """A booking changed in one respect only: its customer ticket names that modification type."""
    out = []
    for change, refs in _session_bookings(ctx):
        if not _is_modification(change):
            continue
        kinds = [kind for fields, kind in MODIFICATION_TYPES if any(_changed(change, f) for f in fields)]
        if len(kinds) != 1:
            continue
        about = [
            (key, t)
            for key, t in _tickets_about(ctx, refs)
            if "hotel-partner" not in {x.lower() for x in _tags(t)}
        ]
        if about and not any(t.get("request_type_detail") == kinds[0] for _, t in about):
            out.append(
                {
                    "booking_reference": (change.before or {}).get("booking_reference"),
                    "expected": kinds[0],
                    "tickets": {key: t.get("request_type_detail") for key, t in about},
                }
            )
    return out


def no_action_means_no_change(ctx: CheckContext) -> list[dict[str, Any]]:
    """policy-applied-no-action on a ticket whose booking the session modified."""
    modified: set[str] = set()
    for change, refs in _session_bookings(ctx):
        if _is_modification(change):
            modified |= refs
    out = []
    for key, ticket in _resolved(ctx):
        if ticket.get("resolution_action") != "policy-applied-no-action":
            continue
        hit = sorted(_ticket_refs(ctx, ticket) & modified)
        if hit:
            out.append({"ticket_id": key, "resolution_action": "policy-applied-no-action", "modified": hit})
    return out


def escalated_on_hold(ctx: CheckContext) -> list[dict[str, Any]]:
    """The customer ticket of an escalation the session created waits on hold for the hotel."""
    agent = [(c.key, c.after) for c in _agent_tickets(ctx) if c.after is not None]
    out = []
    for tracking in _tracking_tickets(ctx):
        booking = _booking(ctx, tracking.get("booking_reference"))
        refs = {str(tracking.get("booking_reference"))}
        if booking is not None:
            refs |= _unit(ctx, booking)[1]
        for key, ticket in agent:
            if ticket.get("escalation_reason") != tracking.get("escalation_reason"):
                continue
            if not _ticket_refs(ctx, ticket) & refs:
                continue
            if ticket.get("status") != "hold":
                out.append(
                    {
                        "ticket_id": key,
                        "escalation_reason": ticket.get("escalation_reason"),
                        "status": ticket.get("status"),
                    }
                )
    return out


def task_type_for_actions(ctx: CheckContext) -> list[dict[str, Any]]:
    """A booking changed, or a refund or charge processed, is an action item: its ticket is a task."""
    acted: dict[str, set[str]] = {}
    for change, refs in _session_bookings(ctx):
        if _is_modification(change) or _is_cancellation(change):
            acted[str((change.before or {}).get("booking_reference"))] = refs
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") in ("charge", "refund"):
            ref = str(txn.get("booking_reference"))
            booking = _booking(ctx, ref)
            acted[ref] = _unit(ctx, booking)[1] if booking is not None else {ref}
    out = []
    for ref, refs in acted.items():
        about = _tickets_about(ctx, refs)
        if about and not any(t.get("type") == "task" for _, t in about):
            out.append({"booking_reference": ref, "tickets": {key: t.get("type") for key, t in about}})
    return out


def refund_full_only_for_whole_booking(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        if (
            ticket.get("resolution_action") != "refund-full"
            or ticket.get("escalation_reason") == "system-error"
        ):
            continue
        booking = _booking(ctx, ticket.get("booking_reference"))
        if booking is not None and booking.get("booking_status") in ("confirmed", "checked_in"):
            out.append(
                {
                    "ticket_id": key,
                    "booking_reference": booking["booking_reference"],
                    "booking_status": booking["booking_status"],
                }
            )
    return out


def missing_booking_priority(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        ref = ticket.get("booking_reference")
        if not ref or _booking(ctx, ref) is not None:
            continue
        allowed = {"low", "urgent"} if "hotel-partner" in {t.lower() for t in _tags(ticket)} else {"low"}
        if ticket.get("priority") not in allowed:
            out.append({"ticket_id": key, "booking_reference": ref, "priority": ticket.get("priority")})
    return out


def check_in_tag_needs_upcoming_booking(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for key, ticket in _resolved(ctx):
        timing = [t for t in _tags(ticket) if t.lower() in CHECK_IN_TAGS]
        if not timing:
            continue
        booking = _booking(ctx, ticket.get("booking_reference"))
        status = None if booking is None else booking.get("booking_status")
        if booking is None or status in ("checked_in", "checked_out"):
            out.append(
                {
                    "ticket_id": key,
                    "booking_reference": ticket.get("booking_reference"),
                    "booking_status": status,
                    "tags": timing,
                }
            )
    return out


def tickets_one_requester(ctx: CheckContext) -> list[dict[str, Any]]:
    """The tickets the session wrote are its requester's: one requester across all of them."""
    requesters: dict[str, list[str]] = {}
    for change in _agent_tickets(ctx):
        requester = (change.after or {}).get("requester_id")
        if requester is not None:
            requesters.setdefault(str(requester), []).append(change.key)
    if len(requesters) <= 1:
        return []
    return [{"requester_id": r, "tickets": keys} for r, keys in sorted(requesters.items())]
