"""Python checks of the StayBridge (external_booking_v1) pack.

SQL checks see the state; these also need what a call (after_call) or the whole session (at_commit)
changed, list-valued columns (tags, booking references, special requests), date arithmetic (nights
of a stay) or a set of amounts the policy's formulas allow. Each function receives a
:class:`guard.checks.CheckContext` and returns violating rows. None of them reads the agent's call
history: "what the session did" is the net row-level change set, never the sequence of calls.

Amounts the policy computes from the time until check-in (modification fees, cancellation refund
percentages) are checked against the *set* of values the formula can produce over every time window,
because the policy's clock is not part of the state (see README.md, "Not enforced").

The checks live in one module per policy area (``lookups`` holds the tables, the policy's constants
and the helpers they share); this package re-exports every check, so the bare ``python:`` names in
policy.yaml resolve here.
"""

from __future__ import annotations

from .bookings import (
    accessible_room_available,
    available_inventory,
    group_members_confirmed,
    large_group_approval,
    mid_market_approval,
    pets_supported,
    room_capacity,
)
from .payments import (
    cancellation_refunds,
    charges_follow_a_change,
    invoice_type_by_account,
    modification_charges,
    payment_token_format,
    post_stay_amount,
)
from .profile import complaint_count_increment, complaint_counted
from .ticket_outcomes import (
    cancellation_request_type,
    check_in_tag_needs_upcoming_booking,
    dispute_case_resolution,
    escalated_on_hold,
    missing_booking_priority,
    modification_request_type,
    no_action_means_no_change,
    post_stay_request_type,
    refund_full_only_for_whole_booking,
    task_type_for_actions,
    tickets_one_requester,
)
from .ticket_records import (
    escalation_recorded,
    refund_amount_processed,
    refund_amount_recorded,
    refund_resolution_has_amount,
    ticket_escalation_reason_fits,
)
from .tickets import (
    b2c_tag_matches_booking,
    booking_fields,
    booking_fields_match,
    creation_fields,
    every_request_has_a_ticket,
    group_first_reference,
    no_organization_or_due_date,
    no_problem_type,
    no_ticket_comments,
    requester_is_booking_customer,
    resolution_fields,
    tags_from_categories,
    ticket_status_lifecycle,
    tickets_assigned_to_agent,
    tickets_resolved,
    user_type_tag,
)

__all__ = [
    "accessible_room_available",
    "available_inventory",
    "b2c_tag_matches_booking",
    "booking_fields",
    "booking_fields_match",
    "cancellation_refunds",
    "cancellation_request_type",
    "charges_follow_a_change",
    "check_in_tag_needs_upcoming_booking",
    "complaint_count_increment",
    "complaint_counted",
    "creation_fields",
    "dispute_case_resolution",
    "escalated_on_hold",
    "escalation_recorded",
    "every_request_has_a_ticket",
    "group_first_reference",
    "group_members_confirmed",
    "invoice_type_by_account",
    "large_group_approval",
    "mid_market_approval",
    "missing_booking_priority",
    "modification_charges",
    "modification_request_type",
    "no_action_means_no_change",
    "no_organization_or_due_date",
    "no_problem_type",
    "no_ticket_comments",
    "payment_token_format",
    "pets_supported",
    "post_stay_amount",
    "post_stay_request_type",
    "refund_amount_processed",
    "refund_amount_recorded",
    "refund_full_only_for_whole_booking",
    "refund_resolution_has_amount",
    "requester_is_booking_customer",
    "resolution_fields",
    "room_capacity",
    "tags_from_categories",
    "task_type_for_actions",
    "ticket_escalation_reason_fits",
    "ticket_status_lifecycle",
    "tickets_assigned_to_agent",
    "tickets_one_requester",
    "tickets_resolved",
    "user_type_tag",
]
