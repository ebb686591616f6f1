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

The checks live in one module per policy area (``lookups`` holds the tables, the policy's constants
and the helpers they share); this package re-exports every check, so the bare ``python:`` names in
policy.yaml resolve here.
"""

from __future__ import annotations

from .authority import requester_may_authorize
from .dates import (
    cancellation_notice,
    document_link_expiry,
    driver_changes_today,
    extension_due_date,
    loss_not_in_future,
    reinstatement_lapse,
    reinstatement_window,
    siu_theft_triggers,
    vehicle_add_backdating,
    vehicle_removal_today,
)
from .tickets import (
    custom_field_values,
    every_interaction_has_a_ticket,
    no_system_statuses,
    no_ticket_comments,
    no_unused_ticket_fields,
    requester_is_user,
    tickets_assigned_to_agent,
    tickets_created_open,
)
from .tickets_at_commit import (
    document_tickets_task,
    fnol_tickets_incident,
    major_claim_ticket_priority,
    pending_cancellation_ticket_priority,
    status_matches_outcome,
    ticket_outcome_and_category,
    ticket_required_fields,
    tickets_one_requester,
)
from .vehicles import high_risk_vehicle_flagged, vehicle_not_excluded, vin_is_valid

__all__ = [
    "cancellation_notice",
    "custom_field_values",
    "document_link_expiry",
    "document_tickets_task",
    "driver_changes_today",
    "every_interaction_has_a_ticket",
    "extension_due_date",
    "fnol_tickets_incident",
    "high_risk_vehicle_flagged",
    "loss_not_in_future",
    "major_claim_ticket_priority",
    "no_system_statuses",
    "no_ticket_comments",
    "no_unused_ticket_fields",
    "pending_cancellation_ticket_priority",
    "reinstatement_lapse",
    "reinstatement_window",
    "requester_is_user",
    "requester_may_authorize",
    "siu_theft_triggers",
    "status_matches_outcome",
    "ticket_outcome_and_category",
    "ticket_required_fields",
    "tickets_assigned_to_agent",
    "tickets_created_open",
    "tickets_one_requester",
    "vehicle_add_backdating",
    "vehicle_not_excluded",
    "vehicle_removal_today",
    "vin_is_valid",
]
