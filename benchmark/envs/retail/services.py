"""Warranty (extend), installation (jobber) and returns (loop_returns) tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def check_warranty_coverage(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("check_warranty_coverage: not implemented yet")


def file_warranty_claim(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("file_warranty_claim: not implemented yet")


def cancel_installation(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("cancel_installation: not implemented yet")


def get_installation_job(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("get_installation_job: not implemented yet")


def reschedule_installation(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("reschedule_installation: not implemented yet")


def create_rma(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("create_rma: not implemented yet")


def get_rma_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("get_rma_status: not implemented yet")


TOOLS = {
    "check_warranty_coverage": check_warranty_coverage,
    "file_warranty_claim": file_warranty_claim,
    "cancel_installation": cancel_installation,
    "get_installation_job": get_installation_job,
    "reschedule_installation": reschedule_installation,
    "create_rma": create_rma,
    "get_rma_status": get_rma_status,
}

READ_ONLY: frozenset[str] = frozenset()
