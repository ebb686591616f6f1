"""Python checks of the neobank pack (Velocity Digital Bank internal IT support).

SQL checks see the state; these also need what SQL cannot say simply: which rows a call or the
session changed (ticket hygiene, approval bookkeeping), the policy's named tools and device models
matched against the free-text names the tools take, or a walk up the management chain. Each function
receives a :class:`guard.checks.CheckContext` and returns the violating rows.

The checks live in one module per policy area (``lookups`` holds the tables, the policy's constants
and the helpers they share); this package re-exports every check, so the bare ``python:`` names in
policy.yaml resolve here.
"""

from __future__ import annotations

from .access import (
    access_contractor_expiry,
    access_contractor_group_4_5,
    access_contractor_temporary,
    access_documented_on_ticket,
    access_expiry_when_temporary,
    access_forbidden_by_role,
    access_production_temp_only,
    access_status_limits,
    classify_access,
    incident_access_post_facto,
)
from .approvals import approvals_approver_identified
from .dashboards import bi_approval, bi_known_group
from .hardware import (
    hardware_approval,
    hardware_assign_from_local_stock,
    hardware_listed_models,
    hardware_monitor_dock_eligibility,
    hardware_order_first_model,
    hardware_order_only_out_of_stock,
    hardware_replaced_laptop_retired,
    model_row,
)
from .tickets import (
    no_ticket_comments,
    ticket_access_expiry_format,
    ticket_allowed_tags,
    ticket_approval_required_kept,
    ticket_asset_id_format,
    ticket_assignee,
    ticket_creation_fields,
    ticket_id_lists_without_spaces,
    ticket_no_due_at,
    ticket_organization,
    ticket_owner_on_create,
    ticket_solved_with_resolution,
    ticket_system_statuses,
    ticket_type_not_task,
)
from .tickets_at_commit import (
    approvals_recorded_on_ticket,
    approvals_urgency_matches_priority,
    every_request_has_a_ticket,
    no_duplicate_tickets,
    tickets_approval_ids_when_required,
    tickets_approval_records_exist,
    tickets_approval_status_matches,
    tickets_entry_fields,
    tickets_escalation,
    tickets_escalation_category_owner,
    tickets_executive_priority,
    tickets_incident_fields,
    tickets_not_solved_while_pending,
    tickets_one_requester,
    tickets_pending_while_awaiting_approval,
    tickets_question_low,
)

__all__ = [
    "access_contractor_expiry",
    "access_contractor_group_4_5",
    "access_contractor_temporary",
    "access_documented_on_ticket",
    "access_expiry_when_temporary",
    "access_forbidden_by_role",
    "access_production_temp_only",
    "access_status_limits",
    "approvals_approver_identified",
    "approvals_recorded_on_ticket",
    "approvals_urgency_matches_priority",
    "bi_approval",
    "bi_known_group",
    "classify_access",
    "every_request_has_a_ticket",
    "hardware_approval",
    "hardware_assign_from_local_stock",
    "hardware_listed_models",
    "hardware_monitor_dock_eligibility",
    "hardware_order_first_model",
    "hardware_order_only_out_of_stock",
    "hardware_replaced_laptop_retired",
    "incident_access_post_facto",
    "model_row",
    "no_duplicate_tickets",
    "no_ticket_comments",
    "ticket_access_expiry_format",
    "ticket_allowed_tags",
    "ticket_approval_required_kept",
    "ticket_asset_id_format",
    "ticket_assignee",
    "ticket_creation_fields",
    "ticket_id_lists_without_spaces",
    "ticket_no_due_at",
    "ticket_organization",
    "ticket_owner_on_create",
    "ticket_solved_with_resolution",
    "ticket_system_statuses",
    "ticket_type_not_task",
    "tickets_approval_ids_when_required",
    "tickets_approval_records_exist",
    "tickets_approval_status_matches",
    "tickets_entry_fields",
    "tickets_escalation",
    "tickets_escalation_category_owner",
    "tickets_executive_priority",
    "tickets_incident_fields",
    "tickets_not_solved_while_pending",
    "tickets_one_requester",
    "tickets_pending_while_awaiting_approval",
    "tickets_question_low",
]
