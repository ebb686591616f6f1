"""Vehicles (before_call): VIN format, excluded vehicles, high-risk vehicles flagged."""

from __future__ import annotations

from typing import Any

from guard.checks import CheckContext

from .lookups import (
    _POLICY_TIER,
    EXCLUDED_VEHICLES,
    HIGH_RISK_VEHICLES,
    VIN,
    _arguments,
    _one,
    _truthy,
    _vehicle_name,
)


# -- vehicles (before_call) -----------------------------------------------------------------------
def vin_is_valid(ctx: CheckContext) -> list[dict[str, Any]]:
    vin = str(_arguments(ctx).get("vin") or "").strip()
    return [] if VIN.match(vin) else [{"vin": vin, "expected": "17 letters and digits"}]


def vehicle_not_excluded(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _arguments(ctx)
    name = _vehicle_name(args.get("make"), args.get("model"))
    if any(p.search(name) for p in EXCLUDED_VEHICLES):
        return [{"make": args.get("make"), "model": args.get("model")}]
    return []


def high_risk_vehicle_flagged(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _arguments(ctx)
    if _truthy(args.get("uw_pending")):
        return []
    name = _vehicle_name(args.get("make"), args.get("model"))
    if not any(p.search(name) for p in HIGH_RISK_VEHICLES):
        return []
    tier = _one(ctx, _POLICY_TIER, {"id": args.get("policy_id")})
    if tier is None or tier["tier"] != "Standard":
        return []
    return [{"policy_id": args.get("policy_id"), "make": args.get("make"), "model": args.get("model")}]
