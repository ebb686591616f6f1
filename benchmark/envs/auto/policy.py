"""Policy administration tools (drivers, vehicles, documents, cancellation, reinstatement) and VIN lookup.

The reference writes caller-supplied dates verbatim and checks little beyond the existence of the
policy, driver or vehicle. New rows get ids from a sha256 of their natural key, so repeating a call
with the same inputs finds the row it created before.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
from typing import Any, overload

from benchmark.envs.auto.inputs import (
    LookupValidateVinInput,
    PolicyAddDriverInput,
    PolicyAddVehicleInput,
    PolicyGenerateDocumentLinkInput,
    PolicyGetPolicyDetailsInput,
    PolicyGetPolicyDriversInput,
    PolicyGetPolicyVehiclesInput,
    PolicyGetVehicleDetailsInput,
    PolicyReinstatePolicyInput,
    PolicyScheduleCancellationInput,
    PolicyUpdateDriverStatusInput,
    PolicyUpdateVehicleStatusInput,
)
from benchmark.envs.auto.rows import Driver, Policy, PolicyDocument, Vehicle
from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import R, TableRef
from benchmark.envs.tools import ToolFn

POLICIES: TableRef[Policy] = TableRef("policy_policies")
DRIVERS: TableRef[Driver] = TableRef("policy_drivers")
VEHICLES: TableRef[Vehicle] = TableRef("policy_vehicles")
DOCUMENTS: TableRef[PolicyDocument] = TableRef("policy_policy_documents")

DOCUMENT_URL = "https://portal.horizonshield.com/docs/secure/"
ACTIVE_DRIVER_STATUSES = ("Rated", "Excluded")

# The reference's mock VIN decoder: model year from the 10th character, make from the WMI prefix.
VIN_YEARS = {
    "A": 2010,
    "B": 2011,
    "C": 2012,
    "D": 2013,
    "E": 2014,
    "F": 2015,
    "G": 2016,
    "H": 2017,
    "J": 2018,
    "K": 2019,
    "L": 2020,
    "M": 2021,
    "N": 2022,
    "P": 2023,
    "R": 2024,
}
VIN_MAKES = {
    "1HG": "Honda",
    "2HG": "Honda Canada",
    "1FA": "Ford",
    "1FT": "Ford Truck",
    "5YJ": "Tesla",
}
VIN_MODELS = {
    "Honda": "Accord",
    "Ford": "Focus",
    "Ford Truck": "F-150",
    "Tesla": "Model S",
}


def _hashed_id(prefix: str, seed: str) -> str:
    return prefix + hashlib.sha256(seed.encode()).hexdigest()[:8].upper()


def _enum_text(member: enum.Enum) -> str:
    """How the reference's f-string renders a str-mixin enum member (``DocumentType.ID_CARD``)."""
    return f"{type(member).__name__}.{member.name}"


@overload
def _value(value: str) -> str: ...
@overload
def _value(value: None) -> None: ...
@overload
def _value(value: str | None) -> str | None: ...
def _value(value: str | None) -> str | None:
    return value.value if isinstance(value, enum.Enum) else value


def _policy(env: Environment, policy_id: str) -> Policy:
    policy = env.table(POLICIES).get(policy_id)
    if policy is None:
        raise ToolError(f"Policy with ID '{policy_id}' not found")
    return policy


def _update(env: Environment, table_name: TableRef[R], record: R, changes: dict[str, Any]) -> R:
    table = env.table(table_name)
    updated = table.record({**record.model_dump(), **changes})
    table.save(updated)
    return updated


def policy_get_policy_details(env: Environment, args: PolicyGetPolicyDetailsInput) -> dict[str, Any]:
    """The policy row under output names; lapse_start/lapse_end are not part of the output."""
    policy = _policy(env, args.policy_id)
    return {
        "policy_id": policy.id,
        "customer_id": policy.customer_id,
        "status": _value(policy.status),
        "state": _value(policy.state),
        "effective_date": policy.effective_date,
        "expiration_date": policy.expiration_date,
        "renewal_date": policy.renewal_date,
        "cancellation_date": policy.cancellation_date,
        "cancellation_reason": _value(policy.cancellation_reason),
        "named_insured_id": policy.named_insured_id,
        "co_insured_id": policy.co_insured_id,
        "automatic_extension_days": policy.automatic_extension_days,
        "at_fault_claims_3_years": policy.at_fault_claims_3_years,
        "lapse_flag": policy.lapse_flag,
    }


def policy_get_policy_drivers(env: Environment, args: PolicyGetPolicyDriversInput) -> dict[str, Any]:
    """Drivers of an existing policy in store order; ``active_only`` drops Removed drivers."""
    _policy(env, args.policy_id)
    drivers = env.table(DRIVERS).where(policy_id=args.policy_id)
    if args.active_only:
        drivers = [d for d in drivers if _value(d.status) in ACTIVE_DRIVER_STATUSES]
    listed = [
        {
            "id": d.id,
            "name": d.name,
            "date_of_birth": d.date_of_birth,
            "status": _value(d.status),
            "effective_date": d.effective_date,
            "is_named_insured": d.is_named_insured,
            "is_co_insured": d.is_co_insured,
        }
        for d in drivers
    ]
    return {"drivers": listed, "driver_count": len(listed)}


