"""Claims tools (FNOL, claim lookups).

Claim dates are free-form strings compared as text, so a created_date with a time part sorts after the
bare date and breaks the ``months_back`` filter exactly as in the reference (vectors README §8).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from benchmark.envs.auto.inputs import (
    ClaimsCheckOpenMajorClaimsInput,
    ClaimsCreateFnolInput,
    ClaimsGetDriverClaimsInput,
    ClaimsGetPolicyClaimsInput,
    ClaimsGetVehicleClaimsInput,
)
from benchmark.envs.auto.rows import Claim, Driver, Policy, Vehicle
from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import TableRef
from benchmark.envs.tools import ToolFn

CLAIMS: TableRef[Claim] = TableRef("claims_claims")
POLICIES: TableRef[Policy] = TableRef("policy_policies")
VEHICLES: TableRef[Vehicle] = TableRef("policy_vehicles")
DRIVERS: TableRef[Driver] = TableRef("policy_drivers")

NEW_CLAIM_PREFIX = "CLM-2"
OPEN_PREFIX = "Open"
# months_back counts 30-day months back from the newest created_date over all claims of all policies.
DAYS_PER_MONTH = 30
NO_CLAIMS_REFERENCE = dt.datetime(2099, 12, 31)


def _require_policy(env: Environment, policy_id: str) -> None:
    if not env.table(POLICIES).exists(policy_id):
        raise ToolError(f"Policy '{policy_id}' not found.")


def _is_open(claim: Claim) -> bool:
    return claim.claim_stage.value.startswith(OPEN_PREFIX)


def _claim_item(claim: Claim) -> dict[str, Any]:
    return {
        "claim_id": claim.id,
        "date_of_loss": claim.date_of_loss,
        "claim_type": claim.claim_type.value,
        "claim_stage": claim.claim_stage.value,
        "severity": claim.severity.value,
        "created_date": claim.created_date,
    }


def claim_id_for(policy_id: str, date_of_loss: str, vehicle: str | None) -> str:
    """Deterministic FNOL id: the same policy, date and vehicle always name the same claim."""
    seed = f"{policy_id}_{date_of_loss}_{vehicle or 'no_vehicle'}"
    return NEW_CLAIM_PREFIX + hashlib.sha256(seed.encode()).hexdigest()[:9].upper()


def claims_create_fnol(env: Environment, args: ClaimsCreateFnolInput) -> dict[str, Any]:
    """Idempotent on the generated id; vehicle and driver ids are stored unchecked."""
    _require_policy(env, args.policy_id)
    table = env.table(CLAIMS)
    claim_id = claim_id_for(args.policy_id, args.date_of_loss, args.vehicle_id or args.vehicle_vin)
    existing = table.get(claim_id)
    if existing is not None:
        return {"claim_id": existing.id, "claim_stage": existing.claim_stage.value}
    claim = table.record(
        {
            "id": claim_id,
            "policy_id": args.policy_id,
            "vehicle_id": args.vehicle_id,
            "vehicle_vin": args.vehicle_vin,
            "driver_id": args.driver_id,
            "date_of_loss": args.date_of_loss,
            "loss_location": args.loss_location,
            "claim_type": args.claim_type.value,
            "claim_stage": "Open \u2013 Initial Review",
            "severity": args.severity.value,
            "siu_flag": args.siu_flag.value if args.siu_flag else "None",
            "unlisted_driver_flag": args.unlisted_driver_flag or False,
            "has_bodily_injury": args.has_bodily_injury or False,
            "police_report_required": args.police_report_required or False,
            "police_report_number": args.police_report_number,
            "other_party_name": args.other_party_name,
            "other_party_phone": args.other_party_phone,
            "other_party_insurance": args.other_party_insurance,
            "created_date": args.date_of_loss,
        }
    )
    table.create(claim)
    return {"claim_id": claim.id, "claim_stage": claim.claim_stage.value}


def claims_check_open_major_claims(env: Environment, args: ClaimsCheckOpenMajorClaimsInput) -> dict[str, Any]:
    _require_policy(env, args.policy_id)
    count = sum(
        1
        for claim in env.table(CLAIMS).where(policy_id=args.policy_id)
        if _is_open(claim) and claim.severity.value == "Major"
    )
    return {"has_major_claim": count > 0, "major_claim_count": count}


def _months_back_cutoff(env: Environment, months_back: int) -> str:
    """The cutoff date text; parsing the newest created_date as a bare date fails on a time part."""
    dates = [claim.created_date for claim in env.table(CLAIMS).all()]
    try:
        reference = dt.datetime.strptime(max(dates), "%Y-%m-%d") if dates else NO_CLAIMS_REFERENCE
        cutoff = reference - dt.timedelta(days=DAYS_PER_MONTH * months_back)
    except (ValueError, OverflowError) as exc:
        raise ToolError(str(exc)) from exc
    return cutoff.strftime("%Y-%m-%d")


def claims_get_policy_claims(env: Environment, args: ClaimsGetPolicyClaimsInput) -> dict[str, Any]:
    """All claims of the policy; a non-zero ``months_back`` keeps those created on or after the cutoff."""
    _require_policy(env, args.policy_id)
    claims = env.table(CLAIMS).where(policy_id=args.policy_id)
    if args.months_back:
        cutoff = _months_back_cutoff(env, args.months_back)
        claims = [claim for claim in claims if claim.created_date >= cutoff]
    items = [_claim_item(claim) for claim in claims]
    return {"claims": items, "total_count": len(items)}


def claims_get_driver_claims(env: Environment, args: ClaimsGetDriverClaimsInput) -> dict[str, Any]:
    if not env.table(DRIVERS).exists(args.driver_id):
        raise ToolError(f"Driver '{args.driver_id}' not found.")
    claims = env.table(CLAIMS).where(driver_id=args.driver_id)
    if args.open_only:
        claims = [claim for claim in claims if _is_open(claim)]
    return {"claims": [_claim_item(c) for c in claims], "has_open_claims": any(_is_open(c) for c in claims)}


def claims_get_vehicle_claims(env: Environment, args: ClaimsGetVehicleClaimsInput) -> dict[str, Any]:
    if not env.table(VEHICLES).exists(args.vehicle_id):
        raise ToolError(f"Vehicle '{args.vehicle_id}' not found.")
    claims = env.table(CLAIMS).where(vehicle_id=args.vehicle_id)
    if args.open_only:
        claims = [claim for claim in claims if _is_open(claim)]
    return {"claims": [_claim_item(c) for c in claims], "has_open_claims": any(_is_open(c) for c in claims)}


TOOLS: dict[str, ToolFn] = {
    "claims_check_open_major_claims": claims_check_open_major_claims,
    "claims_create_fnol": claims_create_fnol,
    "claims_get_driver_claims": claims_get_driver_claims,
    "claims_get_policy_claims": claims_get_policy_claims,
    "claims_get_vehicle_claims": claims_get_vehicle_claims,
}

READ_ONLY: frozenset[str] = frozenset(
    {
        "claims_check_open_major_claims",
        "claims_get_driver_claims",
        "claims_get_policy_claims",
        "claims_get_vehicle_claims",
    }
)
