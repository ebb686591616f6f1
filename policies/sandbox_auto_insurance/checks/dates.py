"""Dates (at_commit): driver and vehicle changes, extensions, cancellation notice, reinstatement,
document links and losses, relative to the session's "today"; and the SIU theft triggers.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from guard.checks import CheckContext
from guard.models import RowChange

from .lookups import (
    _POLICY,
    _POLICY_TIER,
    ACCOUNTS,
    CLAIMS,
    DOCUMENTS,
    DRIVERS,
    EXTENSION_DAYS,
    LINK_LIFETIME,
    LINK_TOLERANCE,
    NO_BACKDATING_STATES,
    POLICIES,
    REINSTATEMENT_WINDOW_DAYS,
    SIU_RECENTLY_ADDED_DAYS,
    SIU_VEHICLE_AGE_YEARS,
    THEFT,
    VEHICLES,
    _became,
    _changed,
    _date,
    _moment,
    _one,
    _rows,
    _session_now,
    _truthy,
)


# -- dates (at_commit) ----------------------------------------------------------------------------
def driver_changes_today(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change in _rows(ctx, DRIVERS):
        after = change.after or {}
        if change.op == "insert":
            field = "effective_date"
        elif _became(change, "status", "Removed"):
            field = "removal_date"
        else:
            continue
        if _date(after.get(field)) != today:
            out.append({"driver_id": change.key, field: after.get(field), "today": today.isoformat()})
    return out


def vehicle_add_backdating(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change in _rows(ctx, VEHICLES):
        if change.op != "insert":
            continue
        after = change.after or {}
        policy = _one(ctx, _POLICY, {"id": after.get("policy_id")})
        if policy is None:
            continue
        if policy["state"] in NO_BACKDATING_STATES:
            earliest = today
        else:
            earliest = today - dt.timedelta(days=int(policy["automatic_extension_days"] or 0))
        effective = _date(after.get("effective_date"))
        if effective is None or effective < earliest:
            out.append(
                {
                    "vehicle_id": change.key,
                    "state": policy["state"],
                    "effective_date": after.get("effective_date"),
                    "earliest": earliest.isoformat(),
                }
            )
    return out


def vehicle_removal_today(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    return [
        {"vehicle_id": c.key, "removal_date": c.after.get("removal_date"), "today": today.isoformat()}
        for c in _rows(ctx, VEHICLES)
        if c.after is not None
        and _became(c, "status", "Removed")
        and _date(c.after.get("removal_date")) != today
    ]


def extension_due_date(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    due = now.date() + dt.timedelta(days=EXTENSION_DAYS)
    out = []
    for change in _rows(ctx, ACCOUNTS):
        after = change.after or {}
        if after.get("arrangement_type") != "Extension" or not (
            _changed(change, "new_due_date") or _changed(change, "arrangements_12_months")
        ):
            continue
        if _date(after.get("new_due_date")) != due:
            out.append(
                {
                    "billing_account_id": change.key,
                    "new_due_date": after.get("new_due_date"),
                    "expected": due.isoformat(),
                }
            )
    return out


def cancellation_notice(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change in _rows(ctx, POLICIES):
        after = change.after or {}
        if after.get("status") != "Pending Cancellation" or not (
            _changed(change, "status") or _changed(change, "cancellation_date")
        ):
            continue
        earliest = today + dt.timedelta(days=1) if after.get("state") in NO_BACKDATING_STATES else today
        date = _date(after.get("cancellation_date"))
        if date is None or date < earliest:
            out.append(
                {
                    "policy_id": change.key,
                    "state": after.get("state"),
                    "cancellation_date": after.get("cancellation_date"),
                    "earliest": earliest.isoformat(),
                }
            )
    return out


def _reinstatements(ctx: CheckContext) -> Iterator[tuple[RowChange, dt.date]]:
    """Policies this session took from cancelled/lapsed to Active, with their cancellation date."""
    for change in _rows(ctx, POLICIES):
        before = change.before or {}
        after = change.after or {}
        if change.op != "update" or after.get("status") != "Active":
            continue
        if before.get("status") not in ("Cancelled for Non-Payment", "Lapsed"):
            continue
        cancelled = _date(before.get("cancellation_date"))
        if cancelled is not None:
            yield change, cancelled


def reinstatement_window(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    out = []
    for change, cancelled in _reinstatements(ctx):
        tier = _one(ctx, _POLICY_TIER, {"id": change.key})
        window = REINSTATEMENT_WINDOW_DAYS.get(tier["tier"]) if tier else None
        days = (now.date() - cancelled).days
        if window is not None and days > window:
            out.append(
                {"policy_id": change.key, "tier": tier and tier["tier"], "days": days, "window": window}
            )
    return out


def reinstatement_lapse(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change, cancelled in _reinstatements(ctx):
        after = change.after or {}
        lapse = _truthy(after.get("lapse_flag"))
        row = {
            "policy_id": change.key,
            "cancellation_date": cancelled.isoformat(),
            "lapse_flag": after.get("lapse_flag"),
            "lapse_end": after.get("lapse_end"),
            "today": today.isoformat(),
        }
        after_cancellation = today > cancelled and (not lapse or _date(after.get("lapse_end")) != today)
        before_cancellation = today < cancelled and lapse
        if after_cancellation or before_cancellation:
            out.append(row)
    return out


def document_link_expiry(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    expected = now + LINK_LIFETIME
    out = []
    for change in _rows(ctx, DOCUMENTS):
        if change.op != "insert":
            continue
        expires = _moment((change.after or {}).get("expires_at"))
        if expires is None or abs(expires - expected) > LINK_TOLERANCE:
            out.append(
                {
                    "document_id": change.key,
                    "expires_at": (change.after or {}).get("expires_at"),
                    "expected": expected.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            )
    return out


def loss_not_in_future(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change in _rows(ctx, CLAIMS):
        loss = (change.after or {}).get("date_of_loss")
        date = _date(loss)
        if change.op == "insert" and (date is None or date > today):
            out.append({"claim_id": change.key, "date_of_loss": loss, "today": today.isoformat()})
    return out


_CLAIM_VEHICLE = (
    "SELECT id, year, date_added_to_policy FROM policy_vehicles"
    " WHERE policy_id = :policy_id AND (id = :vehicle_id OR vin = :vin)"
)


def siu_theft_triggers(ctx: CheckContext) -> list[dict[str, Any]]:
    now = _session_now(ctx)
    if now is None:
        return []
    today = now.date()
    out = []
    for change in _rows(ctx, CLAIMS):
        after = change.after or {}
        if change.op != "insert" or after.get("claim_type") != THEFT:
            continue
        if (after.get("siu_flag") or "None") != "None":
            continue
        vehicles = ctx.query(
            _CLAIM_VEHICLE,
            {
                "policy_id": after.get("policy_id"),
                "vehicle_id": after.get("vehicle_id") or "",
                "vin": after.get("vehicle_vin") or "",
            },
        )
        for vehicle in vehicles:
            added = _date(vehicle.get("date_added_to_policy"))
            old = today.year - int(vehicle["year"]) >= SIU_VEHICLE_AGE_YEARS
            recent = added is not None and (today - added).days <= SIU_RECENTLY_ADDED_DAYS
            if old or recent:
                out.append(
                    {
                        "claim_id": change.key,
                        "vehicle_id": vehicle["id"],
                        "year": vehicle["year"],
                        "date_added_to_policy": vehicle.get("date_added_to_policy"),
                    }
                )
    return out
