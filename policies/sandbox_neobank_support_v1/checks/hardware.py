"""Hardware: eligibility, approvals, the listed models, ordering only what is out of stock, local
stock, and a replaced laptop retired.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from guard.checks import CheckContext

from .lookups import ASSIGNMENTS, _approved_requests, _call_args, _employee, _inserted, _truthy

# -- hardware ---------------------------------------------------------------------------------------------
DEVICE_MODELS: dict[str, tuple[tuple[str, ...], ...]] = {
    # Hardware §9.7 Device model list, in the policy's order; laptop_premium has two rows (Mac, Windows).
    "laptop_standard": (("Lenovo ThinkBook 14+", "Dell Latitude 5440"),),
    "laptop_premium": (("MacBook Pro 14",), ("Lenovo ThinkPad X1",)),
    "docking_station": (("Lenovo 40A90090US", "Lemorele Mejora 2025", "CalDigit TS4"),),
    "monitor": (('Dell P2425H 24"', 'Amazon Basics 24"', 'ASUS VA24DQFS 24"', 'Dell S2725HSM 27"'),),
    "headset": (("Logitech H650e", "Logitech Zone Wired 2"),),
    "mouse": (("Logitech POP Wireless", "HP 705 Rechargeable Wireless"),),
    "keyboard": (("Logitech Media K200", "HP 150"),),
}
LAPTOPS = frozenset({"laptop_standard", "laptop_premium"})
MONITOR_DOCK = frozenset({"monitor", "docking_station"})


def _model_key(name: Any) -> str:
    """A device model name without case, punctuation or a trailing screen size (24", 27")."""
    text = re.sub(r'\s*\d+(?:\.\d+)?\s*(?:"|”|in(?:ch)?)\s*$', "", str(name or "").strip(), flags=re.I)
    return re.sub(r"[^a-z0-9+]", "", text.lower())


def model_row(device_type: Any, model: Any) -> int | None:
    """Which row of the Device model list a model is in (None: not listed for this device type)."""
    key = _model_key(model)
    if not key:
        return None
    for i, row in enumerate(DEVICE_MODELS.get(str(device_type), ())):
        if any(key.startswith(_model_key(listed)) for listed in row):
            return i
    return None


def _warehouse(employee: Mapping[str, Any]) -> str:
    location = str(employee.get("office_location"))
    return "remote_ship" if location == "remote" else location


def _asset(ctx: CheckContext, asset_id: Any) -> dict[str, Any] | None:
    rows = ctx.query(
        "SELECT * FROM sandbox_neobank_support_main_models_hardware_assets AS h WHERE h.id = :id",
        {"id": str(asset_id)},
    )
    return rows[0] if rows else None


def _hardware_call(ctx: CheckContext) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(employee, device type, model) of an assign_device or create_order call."""
    args = _call_args(ctx)
    tool = ctx.call.tool if ctx.call is not None else None
    if tool == "asset_management_api_assign_device":
        asset = _asset(ctx, args.get("asset_id"))
        if asset is None:
            return None, None, None
        return _employee(ctx, args.get("email")), asset["device_type"], asset["device_model"]
    return _employee(ctx, args.get("requester_email")), args.get("device_type"), args.get("device_model")


def hardware_monitor_dock_eligibility(ctx: CheckContext) -> list[dict[str, Any]]:
    employee, device_type, _model = _hardware_call(ctx)
    if employee is None or device_type not in MONITOR_DOCK:
        return []
    role = str(employee.get("role") or "")
    reasons = []
    if employee.get("employment_status") == "departing":
        reasons.append("departing")
    if _truthy(employee.get("is_contractor")):
        reasons.append("contractor")
    if employee.get("department") == "customer_support" and re.search(r"\bagent", role, re.I):
        reasons.append("customer support agent")
    if re.search(r"receptionist", role, re.I):
        reasons.append("receptionist")
    if reasons:
        return [{"employee_id": employee["id"], "device_type": device_type, "role": role, "because": reasons}]
    return []


TECHNICAL_ROLE = re.compile(
    r"Developer|Engineer|DevOps|SRE|DBA|Database Administrator|Data Engineer", re.IGNORECASE
)