def policy_get_policy_vehicles(env: Environment, args: PolicyGetPolicyVehiclesInput) -> dict[str, Any]:
    """Vehicles of an existing policy in store order; ``active_only`` keeps Active ones."""
    _policy(env, args.policy_id)
    vehicles = env.table(VEHICLES).where(policy_id=args.policy_id)
    if args.active_only:
        vehicles = [v for v in vehicles if _value(v.status) == "Active"]
    listed = [
        {
            "id": v.id,
            "vin": v.vin,
            "year": v.year,
            "make": v.make,
            "model": v.model,
            "status": _value(v.status),
            "effective_date": v.effective_date,
        }
        for v in vehicles
    ]
    return {"vehicles": listed, "vehicle_count": len(listed)}


def policy_get_vehicle_details(env: Environment, args: PolicyGetVehicleDetailsInput) -> dict[str, Any]:
    vehicle = env.table(VEHICLES).get(args.vehicle_id)
    if vehicle is None:
        raise ToolError(f"Vehicle with ID '{args.vehicle_id}' not found")
    return {
        "vehicle_id": vehicle.id,
        "policy_id": vehicle.policy_id,
        "vin": vehicle.vin,
        "year": vehicle.year,
        "make": vehicle.make,
        "model": vehicle.model,
        "status": _value(vehicle.status),
        "effective_date": vehicle.effective_date,
        "date_added_to_policy": vehicle.date_added_to_policy,
        "collision_coverage": vehicle.collision_coverage,
        "comprehensive_coverage": vehicle.comprehensive_coverage,
        "rental_coverage": vehicle.rental_coverage,
        "uw_pending": vehicle.uw_pending,
    }


def policy_add_driver(env: Environment, args: PolicyAddDriverInput) -> dict[str, Any]:
    """Rejects a second driver with the same name and date of birth on the policy; no eligibility rules."""
    _policy(env, args.policy_id)
    drivers = env.table(DRIVERS)
    for d in drivers.where(policy_id=args.policy_id):
        if d.name == args.name and d.date_of_birth == args.date_of_birth:
            raise ToolError(
                f"Driver with name '{args.name}' and DOB '{args.date_of_birth}' already exists on this policy"
            )
    driver_id = _hashed_id("DRV-2-", f"{args.policy_id}_{args.name}_{args.date_of_birth}")
    existing = drivers.get(driver_id)
    if existing is not None:
        return {"driver_id": existing.id, "status": _value(existing.status)}
    drivers.create(
        drivers.record(
            {
                "id": driver_id,
                "policy_id": args.policy_id,
                "name": args.name,
                "date_of_birth": args.date_of_birth,
                "license_number": args.license_number,
                "license_state": args.license_state,
                "relationship": args.relationship,
                "status": args.status.value,
                "effective_date": args.effective_date,
                "is_named_insured": False,
                "is_co_insured": False,
                "uw_pending": bool(args.uw_pending),
                "exclusion_form_required": bool(args.exclusion_form_required),
            }
        )
    )
    return {"driver_id": driver_id, "status": args.status.value}


def policy_add_vehicle(env: Environment, args: PolicyAddVehicleInput) -> dict[str, Any]:
    """Rejects a VIN already on the policy; new vehicles are Active with collision and comprehensive."""
    _policy(env, args.policy_id)
    vehicles = env.table(VEHICLES)
    for v in vehicles.where(policy_id=args.policy_id):
        if v.vin == args.vin:
            raise ToolError(f"VIN '{args.vin}' already exists on this policy")
    vehicle_id = _hashed_id("VEH-2-", f"{args.policy_id}_{args.vin}")
    existing = vehicles.get(vehicle_id)
    if existing is not None:
        return {"vehicle_id": existing.id}
    vehicles.create(
        vehicles.record(
            {
                "id": vehicle_id,
                "policy_id": args.policy_id,
                "vin": args.vin,
                "year": args.year,
                "make": args.make,
                "model": args.model,
                "status": "Active",
                "effective_date": args.effective_date,
                "date_added_to_policy": args.effective_date,
                "collision_coverage": True,
                "comprehensive_coverage": True,
                "rental_coverage": False,
                "uw_pending": bool(args.uw_pending),
            }
        )
    )
    return {"vehicle_id": vehicle_id}


