"""The customer profile: complaint_count rises by one, and a post-stay compensation is counted."""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import PROFILES, TRANSACTIONS, _inserted, _norm_reason, _updates


# -- customer profile -------------------------------------------------------------------------------
def complaint_count_increment(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for change in _updates(ctx, PROFILES):
        assert change.before is not None and change.after is not None
        before, after = change.before.get("complaint_count"), change.after.get("complaint_count")
        if before == after:
            continue
        if int(after or 0) != int(before or 0) + 1:
            out.append({"customer_id": change.after.get("customer_id"), "complaint_count": [before, after]})
    return out


def complaint_counted(ctx: CheckContext) -> list[dict[str, Any]]:
    """A post-stay compensation refund whose customer's complaint_count was not incremented."""
    raised = {
        str((c.after or {}).get("customer_id"))
        for c in _updates(ctx, PROFILES)
        if int((c.after or {}).get("complaint_count") or 0)
        > int((c.before or {}).get("complaint_count") or 0)
    }
    out = []
    for txn in _inserted(ctx, TRANSACTIONS):
        if txn.get("transaction_type") != "refund":
            continue
        if _norm_reason(txn.get("reason")) != "post_stay_compensation":
            continue
        if str(txn.get("customer_id")) not in raised:
            out.append(
                {
                    "transaction_id": txn.get("transaction_id"),
                    "booking_reference": txn.get("booking_reference"),
                    "customer_id": txn.get("customer_id"),
                }
            )
    return out