def _approval_needed(ctx: CheckContext, employee: Mapping[str, Any], device_type: str) -> str | None:
    """Why a device needs an approval (Hardware §9.2.1, §9.3, §9.4), or None when it is auto-approved
    or the state cannot tell (a monitor replacing a failed one is auto-approved)."""
    if employee.get("department") == "executive_leadership":
        return None
    if device_type == "laptop_premium":
        return "premium laptop for an employee who is not Executive & Leadership"
    if device_type not in MONITOR_DOCK:
        return None
    held = [d for d in _active_devices(ctx, employee["id"]) if d["device_type"] == device_type]
    remote = employee.get("office_location") == "remote"
    if device_type == "docking_station":
        return None if remote and not held else "docking station not auto-approved"
    if held:
        return None  # may replace a monitor with a hardware failure (auto-approved)
    if remote or TECHNICAL_ROLE.search(str(employee.get("role") or "")):
        return None
    return "monitor not auto-approved"


def hardware_approval(ctx: CheckContext) -> list[dict[str, Any]]:
    employee, device_type, _model = _hardware_call(ctx)
    if employee is None or device_type is None:
        return []
    reason = _approval_needed(ctx, employee, device_type)
    if reason is None or _approved_requests(ctx, employee["id"]):
        return []
    return [{"employee_id": employee["id"], "device_type": device_type, "because": reason}]


def hardware_listed_models(ctx: CheckContext) -> list[dict[str, Any]]:
    _employee_row, device_type, model = _hardware_call(ctx)
    if device_type is None or device_type not in DEVICE_MODELS:
        return []
    if model_row(device_type, model) is None:
        return [
            {
                "device_type": device_type,
                "device_model": model,
                "listed": [m for row in DEVICE_MODELS[device_type] for m in row],
            }
        ]
    return []


def hardware_order_first_model(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _call_args(ctx)
    device_type, model = args.get("device_type"), args.get("device_model")
    rows = DEVICE_MODELS.get(str(device_type))
    row = model_row(device_type, model)
    if rows is None or row is None:
        return []  # an unlisted model is neobank.hardware.listed_models
    first = rows[row][0]
    if not _model_key(model).startswith(_model_key(first)):
        return [{"device_type": device_type, "device_model": model, "first_model": first}]
    return []


def hardware_order_only_out_of_stock(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _call_args(ctx)
    employee = _employee(ctx, args.get("requester_email"))
    device_type = args.get("device_type")
    row = model_row(device_type, args.get("device_model"))
    if employee is None or row is None:
        return []
    warehouse = _warehouse(employee)
    stock = ctx.query(
        "SELECT h.id, h.device_model, h.condition"
        " FROM sandbox_neobank_support_main_models_hardware_assets AS h"
        " WHERE h.device_type = :device_type AND h.warehouse_location = :warehouse"
        " AND h.is_assigned = FALSE AND h.condition IN ('new', 'good')",
        {"device_type": str(device_type), "warehouse": warehouse},
    )
    available = [a for a in stock if model_row(device_type, a["device_model"]) == row]
    if available:
        return [
            {
                "device_type": device_type,
                "warehouse_location": warehouse,
                "available_assets": [a["id"] for a in available],
            }
        ]
    return []


def hardware_assign_from_local_stock(ctx: CheckContext) -> list[dict[str, Any]]:
    args = _call_args(ctx)
    asset = _asset(ctx, args.get("asset_id"))
    employee = _employee(ctx, args.get("email"))
    if asset is None or employee is None:
        return []
    expected = _warehouse(employee)
    if asset["warehouse_location"] != expected:
        return [
            {
                "asset_id": asset["id"],
                "warehouse_location": asset["warehouse_location"],
                "employee_location": employee.get("office_location"),
                "expected_warehouse": expected,
            }
        ]
    return []


def _active_devices(ctx: CheckContext, employee_id: str) -> list[dict[str, Any]]:
    return ctx.query(
        "SELECT s.id AS assignment_id, h.id AS asset_id, h.device_type"
        " FROM sandbox_neobank_support_main_models_asset_assignments AS s"
        " JOIN sandbox_neobank_support_main_models_hardware_assets AS h ON h.id = s.asset_id"
        " WHERE s.employee_id = :employee_id AND s.is_active = TRUE",
        {"employee_id": employee_id},
    )


def hardware_replaced_laptop_retired(ctx: CheckContext) -> list[dict[str, Any]]:
    out = []
    for assignment in _inserted(ctx, ASSIGNMENTS):
        asset = _asset(ctx, assignment.get("asset_id"))
        if asset is None or asset["device_type"] not in LAPTOPS:
            continue
        others = [
            d
            for d in _active_devices(ctx, str(assignment.get("employee_id")))
            if d["device_type"] in LAPTOPS and d["asset_id"] != asset["id"]
        ]
        if others:
            out.append(
                {
                    "employee_id": assignment.get("employee_id"),
                    "new_asset_id": asset["id"],
                    "still_assigned": [d["asset_id"] for d in others],
                }
            )
    return out
