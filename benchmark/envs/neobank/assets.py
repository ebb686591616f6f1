"""Hardware assets, procurement and software licence tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def asset_management_api_assign_device(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("asset_management_api_assign_device: not implemented yet")


def asset_management_api_check_inventory(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("asset_management_api_check_inventory: not implemented yet")


def asset_management_api_get_device_details(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("asset_management_api_get_device_details: not implemented yet")


def asset_management_api_get_employee_devices(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("asset_management_api_get_employee_devices: not implemented yet")


def asset_management_api_retire_device(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("asset_management_api_retire_device: not implemented yet")


def hardware_procurement_api_create_order(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("hardware_procurement_api_create_order: not implemented yet")


def license_management_api_allocate_license(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("license_management_api_allocate_license: not implemented yet")


def license_management_api_check_availability(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("license_management_api_check_availability: not implemented yet")


def license_management_api_check_license_type(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("license_management_api_check_license_type: not implemented yet")


TOOLS = {
    "asset_management_api_assign_device": asset_management_api_assign_device,
    "asset_management_api_check_inventory": asset_management_api_check_inventory,
    "asset_management_api_get_device_details": asset_management_api_get_device_details,
    "asset_management_api_get_employee_devices": asset_management_api_get_employee_devices,
    "asset_management_api_retire_device": asset_management_api_retire_device,
    "hardware_procurement_api_create_order": hardware_procurement_api_create_order,
    "license_management_api_allocate_license": license_management_api_allocate_license,
    "license_management_api_check_availability": license_management_api_check_availability,
    "license_management_api_check_license_type": license_management_api_check_license_type,
}

READ_ONLY: frozenset[str] = frozenset()
