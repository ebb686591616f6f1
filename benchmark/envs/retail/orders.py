"""Order management (oms), inventory (netsuite) and product catalogue (shopify_pim) tools.

The reference tools enforce no business policy beyond stock for replacements; they look rows up by
linear scan (first match in store order) and mutate them in place, so a write made before a later
failure stays applied (see ``create_replacement_order``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, overload

from benchmark.envs.environment import Environment, Table
from benchmark.envs.errors import ToolError
from benchmark.envs.records import R, TableRef
from benchmark.envs.retail.inputs import (
    CancelOrderInput,
    CheckInventoryInput,
    CreateReplacementOrderInput,
    GetOrderInput,
    GetProductDetailsInput,
    GetShipmentTrackingInput,
    ReshipOrderInput,
    UpdateOrderAddressInput,
    UpdateShippingSpeedInput,
)
from benchmark.envs.retail.rows import (
    CarrierTracking,
    InventoryRecord,
    Order,
    OrderLineItem,
    ProductDetails,
    Shipment,
)
from benchmark.envs.tools import ToolFn

ORDERS: TableRef[Order] = TableRef("external_retail_toolset_oms_models_orders")
LINE_ITEMS: TableRef[OrderLineItem] = TableRef("external_retail_toolset_oms_models_order_line_items")
SHIPMENTS: TableRef[Shipment] = TableRef("external_retail_toolset_oms_models_shipments")
TRACKING: TableRef[CarrierTracking] = TableRef("external_retail_toolset_oms_models_carrier_tracking")
INVENTORY: TableRef[InventoryRecord] = TableRef("external_retail_toolset_netsuite_models_inventory_records")
PRODUCTS: TableRef[ProductDetails] = TableRef("external_retail_toolset_shopify_pim_models_products")

NOW = dt.datetime(2025, 10, 1, 13, 0, 5, tzinfo=dt.UTC)
"""The retail write tools' frozen clock (docs/benchmark.md#frozen-clocks)."""

SHIPPING_COSTS = {"standard": 0.00, "expedited": 15.00, "next_day": 29.99}
RESHIP_FEE = 15.00
RESHIP_TRANSIT = dt.timedelta(days=5)


@overload
def _value(member: str) -> str: ...
@overload
def _value(member: None) -> None: ...
@overload
def _value(member: str | None) -> str | None: ...
def _value(member: str | None) -> str | None:
    """An enum member's value (records and inputs hold str-Enum members)."""
    return getattr(member, "value", member)


def _iso(moment: dt.datetime | None) -> str | None:
    """Outputs render datetimes with ``isoformat`` (``+00:00``), unlike the stored ``Z``."""
    return None if moment is None else moment.isoformat()


def _order(env: Environment, order_id: str) -> Order:
    order = env.table(ORDERS).get(order_id)
    if order is None:
        raise ToolError(f"Order not found: {order_id}")
    return order


def _save_changed(table: Table[R], record: R, **changes: Any) -> None:
    """Save ``record`` with ``changes`` applied, re-validated so enum and float fields keep their types."""
    table.save(table.record({**record.model_dump(), **changes}))


def _first_free_id(table: Table[R], field: str, template: str) -> str:
    """The reference's ids: ``template`` with the smallest counter from 1 not already taken."""
    taken = {getattr(row, field) for row in table.all()}
    counter = 1
    while template.format(counter) in taken:
        counter += 1
    return template.format(counter)


def cancel_order(env: Environment, args: CancelOrderInput) -> dict[str, Any]:
    """Cancel whatever the current status; a refund starts only if payment was already taken."""
    order = _order(env, args.order_id)
    refund_initiated = _value(order.status) == "processing"
    _save_changed(env.table(ORDERS), order, status="cancelled")
    return {"order_id": order.id, "status": "cancelled", "refund_initiated": refund_initiated}


