"""Training: seats, prerequisites, conferences during an engagement, cost and overlap approvals."""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import (
    ASSIGNMENTS,
    _all,
    _approvals,
    _arguments,
    _completed_courses,
    _employees,
    _list,
    _low,
    _overlaps,
    _when,
    _with_backups,
)


# -- training ----------------------------------------------------------------------------------------
def _enrollment(ctx: CheckContext) -> tuple[str, dict[str, Any]] | None:
    args = _arguments(ctx)
    if args.get("action") != "enroll_employee":
        return None
    rows = ctx.query(
        "SELECT * FROM degreed_training_courses WHERE id = :id", {"id": str(args.get("course_id"))}
    )
    if not rows:
        return None
    return _low(args.get("email")), rows[0]


def training_seat_available(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _enrollment(ctx)
    if found is None:
        return []
    _email, course = found
    if course["max_seats"] is None:
        return []
    taken = sum(
        1
        for e in _all(ctx, "degreed_training_enrollments")
        if e["course_id"] == course["id"] and e["completion_date"] is None
    )
    if taken < course["max_seats"]:
        return []
    return [{"course_id": course["id"], "max_seats": course["max_seats"], "enrolled": taken}]


def training_prerequisites_completed(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _enrollment(ctx)
    if found is None:
        return []
    email, course = found
    missing = sorted(set(map(str, _list(course["prerequisites"]))) - _completed_courses(ctx, email))
    if not missing:
        return []
    return [{"course_id": course["id"], "email": email, "missing_prerequisites": missing}]


def conference_not_during_active_engagement(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _enrollment(ctx)
    if found is None:
        return []
    email, course = found
    if course["training_category"] != "conference":
        return []
    start, end = _when(course["start_date"]), _when(course["end_date"])
    return [
        {"course_id": course["id"], "engagement_code": a["engagement_code"], "assignment_end": a["end_date"]}
        for a in _all(ctx, ASSIGNMENTS)
        if _low(a["employee_email"]) == email
        and a["assignment_status"] == "active"
        and _overlaps(start, end, a["start_date"], a["end_date"])
    ]


def training_cost_approved(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _enrollment(ctx)
    if found is None:
        return []
    email, course = found
    if not course["cost"] or course["cost"] <= 0:
        return []
    if any(a["status"] == "approved" for a in _approvals(ctx, email, ("training_cost",))):
        return []
    return [{"course_id": course["id"], "cost": course["cost"], "email": email}]


def training_overlap_approved(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _enrollment(ctx)
    if found is None:
        return []
    email, course = found
    start, end = _when(course["start_date"]), _when(course["end_date"])
    employees = _employees(ctx)
    approved = {
        _low(a["approver_email"])
        for a in _approvals(ctx, email, ("training_engagement_coordination",))
        if a["status"] == "approved"
    }
    out = []
    for a in _all(ctx, ASSIGNMENTS):
        if _low(a["employee_email"]) != email or a["assignment_status"] not in ("active", "booked"):
            continue
        if not _overlaps(start, end, a["start_date"], a["end_date"]):
            continue
        if approved & _with_backups([a["senior_manager_email"]], employees):
            continue
        out.append(
            {
                "course_id": course["id"],
                "engagement_code": a["engagement_code"],
                "senior_manager_email": a["senior_manager_email"],
            }
        )
    return out
