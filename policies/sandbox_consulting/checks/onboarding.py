"""Onboarding: phase 3 only after the mandatory trainings."""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import MANDATORY_TRAININGS, PHASE_3_SOFTWARE, _all, _completed_courses, _low


# -- onboarding ------------------------------------------------------------------------------------
def _phase_3_target(ctx: CheckContext) -> tuple[str, str] | None:
    """(employee, software name) of a licence or Okta grant of phase-3 onboarding software."""
    if ctx.call is None:
        return None
    args = ctx.call.arguments
    if ctx.call.tool == "okta_provision_access":
        name = _low(args.get("app_name"))
    elif args.get("action") == "allocate":
        rows = ctx.query(
            "SELECT name FROM software_catalog_software_catalog WHERE id = :id",
            {"id": str(args.get("catalog_id"))},
        )
        name = _low(rows[0]["name"]) if rows else ""
    else:
        return None
    if not any(s in name for s in PHASE_3_SOFTWARE):
        return None
    return _low(args.get("email")), name


def phase_3_after_mandatory_training(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _phase_3_target(ctx)
    if found is None:
        return []
    email, name = found
    titles = {c["id"]: _low(c["title"]) for c in _all(ctx, "degreed_training_courses")}
    completed = [titles.get(c, "") for c in _completed_courses(ctx, email)]
    missing = [m for m in MANDATORY_TRAININGS if not any(m in t for t in completed)]
    if not missing:
        return []
    return [{"email": email, "software": name, "mandatory_trainings_not_completed": missing}]