def create_replacement_order(env: Environment, args: CreateReplacementOrderInput) -> dict[str, Any]:
    """Free replacement order; stock is decremented before the product lookup, as in the reference."""
    inventory = env.table(INVENTORY)
    stock = inventory.get(args.sku)
    if stock is None or stock.available_quantity == 0:
        raise ToolError(
            f"Product out of stock - cannot create replacement order for SKU {args.sku}. "
            "Available quantity is 0."
        )
    _save_changed(inventory, stock, available_quantity=stock.available_quantity - args.quantity)
    product = env.table(PRODUCTS).get(args.sku)
    if product is None:
        raise ToolError(f"Product SKU not found: {args.sku}")
    orders, lines = env.table(ORDERS), env.table(LINE_ITEMS)
    order_id = _first_free_id(orders, "id", "ORD-2{:07d}")
    line_id = _first_free_id(lines, "id", "LIN-2{:07d}")
    orders.create(
        orders.record(
            {
                "id": order_id,
                "customer_id": args.customer_id,
                "order_date": NOW,
                "status": "processing",
                "subtotal_amount": 0.0,
                "discount_amount": 0.0,
                "points_used": 0,
                "points_value": 0.0,
                "shipping_cost": 0.0,
                "total_amount": 0.0,
                "shipping_address_line1": args.shipping_address_line1,
                "shipping_address_city": args.shipping_address_city,
                "shipping_address_state": args.shipping_address_state,
                "shipping_address_zip": args.shipping_address_zip,
                "shipping_speed": _value(args.shipping_speed),
                "fulfillment_type": "warehouse",
                "installation_service_id": None,
            }
        )
    )
    lines.create(
        lines.record(
            {
                "id": line_id,
                "order_id": order_id,
                "sku": args.sku,
                "product_name": product.name,
                "quantity": args.quantity,
                "base_price": 0.0,
                "discount_amount": 0.0,
                "final_price": 0.0,
            }
        )
    )
    return {"replacement_order_id": order_id, "status": "processing", "total_amount": 0.0}


def get_order(env: Environment, args: GetOrderInput) -> dict[str, Any]:
    """Order header plus its line items in store order."""
    order = _order(env, args.order_id)
    line_items = [
        {
            "id": item.id,
            "sku": item.sku,
            "product_name": item.product_name,
            "quantity": item.quantity,
            "base_price": item.base_price,
            "discount_amount": item.discount_amount,
            "final_price": item.final_price,
        }
        for item in env.table(LINE_ITEMS).where(order_id=args.order_id)
    ]
    return {
        "id": order.id,
        "customer_id": order.customer_id,
        "order_date": _iso(order.order_date),
        "status": _value(order.status),
        "subtotal_amount": order.subtotal_amount,
        "discount_amount": order.discount_amount,
        "points_used": order.points_used,
        "points_value": order.points_value,
        "shipping_cost": order.shipping_cost,
        "total_amount": order.total_amount,
        "shipping_address_line1": order.shipping_address_line1,
        "shipping_address_city": order.shipping_address_city,
        "shipping_address_state": order.shipping_address_state,
        "shipping_address_zip": order.shipping_address_zip,
        "shipping_speed": _value(order.shipping_speed),
        "fulfillment_type": _value(order.fulfillment_type),
        "installation_service_id": order.installation_service_id,
        "line_items": line_items,
    }


def get_shipment_tracking(env: Environment, args: GetShipmentTrackingInput) -> dict[str, Any]:
    """The order's first shipment; a shipment without a tracking row reads as pending."""
    shipments = env.table(SHIPMENTS).where(order_id=args.order_id)
    if not shipments:
        raise ToolError(f"No shipment found for order: {args.order_id} (may not be shipped yet)")
    shipment = shipments[0]
    tracking = env.table(TRACKING).get(shipment.tracking_number)
    return {
        "shipment_id": shipment.id,
        "order_id": shipment.order_id,
        "carrier": shipment.carrier,
        "tracking_number": shipment.tracking_number,
        "ship_date": _iso(shipment.ship_date),
        "estimated_delivery_date": _iso(shipment.estimated_delivery_date),
        "actual_delivery_date": _iso(shipment.actual_delivery_date),
        "tracking_status": "pending" if tracking is None else _value(tracking.status),
        "current_location": None if tracking is None else tracking.current_location,
    }


