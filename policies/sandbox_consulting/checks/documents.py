"""Documents: confidential folders need an approval and the client's prerequisites."""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import _approvals, _arguments, _assigned_to_client, _low, _nda_signed


# -- documents -----------------------------------------------------------------------------------------
def _folder_call(ctx: CheckContext) -> tuple[str, dict[str, Any]] | None:
    args = _arguments(ctx)
    if args.get("action") != "grant_folder_access":
        return None
    rows = ctx.query("SELECT * FROM box_folders WHERE id = :id", {"id": str(args.get("folder_id"))})
    if not rows:
        return None
    return _low(args.get("email")), rows[0]


def confidential_folder_approved(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _folder_call(ctx)
    if found is None:
        return []
    email, folder = found
    if folder["confidentiality_level"] != "confidential":
        return []
    if any(a["status"] == "approved" for a in _approvals(ctx, email, ("document_access",))):
        return []
    return [{"folder_id": folder["id"], "email": email, "confidentiality_level": "confidential"}]


def client_confidential_prerequisites(ctx: CheckContext) -> list[dict[str, Any]]:
    found = _folder_call(ctx)
    if found is None:
        return []
    email, folder = found
    if folder["confidentiality_level"] != "client_confidential":
        return []
    client_id = folder["client_id"]
    missing = []
    if not client_id or not _assigned_to_client(ctx, email, client_id):
        missing.append("engagement assignment")
    # Clearance is not judged here: §10.4 makes it conditional ("If the client requires security
    # clearance") and no record says which clients do (see README, tried and dropped).
    if not client_id or not _nda_signed(ctx, email, client_id):
        missing.append("nda")
    if not missing:
        return []
    return [{"folder_id": folder["id"], "email": email, "client_id": client_id, "missing": missing}]
