"""Client access: an engagement, the client's prerequisites and approvals, and at commit an approval
only after the prerequisites.
"""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import (
    ASSIGNMENTS,
    SECURITY_DIRECTOR,
    SF_ENGAGEMENTS,
    _all,
    _approvals,
    _arguments,
    _assigned_to_client,
    _clearance,
    _completed_courses,
    _list,
    _low,
    _nda_signed,
)


# -- client access -----------------------------------------------------------------------------------
def _client_call(ctx: CheckContext) -> tuple[str, str] | None:
    args = _arguments(ctx)
    if args.get("action") not in ("provision_vpn", "provision_client_system"):
        return None
    client_id = args.get("client_id")
    if client_id in (None, ""):
        return None
    return _low(args.get("email")), str(client_id)


def client_access_engagement(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _client_call(ctx)
    if found is None:
        return []
    email, client_id = found
    if _assigned_to_client(ctx, email, client_id):
        return []
    return [{"email": email, "client_id": client_id}]


def _missing_client_prerequisites(ctx: CheckContext, email: str, client_id: str) -> list[str]:
    rows = ctx.query("SELECT * FROM salesforce_crm_clients WHERE id = :id", {"id": client_id})
    if not rows:
        return []
    client = rows[0]
    missing = []
    clearance = _clearance(ctx, email)
    if clearance is None or clearance["status"] != "cleared":
        missing.append("clearance")
    elif client["clearance_level"] == "high_security" and clearance["clearance_level"] != "high_security":
        missing.append("high_security clearance")
    if client["requires_nda"] and not _nda_signed(ctx, email, client_id):
        missing.append("nda")
    courses = sorted(
        set(map(str, _list(client["required_training_courses"]))) - _completed_courses(ctx, email)
    )
    missing += [f"training {c}" for c in courses]
    return missing


def client_access_prerequisites(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _client_call(ctx)
    if found is None:
        return []
    email, client_id = found
    missing = _missing_client_prerequisites(ctx, email, client_id)
    return [{"email": email, "client_id": client_id, "missing": missing}] if missing else []


def client_access_approved(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _client_call(ctx)
    if found is None:
        return []
    email, client_id = found
    if any(a["status"] == "approved" for a in _approvals(ctx, email, ("client_access",))):
        return []
    return [{"email": email, "client_id": client_id}]


# -- client access approvals -------------------------------------------------------------------------
def client_access_approval_after_prerequisites(ctx: CheckContext) -> list[dict[str, Any]]:
    """A client_access approval is created only once the client's prerequisites are complete.

    The client is the one of the named engagement, else of the requester's engagements managed by
    the approver (or any of them, for the Security Director); the rule fires only when every such
    client still has a prerequisite missing.
    """
    args = _arguments(ctx)
    if args.get("request_type") != "client_access":
        return []
    requester = _low(args.get("requester_email"))
    approver = _low(args.get("approver_email"))
    code = args.get("engagement_code")
    assigned = {
        a["engagement_code"] for a in _all(ctx, ASSIGNMENTS) if _low(a["employee_email"]) == requester
    }
    engagements = _all(ctx, SF_ENGAGEMENTS)
    if code not in (None, ""):
        clients = {e["client_id"] for e in engagements if e["engagement_code"] == code}
    else:
        clients = {
            e["client_id"]
            for e in engagements
            if e["engagement_code"] in assigned
            and (approver == SECURITY_DIRECTOR or _low(e["engagement_manager_email"]) == approver)
        }
    if not clients:
        return []
    missing = {c: _missing_client_prerequisites(ctx, requester, c) for c in sorted(clients)}
    if all(missing.values()):
        return [{"requester_email": requester, "client_id": c, "missing": m} for c, m in missing.items()]
    return []
