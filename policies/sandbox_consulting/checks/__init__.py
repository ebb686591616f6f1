"""Python checks of the consulting pack (Meridian Strategy Group internal support).

Two kinds of rules live here. Ticket rules read the change set of a call or of the session, so that
tickets already in the helpdesk before the session, which the agent did not touch, are not judged.
Provisioning and approval rules join several systems (Workday, Mavenlink, Salesforce, the approval
system, Degreed) by employee email, compare dates or read list fields (course prerequisites, a
client's required trainings), which is clearer in Python than in one portable SQL statement.

Every function receives a :class:`guard.checks.CheckContext` and returns the violating rows. They read
the shadow state through ``ctx.query`` (small tables, read whole) and never the call history.

The checks live in one module per policy area (``lookups`` holds the tables, the policy's constants
and the helpers they share); this package re-exports every check, so the bare ``python:`` names in
policy.yaml resolve here.
"""

from __future__ import annotations

from .approvals import approval_engagement_code_validated, approver_by_request_type
from .client_access import (
    client_access_approval_after_prerequisites,
    client_access_approved,
    client_access_engagement,
    client_access_prerequisites,
)
from .documents import client_confidential_prerequisites, confidential_folder_approved
from .onboarding import phase_3_after_mandatory_training
from .provisioning import (
    allocation_engagement_code_validated,
    allocation_needs_engagement_code,
    expense_override_after_approval,
    no_provisioning_while_approval_open,
    software_allocation_after_approval,
)
from .tickets import (
    no_ticket_comments,
    tickets_approver_id_format,
    tickets_assigned_to_agent,
    tickets_created_open,
    tickets_custom_field_formats,
    tickets_engagement_code_validated,
    tickets_never_closed,
    tickets_no_incident,
    tickets_required_fields,
    tickets_tags_without_hash,
    tickets_unused_fields,
)
from .tickets_at_commit import (
    approval_required_names_approvers,
    approvals_recorded_on_ticket,
    asset_recorded_on_ticket,
    custom_field_references,
    device_type_matches_asset,
    every_request_has_a_ticket,
    expense_recorded_on_ticket,
    folder_recorded_on_ticket,
    license_pool_matches_catalog,
    license_recorded_on_ticket,
    low_priority_only_informational,
    partner_tickets_urgent,
    pending_while_approval_pending,
    pending_while_prerequisite_in_progress,
    rejected_expense_tickets_high,
    tickets_one_category_tag,
    tickets_one_requester,
    tickets_resolved,
)
from .training import (
    conference_not_during_active_engagement,
    training_cost_approved,
    training_overlap_approved,
    training_prerequisites_completed,
    training_seat_available,
)

__all__ = [
    "allocation_engagement_code_validated",
    "allocation_needs_engagement_code",
    "approval_engagement_code_validated",
    "approval_required_names_approvers",
    "approvals_recorded_on_ticket",
    "approver_by_request_type",
    "asset_recorded_on_ticket",
    "client_access_approval_after_prerequisites",
    "client_access_approved",
    "client_access_engagement",
    "client_access_prerequisites",
    "client_confidential_prerequisites",
    "conference_not_during_active_engagement",
    "confidential_folder_approved",
    "custom_field_references",
    "device_type_matches_asset",
    "every_request_has_a_ticket",
    "expense_override_after_approval",
    "expense_recorded_on_ticket",
    "folder_recorded_on_ticket",
    "license_pool_matches_catalog",
    "license_recorded_on_ticket",
    "low_priority_only_informational",
    "no_provisioning_while_approval_open",
    "no_ticket_comments",
    "partner_tickets_urgent",
    "pending_while_approval_pending",
    "pending_while_prerequisite_in_progress",
    "phase_3_after_mandatory_training",
    "rejected_expense_tickets_high",
    "software_allocation_after_approval",
    "tickets_approver_id_format",
    "tickets_assigned_to_agent",
    "tickets_created_open",
    "tickets_custom_field_formats",
    "tickets_engagement_code_validated",
    "tickets_never_closed",
    "tickets_no_incident",
    "tickets_one_category_tag",
    "tickets_one_requester",
    "tickets_required_fields",
    "tickets_resolved",
    "tickets_tags_without_hash",
    "tickets_unused_fields",
    "training_cost_approved",
    "training_overlap_approved",
    "training_prerequisites_completed",
    "training_seat_available",
]
