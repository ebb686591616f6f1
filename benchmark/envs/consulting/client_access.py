"""Multi-action client-access tools: VPN/client systems, background checks, NDAs, Box folders."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def client_access_api(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("client_access_api: not implemented yet")


def background_check_api(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("background_check_api: not implemented yet")


def nda_api(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("nda_api: not implemented yet")


def box_api(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("box_api: not implemented yet")


TOOLS = {
    "client_access_api": client_access_api,
    "background_check_api": background_check_api,
    "nda_api": nda_api,
    "box_api": box_api,
}

READ_ONLY: frozenset[str] = frozenset()