def reship_order(env: Environment, args: ReshipOrderInput) -> dict[str, Any]:
    """Correct the address and add a pending shipment with the same carrier; the fee is only reported."""
    order = _order(env, args.order_id)
    shipments_table, tracking_table = env.table(SHIPMENTS), env.table(TRACKING)
    shipments = shipments_table.where(order_id=args.order_id)
    if not shipments:
        raise ToolError(f"No shipment found for order: {args.order_id}")
    original = shipments[0]
    if tracking_table.get(original.tracking_number) is None:
        raise ToolError(f"No tracking found for shipment: {original.id}")
    _save_changed(
        env.table(ORDERS),
        order,
        shipping_address_line1=args.corrected_address_line1,
        shipping_address_city=args.corrected_address_city,
        shipping_address_state=args.corrected_address_state,
        shipping_address_zip=args.corrected_address_zip,
    )
    shipment_id = _first_free_id(shipments_table, "id", "SHP-2{:07d}")
    tracking_number = _first_free_id(tracking_table, "tracking_number", "TRK-2{:011d}")
    eta = NOW + RESHIP_TRANSIT
    shipments_table.create(
        shipments_table.record(
            {
                "id": shipment_id,
                "order_id": args.order_id,
                "carrier": original.carrier,
                "tracking_number": tracking_number,
                "ship_date": NOW,
                "estimated_delivery_date": eta,
                "actual_delivery_date": None,
            }
        )
    )
    tracking_table.create(
        tracking_table.record(
            {
                "tracking_number": tracking_number,
                "shipment_id": shipment_id,
                "carrier": original.carrier,
                "status": "pending",
                "current_location": None,
                "estimated_delivery": eta,
                "last_update": NOW,
            }
        )
    )
    return {
        "order_id": args.order_id,
        "new_shipment_id": shipment_id,
        "new_tracking_number": tracking_number,
        "reship_cost": RESHIP_FEE if args.customer_fault else 0.0,
        "reship_initiated": True,
    }


def update_order_address(env: Environment, args: UpdateOrderAddressInput) -> dict[str, Any]:
    """Overwrite the shipping address (no status or time-window check in the reference)."""
    order = _order(env, args.order_id)
    _save_changed(
        env.table(ORDERS),
        order,
        shipping_address_line1=args.new_address_line1,
        shipping_address_city=args.new_address_city,
        shipping_address_state=args.new_address_state,
        shipping_address_zip=args.new_address_zip,
    )
    return {
        "order_id": order.id,
        "address_updated": True,
        "new_shipping_address_line1": args.new_address_line1,
        "new_shipping_address_city": args.new_address_city,
        "new_shipping_address_state": args.new_address_state,
        "new_shipping_address_zip": args.new_address_zip,
    }


def update_shipping_speed(env: Environment, args: UpdateShippingSpeedInput) -> dict[str, Any]:
    """Re-price shipping and the order total; the difference is reported, not charged."""
    order = _order(env, args.order_id)
    old_speed, new_speed = _value(order.shipping_speed), _value(args.new_shipping_speed)
    new_cost = SHIPPING_COSTS[new_speed]
    total = order.subtotal_amount - order.discount_amount - order.points_value + new_cost
    _save_changed(
        env.table(ORDERS), order, shipping_speed=new_speed, shipping_cost=new_cost, total_amount=total
    )
    return {
        "order_id": order.id,
        "old_shipping_speed": old_speed,
        "new_shipping_speed": new_speed,
        "cost_difference": new_cost - SHIPPING_COSTS[old_speed],
        "updated": True,
    }


def check_inventory(env: Environment, args: CheckInventoryInput) -> dict[str, Any]:
    stock = env.table(INVENTORY).get(args.sku)
    if stock is None:
        raise ToolError(f"SKU not found in inventory system: {args.sku}")
    return {
        "sku": stock.sku,
        "available_quantity": stock.available_quantity,
        "reserved_quantity": stock.reserved_quantity,
        "warehouse_location": stock.warehouse_location,
        "restock_date": _iso(stock.restock_date),
        "expected_restock_quantity": stock.expected_restock_quantity,
    }


def get_product_details(env: Environment, args: GetProductDetailsInput) -> dict[str, Any]:
    """Catalogue attributes; the reference output leaves out ``warranty_period_days``."""
    product = env.table(PRODUCTS).get(args.sku)
    if product is None:
        raise ToolError(f"Product SKU not found: {args.sku}")
    return {
        "sku": product.sku,
        "name": product.name,
        "category": _value(product.category),
        "brand": product.brand,
        "base_price": product.base_price,
        "weight_lbs": product.weight_lbs,
        "is_refurbished": product.is_refurbished,
        "points_redemption_eligible": product.points_redemption_eligible,
        "requires_installation": product.requires_installation,
    }


TOOLS: dict[str, ToolFn] = {
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

READ_ONLY: frozenset[str] = frozenset(
    {"get_order", "get_shipment_tracking", "check_inventory", "get_product_details"}
)
