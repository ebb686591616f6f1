"""Order management (oms), inventory (netsuite) and product catalogue (shopify_pim) tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError


def cancel_order(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("cancel_order: not implemented yet")


def create_replacement_order(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("create_replacement_order: not implemented yet")


def get_order(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("get_order: not implemented yet")


def get_shipment_tracking(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("get_shipment_tracking: not implemented yet")


def reship_order(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("reship_order: not implemented yet")


def update_order_address(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("update_order_address: not implemented yet")


def update_shipping_speed(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("update_shipping_speed: not implemented yet")


def check_inventory(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("check_inventory: not implemented yet")


def get_product_details(env: Environment, args: BaseModel) -> dict[str, Any]:
    raise ToolError("get_product_details: not implemented yet")


TOOLS = {
    "cancel_order": cancel_order,
    "create_replacement_order": create_replacement_order,
    "get_order": get_order,
    "get_shipment_tracking": get_shipment_tracking,
    "reship_order": reship_order,
    "update_order_address": update_order_address,
    "update_shipping_speed": update_shipping_speed,
    "check_inventory": check_inventory,
    "get_product_details": get_product_details,
}

READ_ONLY: frozenset[str] = frozenset()
