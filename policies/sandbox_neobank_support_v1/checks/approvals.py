"""Approvals: the approver is identified from the management chain or the specialist team."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guard.checks import CheckContext

from .lookups import _call_args, _employee, _employee_by_id

# -- approvals ---------------------------------------------------------------------------------------------
SPECIALIST_APPROVERS = frozenset({"it_security", "finance_accounting", "compliance_risk"})


def _chain(ctx: CheckContext, employee: Mapping[str, Any]) -> list[dict[str, Any]]:
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    manager_id = employee.get("manager_id")
    while manager_id and manager_id not in seen:
        seen.add(manager_id)
        manager = _employee_by_id(ctx, manager_id)
        if manager is None:
            break
        chain.append(manager)
        manager_id = manager.get("manager_id")
    return chain


def approvals_approver_identified(ctx: CheckContext) -> list[dict[str, Any]]:
    """The approver is in the requester's management chain, or an IT Security / Finance / Compliance
    approver, or the backup (manager) of such an approver who is on leave."""
    args = _call_args(ctx)
    requester = _employee(ctx, args.get("requester_email"))
    approver = _employee(ctx, args.get("approver_email"))
    if requester is None or approver is None:
        return []
    if approver.get("department") in SPECIALIST_APPROVERS:
        return []
    if any(m["id"] == approver["id"] for m in _chain(ctx, requester)):
        return []
    backups = ctx.query(
        "SELECT e.id"
        " FROM sandbox_neobank_support_main_models_employees AS e"
        " WHERE e.manager_id = :approver_id"
        " AND e.employment_status = 'on_leave'",
        {"approver_id": approver["id"]},
    )
    for reported in backups:
        member = _employee_by_id(ctx, reported["id"])
        if member is None:
            continue
        if member.get("department") in SPECIALIST_APPROVERS:
            return []
    return [
        {
            "requester_id": requester["id"],
            "approver_id": approver["id"],
            "approver_department": approver.get("department"),
        }
    ]
