"""Retail order, inventory and product tools on a real Environment (SQLite in memory).

Each test patches a small, self-describing order graph over the domain defaults, so the expected
values follow from the rows below rather than from task data.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmark.envs import Database, Domain, Environment
from benchmark.tasks import Task
from tests.support.envs import Patch, call, failure, stored

ORDERS = "external_retail_toolset_oms_models_orders"
LINES = "external_retail_toolset_oms_models_order_line_items"
SHIPMENTS = "external_retail_toolset_oms_models_shipments"
TRACKING = "external_retail_toolset_oms_models_carrier_tracking"
INVENTORY = "external_retail_toolset_netsuite_models_inventory_records"
PRODUCTS = "external_retail_toolset_shopify_pim_models_products"

ORDER = {
    "id": "ORD-T1",
    "customer_id": "CUS-T1",
    "order_date": "2025-09-20T10:30:00Z",
    "status": "processing",
    "subtotal_amount": 500,
    "discount_amount": 20,
    "points_used": 200,
    "points_value": 10,
    "shipping_cost": 0,
    "total_amount": 470,
    "shipping_address_line1": "1 Old Road",
    "shipping_address_city": "Austin",
    "shipping_address_state": "TX",
    "shipping_address_zip": "78701",
    "shipping_speed": "standard",
    "fulfillment_type": "warehouse",
}
PATCH: dict[str, list[dict[str, Any]]] = {
    ORDERS: [ORDER, {**ORDER, "id": "ORD-T2", "status": "pending_payment"}],
    LINES: [
        {
            "id": "LIN-T1a",
            "order_id": "ORD-T1",
            "sku": "SKU-T1",
            "product_name": "Speaker",
            "quantity": 1,
            "base_price": 300,
            "discount_amount": 20,
            "final_price": 280,
        },
        {
            "id": "LIN-T1b",
            "order_id": "ORD-T1",
            "sku": "SKU-T2",
            "product_name": "Cable",
            "quantity": 2,
            "base_price": 100,
            "final_price": 100,
        },
    ],
    SHIPMENTS: [
        {
            "id": "SHP-T1",
            "order_id": "ORD-T1",
            "carrier": "UPS",
            "tracking_number": "TRK-T1",
            "ship_date": "2025-09-21T09:00:00Z",
            "estimated_delivery_date": "2025-09-25T17:00:00Z",
        },
        {
            "id": "SHP-T2",
            "order_id": "ORD-T2",
            "carrier": "FedEx",
            "tracking_number": "TRK-NONE",
            "ship_date": "2025-09-21T09:00:00Z",
            "estimated_delivery_date": "2025-09-25T17:00:00Z",
            "actual_delivery_date": "2025-09-24T12:15:30Z",
        },
    ],
    TRACKING: [
        {
            "tracking_number": "TRK-T1",
            "shipment_id": "SHP-T1",
            "carrier": "UPS",
            "status": "returned_to_sender",
            "current_location": "Austin hub",
            "estimated_delivery": "2025-09-25T17:00:00Z",
            "last_update": "2025-09-26T08:00:00Z",
        },
    ],
    INVENTORY: [
        {"sku": "SKU-T1", "available_quantity": 3, "reserved_quantity": 1, "warehouse_location": "AUS-1"},
        {
            "sku": "SKU-OUT",
            "available_quantity": 0,
            "reserved_quantity": 0,
            "warehouse_location": "AUS-2",
            "restock_date": "2025-10-15T00:00:00Z",
            "expected_restock_quantity": 40,
        },
        {"sku": "SKU-NOPIM", "available_quantity": 5, "reserved_quantity": 0},
    ],
    PRODUCTS: [
        {
            "sku": "SKU-T1",
            "name": "Speaker",
            "category": "audio_video",
            "brand": "Acme",
            "base_price": 300,
            "weight_lbs": 4,
            "warranty_period_days": 365,
            "requires_installation": False,
        },
    ],
}
REPLACEMENT = {
    "original_order_id": "ORD-T1",
    "customer_id": "CUS-T1",
    "sku": "SKU-T1",
    "quantity": 2,
    "shipping_speed": "expedited",
    "shipping_address_line1": "9 New Street",
    "shipping_address_city": "Dallas",
    "shipping_address_state": "TX",
    "shipping_address_zip": "75201",
}
RESHIP = {
    "order_id": "ORD-T1",
    "corrected_address_line1": "2 Right Road",
    "corrected_address_city": "Austin",
    "corrected_address_state": "TX",
    "corrected_address_zip": "78702",
    "customer_fault": True,
}


@pytest.fixture
def env_patch() -> Patch:
    return PATCH


def test_read_only_tools_are_declared(retail: Domain) -> None:
    writes = {name for name, tool in retail.tools.items() if tool.writes}
    assert {"get_order", "get_shipment_tracking", "check_inventory", "get_product_details"}.isdisjoint(writes)
    assert {
        "cancel_order",
        "create_replacement_order",
        "reship_order",
        "update_order_address",
        "update_shipping_speed",
    } <= writes


def test_get_order_returns_header_and_line_items_in_store_order(env: Environment) -> None:
    text = env.call_tool("get_order", {"order_id": "ORD-T1"})
    out = json.loads(text)
    assert list(out)[-1] == "line_items" and "installation_service_id" not in out
    assert out["order_date"] == "2025-09-20T10:30:00+00:00"
    assert out["subtotal_amount"] == 500.0 and '"subtotal_amount": 500.0' in text
    assert out["points_used"] == 200 and out["status"] == "processing"
    assert [i["id"] for i in out["line_items"]] == ["LIN-T1a", "LIN-T1b"]
    assert out["line_items"][1] == {
        "id": "LIN-T1b",
        "sku": "SKU-T2",
        "product_name": "Cable",
        "quantity": 2,
        "base_price": 100.0,
        "discount_amount": 0.0,
        "final_price": 100.0,
    }


def test_get_order_keeps_installation_reference_and_reports_missing(env: Environment) -> None:
    default = call(env, "get_order", {"order_id": "ORD-10000001"})
    assert default["installation_service_id"] == "JOB-10000001"
    assert call(env, "get_order", {"order_id": "ORD-NOPE"}) == failure(
        "get_order", "Order not found: ORD-NOPE"
    )
    assert call(env, "get_order", {"order_id": "ORD-T1", "x": 1}) == failure(
        "get_order", "Input validation failed: x: Extra inputs are not permitted"
    )


def test_get_shipment_tracking_joins_carrier_tracking(env: Environment) -> None:
    assert call(env, "get_shipment_tracking", {"order_id": "ORD-T1"}) == {
        "shipment_id": "SHP-T1",
        "order_id": "ORD-T1",
        "carrier": "UPS",
        "tracking_number": "TRK-T1",
        "ship_date": "2025-09-21T09:00:00+00:00",
        "estimated_delivery_date": "2025-09-25T17:00:00+00:00",
        "tracking_status": "returned_to_sender",
        "current_location": "Austin hub",
    }


def test_get_shipment_tracking_without_tracking_row_reads_pending(env: Environment) -> None:
    out = call(env, "get_shipment_tracking", {"order_id": "ORD-T2"})
    assert out["actual_delivery_date"] == "2025-09-24T12:15:30+00:00"
    assert out["tracking_status"] == "pending" and "current_location" not in out
    assert call(env, "get_shipment_tracking", {"order_id": "ORD-X"}) == failure(
        "get_shipment_tracking", "No shipment found for order: ORD-X (may not be shipped yet)"
    )


def test_check_inventory_reports_restock_only_when_set(env: Environment) -> None:
    assert call(env, "check_inventory", {"sku": "SKU-T1"}) == {
        "sku": "SKU-T1",
        "available_quantity": 3,
        "reserved_quantity": 1,
        "warehouse_location": "AUS-1",
    }
    out = call(env, "check_inventory", {"sku": "SKU-OUT"})
    assert out["restock_date"] == "2025-10-15T00:00:00+00:00" and out["expected_restock_quantity"] == 40
    assert call(env, "check_inventory", {"sku": "SKU-X"}) == failure(
        "check_inventory", "SKU not found in inventory system: SKU-X"
    )


def test_get_product_details_omits_warranty_period(env: Environment) -> None:
    assert call(env, "get_product_details", {"sku": "SKU-T1"}) == {
        "sku": "SKU-T1",
        "name": "Speaker",
        "category": "audio_video",
        "brand": "Acme",
        "base_price": 300.0,
        "weight_lbs": 4.0,
        "is_refurbished": False,
        "points_redemption_eligible": True,
        "requires_installation": False,
    }
    assert call(env, "get_product_details", {"sku": 7}) == failure(
        "get_product_details", "Input validation failed: sku: Input should be a valid string"
    )
    assert call(env, "get_product_details", {"sku": "SKU-X"}) == failure(
        "get_product_details", "Product SKU not found: SKU-X"
    )


def test_cancel_order_refunds_only_processing_orders(env: Environment) -> None:
    assert call(env, "cancel_order", {"order_id": "ORD-T1", "cancellation_reason": "customer_request"}) == {
        "order_id": "ORD-T1",
        "status": "cancelled",
        "refund_initiated": True,
    }
    assert call(env, "cancel_order", {"order_id": "ORD-T2", "cancellation_reason": "payment_failed"}) == {
        "order_id": "ORD-T2",
        "status": "cancelled",
        "refund_initiated": False,
    }
    assert stored(env, ORDERS, "ORD-T1")["status"] == "cancelled"
    again = call(env, "cancel_order", {"order_id": "ORD-T1", "cancellation_reason": "out_of_stock"})
    assert again["refund_initiated"] is False


def test_cancel_order_errors(env: Environment) -> None:
    assert call(
        env, "cancel_order", {"order_id": "ORD-X", "cancellation_reason": "customer_request"}
    ) == failure("cancel_order", "Order not found: ORD-X")
    assert call(env, "cancel_order", {"order_id": "ORD-T1", "cancellation_reason": "bored"}) == failure(
        "cancel_order",
        "Input validation failed: cancellation_reason: Input should be 'customer_request', 'payment_failed', "
        "'address_undeliverable' or 'out_of_stock'",
    )
    assert stored(env, ORDERS, "ORD-T1")["status"] == "processing"


def test_create_replacement_order_writes_free_order_and_takes_stock(env: Environment) -> None:
    assert call(env, "create_replacement_order", REPLACEMENT) == {
        "replacement_order_id": "ORD-20000001",
        "status": "processing",
        "total_amount": 0.0,
    }
    order = stored(env, ORDERS, "ORD-20000001")
    assert order["order_date"] == "2025-10-01T13:00:05Z" and order["shipping_speed"] == "expedited"
    assert order["total_amount"] == 0.0 and order["shipping_address_city"] == "Dallas"
    assert order["fulfillment_type"] == "warehouse" and order["installation_service_id"] is None
    line = stored(env, LINES, "LIN-20000001")
    assert (line["order_id"], line["product_name"], line["quantity"], line["final_price"]) == (
        "ORD-20000001",
        "Speaker",
        2,
        0.0,
    )
    assert stored(env, INVENTORY, "SKU-T1")["available_quantity"] == 1
    second = call(env, "create_replacement_order", {**REPLACEMENT, "quantity": "3"})
    assert second["replacement_order_id"] == "ORD-20000002"
    assert stored(env, INVENTORY, "SKU-T1")["available_quantity"] == -2


def test_create_replacement_order_uses_first_free_ids(env: Environment) -> None:
    env.apply_patch(
        {
            ORDERS: [{**ORDER, "id": "ORD-20000001"}],
            LINES: [{**PATCH[LINES][0], "id": "LIN-20000001"}, {**PATCH[LINES][0], "id": "LIN-20000002"}],
        }
    )
    out = call(env, "create_replacement_order", REPLACEMENT)
    assert out["replacement_order_id"] == "ORD-20000002"
    assert stored(env, LINES, "LIN-20000003")["order_id"] == "ORD-20000002"


def test_create_replacement_order_needs_stock(env: Environment) -> None:
    orders = env.table(ORDERS).count()
    for sku in ("SKU-OUT", "SKU-MISSING"):
        assert call(env, "create_replacement_order", {**REPLACEMENT, "sku": sku}) == failure(
            "create_replacement_order",
            f"Product out of stock - cannot create replacement order for SKU {sku}. Available quantity is 0.",
        )
    assert env.table(ORDERS).count() == orders


def test_create_replacement_order_without_product_keeps_stock_decrement(env: Environment) -> None:
    assert call(env, "create_replacement_order", {**REPLACEMENT, "sku": "SKU-NOPIM"}) == failure(
        "create_replacement_order", "Product SKU not found: SKU-NOPIM"
    )
    assert stored(env, INVENTORY, "SKU-NOPIM")["available_quantity"] == 3
    assert not env.table(ORDERS).exists("ORD-20000001")


def test_reship_order_readdresses_and_adds_pending_shipment(env: Environment) -> None:
    assert call(env, "reship_order", RESHIP) == {
        "order_id": "ORD-T1",
        "new_shipment_id": "SHP-20000001",
        "new_tracking_number": "TRK-200000000001",
        "reship_cost": 15.0,
        "reship_initiated": True,
    }
    order = stored(env, ORDERS, "ORD-T1")
    assert (order["shipping_address_line1"], order["shipping_address_zip"]) == ("2 Right Road", "78702")
    shipment = stored(env, SHIPMENTS, "SHP-20000001")
    assert shipment == {
        "id": "SHP-20000001",
        "order_id": "ORD-T1",
        "carrier": "UPS",
        "tracking_number": "TRK-200000000001",
        "ship_date": "2025-10-01T13:00:05Z",
        "estimated_delivery_date": "2025-10-06T13:00:05Z",
        "actual_delivery_date": None,
    }
    tracking = stored(env, TRACKING, "TRK-200000000001")
    assert (tracking["status"], tracking["current_location"], tracking["last_update"]) == (
        "pending",
        None,
        "2025-10-01T13:00:05Z",
    )
    again = call(env, "reship_order", {**RESHIP, "customer_fault": "false"})
    assert (again["new_shipment_id"], again["reship_cost"]) == ("SHP-20000002", 0.0)


def test_reship_order_errors_leave_state_alone(env: Environment) -> None:
    before = env.state_hash()
    assert call(env, "reship_order", {**RESHIP, "order_id": "ORD-X"}) == failure(
        "reship_order", "Order not found: ORD-X"
    )
    assert call(env, "reship_order", {**RESHIP, "order_id": "ORD-T2"}) == failure(
        "reship_order", "No tracking found for shipment: SHP-T2"
    )
    env.apply_patch({ORDERS: [{**ORDER, "id": "ORD-T3"}]})
    assert call(env, "reship_order", {**RESHIP, "order_id": "ORD-T3"}) == failure(
        "reship_order", "No shipment found for order: ORD-T3"
    )
    env.table(ORDERS).delete("ORD-T3")
    assert env.state_hash() == before


def test_update_order_address_overwrites_without_checks(env: Environment) -> None:
    args = {
        "order_id": "ORD-T2",
        "new_address_line1": "5 Elm",
        "new_address_city": "Waco",
        "new_address_state": "TX",
        "new_address_zip": "76701",
    }
    assert call(env, "update_order_address", args) == {
        "order_id": "ORD-T2",
        "address_updated": True,
        "new_shipping_address_line1": "5 Elm",
        "new_shipping_address_city": "Waco",
        "new_shipping_address_state": "TX",
        "new_shipping_address_zip": "76701",
    }
    assert stored(env, ORDERS, "ORD-T2")["shipping_address_city"] == "Waco"
    assert call(env, "update_order_address", {**args, "order_id": "ORD-X"}) == failure(
        "update_order_address", "Order not found: ORD-X"
    )
    assert call(env, "update_order_address", {"order_id": "ORD-T2"})["error"].startswith(
        "Tool execution failed: Input validation failed: new_address_line1: Field required; "
    )


@pytest.mark.parametrize(
    ("speed", "cost", "total", "difference"),
    [("standard", 0.0, 470.0, 0.0), ("expedited", 15.0, 485.0, 15.0), ("next_day", 29.99, 499.99, 29.99)],
)
def test_update_shipping_speed_reprices_order(
    env: Environment, speed: str, cost: float, total: float, difference: float
) -> None:
    assert call(env, "update_shipping_speed", {"order_id": "ORD-T1", "new_shipping_speed": speed}) == {
        "order_id": "ORD-T1",
        "old_shipping_speed": "standard",
        "new_shipping_speed": speed,
        "cost_difference": difference,
        "updated": True,
    }
    order = stored(env, ORDERS, "ORD-T1")
    assert (order["shipping_speed"], order["shipping_cost"], order["total_amount"]) == (speed, cost, total)


def test_update_shipping_speed_downgrade_and_errors(env: Environment) -> None:
    call(env, "update_shipping_speed", {"order_id": "ORD-T1", "new_shipping_speed": "next_day"})
    down = call(env, "update_shipping_speed", {"order_id": "ORD-T1", "new_shipping_speed": "expedited"})
    assert (down["old_shipping_speed"], down["cost_difference"]) == ("next_day", 15.0 - 29.99)
    assert call(
        env, "update_shipping_speed", {"order_id": "ORD-X", "new_shipping_speed": "standard"}
    ) == failure("update_shipping_speed", "Order not found: ORD-X")


def test_replacement_follows_a_golden_trajectory(
    retail: Domain, sqlite_db: Database, retail_tasks: list[Task]
) -> None:
    """On real task data the replacement takes the line item's product name and one unit of stock."""
    task, params = next(
        (t, dict(c.parameters))
        for t in retail_tasks
        for c in t.answer.golden_tool_interactions
        if c.tool == "create_replacement_order"
    )
    with Environment(retail, sqlite_db) as env:
        env.apply_patch(task.data_patch)
        stock = stored(env, INVENTORY, params["sku"])["available_quantity"]
        out = call(env, "create_replacement_order", params)
        new_line = env.table(LINES).where(order_id=out["replacement_order_id"])[0].model_dump()
        assert new_line["product_name"] == stored(env, PRODUCTS, params["sku"])["name"]
        assert stored(env, INVENTORY, params["sku"])["available_quantity"] == stock - params["quantity"]
