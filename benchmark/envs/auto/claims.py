"""Claims tools (FNOL, claim lookups)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def claims_check_open_major_claims(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("claims_check_open_major_claims: not implemented yet")


def claims_create_fnol(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("claims_create_fnol: not implemented yet")


def claims_get_driver_claims(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("claims_get_driver_claims: not implemented yet")


def claims_get_policy_claims(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("claims_get_policy_claims: not implemented yet")


def claims_get_vehicle_claims(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("claims_get_vehicle_claims: not implemented yet")


TOOLS = {
    "claims_check_open_major_claims": claims_check_open_major_claims,
    "claims_create_fnol": claims_create_fnol,
    "claims_get_driver_claims": claims_get_driver_claims,
    "claims_get_policy_claims": claims_get_policy_claims,
    "claims_get_vehicle_claims": claims_get_vehicle_claims,
}

READ_ONLY: frozenset[str] = frozenset()