def policy_generate_document_link(env: Environment, args: PolicyGenerateDocumentLinkInput) -> dict[str, Any]:
    """Idempotent per (policy, document type, ticket); created_at is the expiration date for determinism."""
    _policy(env, args.policy_id)
    try:
        dt.datetime.fromisoformat(args.expiration_date.replace("Z", "+00:00"))
    except ValueError:
        raise ToolError(
            f"Invalid expiration_date format: '{args.expiration_date}'. "
            "Expected ISO 8601 format (e.g., '2024-01-16T10:05:00Z')"
        ) from None
    url = f"{DOCUMENT_URL}{args.policy_id}_{args.document_type.value}_{args.ticket_id}"
    document_id = _hashed_id("DOC-2-", f"{args.policy_id}_{_enum_text(args.document_type)}_{args.ticket_id}")
    documents = env.table(DOCUMENTS)
    existing = documents.get(document_id)
    if existing is not None:
        return {"document_id": existing.id, "url": existing.url, "expires_at": existing.expires_at}
    documents.create(
        documents.record(
            {
                "id": document_id,
                "policy_id": args.policy_id,
                "ticket_id": args.ticket_id,
                "document_type": args.document_type.value,
                "url": url,
                "created_at": args.expiration_date,
                "expires_at": args.expiration_date,
            }
        )
    )
    return {"document_id": document_id, "url": url, "expires_at": args.expiration_date}


def policy_schedule_cancellation(env: Environment, args: PolicyScheduleCancellationInput) -> dict[str, Any]:
    """No notice-period or status check: any policy becomes Pending Cancellation."""
    policy = _policy(env, args.policy_id)
    _update(
        env,
        POLICIES,
        policy,
        {
            "status": "Pending Cancellation",
            "cancellation_date": args.cancellation_date,
            "cancellation_reason": args.cancellation_reason.value,
        },
    )
    return {"policy_id": policy.id, "status": "Pending Cancellation"}


def policy_reinstate_policy(env: Environment, args: PolicyReinstatePolicyInput) -> dict[str, Any]:
    """Active again with cancellation cleared; lapse dates are written only when a lapse is flagged."""
    policy = _policy(env, args.policy_id)
    changes: dict[str, Any] = {
        "status": "Active",
        "cancellation_date": None,
        "cancellation_reason": None,
        "lapse_flag": args.lapse_flag,
    }
    if args.lapse_flag:
        changes.update(lapse_start=args.lapse_start, lapse_end=args.lapse_end)
    _update(env, POLICIES, policy, changes)
    return {"policy_id": policy.id, "status": "Active", "lapse_flag": args.lapse_flag}


def policy_update_driver_status(env: Environment, args: PolicyUpdateDriverStatusInput) -> dict[str, Any]:
    """The effective date is overwritten too; Removed also records it as the removal date."""
    driver = env.table(DRIVERS).get(args.driver_id)
    if driver is None:
        raise ToolError(f"Driver with ID '{args.driver_id}' not found")
    status = args.new_status.value
    changes: dict[str, Any] = {"status": status, "effective_date": args.effective_date}
    if status == "Removed":
        changes["removal_date"] = args.effective_date
    _update(env, DRIVERS, driver, changes)
    return {"driver_id": driver.id, "status": status}


def policy_update_vehicle_status(env: Environment, args: PolicyUpdateVehicleStatusInput) -> dict[str, Any]:
    """Unlike drivers, the vehicle's effective date stays; Removed records the removal date."""
    vehicle = env.table(VEHICLES).get(args.vehicle_id)
    if vehicle is None:
        raise ToolError(f"Vehicle with ID '{args.vehicle_id}' not found")
    status = args.new_status.value
    changes: dict[str, Any] = {"status": status}
    if status == "Removed":
        changes["removal_date"] = args.effective_date
    _update(env, VEHICLES, vehicle, changes)
    return {"vehicle_id": vehicle.id, "status": status}


def lookup_validate_vin(env: Environment, args: LookupValidateVinInput) -> dict[str, Any]:
    """Format check plus the mock decode; unknown year codes or makes are simply omitted."""
    vin = args.vin.strip().upper()
    if len(vin) != 17:
        raise ToolError("Invalid VIN format. VIN must be exactly 17 characters.")
    if not vin.isalnum():
        raise ToolError("Invalid VIN format. VIN must contain only letters and numbers.")
    make = VIN_MAKES.get(vin[:3])
    return {
        "valid": True,
        "year": VIN_YEARS.get(vin[9]),
        "make": make,
        "model": VIN_MODELS.get(make) if make else None,
    }


TOOLS: dict[str, ToolFn] = {
    "policy_add_driver": policy_add_driver,
    "policy_add_vehicle": policy_add_vehicle,
    "policy_generate_document_link": policy_generate_document_link,
    "policy_get_policy_details": policy_get_policy_details,
    "policy_get_policy_drivers": policy_get_policy_drivers,
    "policy_get_policy_vehicles": policy_get_policy_vehicles,
    "policy_get_vehicle_details": policy_get_vehicle_details,
    "policy_reinstate_policy": policy_reinstate_policy,
    "policy_schedule_cancellation": policy_schedule_cancellation,
    "policy_update_driver_status": policy_update_driver_status,
    "policy_update_vehicle_status": policy_update_vehicle_status,
    "lookup_validate_vin": lookup_validate_vin,
}

READ_ONLY: frozenset[str] = frozenset(
    {
        "policy_get_policy_details",
        "policy_get_policy_drivers",
        "policy_get_policy_vehicles",
        "policy_get_vehicle_details",
        "lookup_validate_vin",
    }
)
