"""Policy administration tools (drivers, vehicles, documents, cancellation, reinstatement)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def policy_add_driver(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_add_driver: not implemented yet")


def policy_add_vehicle(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_add_vehicle: not implemented yet")


def policy_generate_document_link(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_generate_document_link: not implemented yet")


def policy_get_policy_details(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_get_policy_details: not implemented yet")


def policy_get_policy_drivers(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_get_policy_drivers: not implemented yet")


def policy_get_policy_vehicles(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_get_policy_vehicles: not implemented yet")


def policy_get_vehicle_details(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_get_vehicle_details: not implemented yet")


def policy_reinstate_policy(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_reinstate_policy: not implemented yet")


def policy_schedule_cancellation(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_schedule_cancellation: not implemented yet")


def policy_update_driver_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_update_driver_status: not implemented yet")


def policy_update_vehicle_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("policy_update_vehicle_status: not implemented yet")


def lookup_validate_vin(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("lookup_validate_vin: not implemented yet")


TOOLS = {
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

READ_ONLY: frozenset[str] = frozenset()
