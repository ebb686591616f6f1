"""Payment API tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def payment_api_check_payment_status(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("payment_api_check_payment_status: not implemented yet")


def payment_api_generate_invoice(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("payment_api_generate_invoice: not implemented yet")


def payment_api_get_transaction_history(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("payment_api_get_transaction_history: not implemented yet")


def payment_api_process_charge(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("payment_api_process_charge: not implemented yet")


def payment_api_process_charge_dispute(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("payment_api_process_charge_dispute: not implemented yet")


def payment_api_process_refund(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("payment_api_process_refund: not implemented yet")


def payment_api_update_payment_method(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("payment_api_update_payment_method: not implemented yet")


TOOLS = {
    "payment_api_check_payment_status": payment_api_check_payment_status,
    "payment_api_generate_invoice": payment_api_generate_invoice,
    "payment_api_get_transaction_history": payment_api_get_transaction_history,
    "payment_api_process_charge": payment_api_process_charge,
    "payment_api_process_charge_dispute": payment_api_process_charge_dispute,
    "payment_api_process_refund": payment_api_process_refund,
    "payment_api_update_payment_method": payment_api_update_payment_method,
}

READ_ONLY: frozenset[str] = frozenset()
