"""Multi-action service tools: expenses (concur), assets, licences, training (degreed)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def concur_api(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("concur_api: not implemented yet")


def asset_management_api(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("asset_management_api: not implemented yet")


def license_management_api(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("license_management_api: not implemented yet")


def degreed_api(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("degreed_api: not implemented yet")


TOOLS = {
    "concur_api": concur_api,
    "asset_management_api": asset_management_api,
    "license_management_api": license_management_api,
    "degreed_api": degreed_api,
}

READ_ONLY: frozenset[str] = frozenset()
