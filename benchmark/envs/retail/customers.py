"""Customer profile and membership (salesforce) and promotion (promo) tools.

Outputs format datetimes with ``isoformat()`` (``+00:00``) as the reference's output models do, while
the stored rows keep pydantic's ``Z`` rendering.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import TableRef
from benchmark.envs.retail.inputs import (
    AddPointsToBalanceInput,
    GetCustomerProfileInput,
    GetDiscountApplicationInput,
    GetMembershipDetailsInput,
    GetPromotionDetailsInput,
    UpdateMembershipStatusInput,
)
from benchmark.envs.retail.rows import ActivePromotion, CustomerProfile, DiscountApplication, MembershipRecord
from benchmark.envs.tools import ToolFn

PROFILES: TableRef[CustomerProfile] = TableRef("external_retail_toolset_salesforce_models_customer_profiles")
MEMBERSHIPS: TableRef[MembershipRecord] = TableRef(
    "external_retail_toolset_salesforce_models_membership_records"
)
PROMOTIONS: TableRef[ActivePromotion] = TableRef("external_retail_toolset_promo_models_active_promotions")
DISCOUNTS: TableRef[DiscountApplication] = TableRef(
    "external_retail_toolset_promo_models_discount_applications"
)

# The reference reads the wall clock here; it is frozen to the instant the agent is told (vectors §7).
PROMOTION_NOW = dt.datetime(2025, 10, 1, 13, 0, 0, tzinfo=dt.UTC)
# Frozen "now" of the retail write tools (docs/benchmark.md#frozen-clocks).
WRITE_NOW = dt.datetime(2025, 10, 1, 13, 0, 5, tzinfo=dt.UTC)


def _out(value: Any) -> Any:
    """A stored value as the reference's output models render it."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


def _aware(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def get_discount_application(env: Environment, args: GetDiscountApplicationInput) -> dict[str, Any]:
    """An order without a discount application gets an empty one rather than an error, as in the reference."""
    found = env.table(DISCOUNTS).where(order_id=args.order_id)
    if not found:
        return {
            "discount_app_id": "",
            "order_id": args.order_id,
            "points_used": 0,
            "loyalty_discount_applied": False,
            "total_discount_amount": 0.0,
        }
    app = found[0]
    return {
        "discount_app_id": app.id,
        "order_id": app.order_id,
        "promo_code_used": app.promo_code_used,
        "points_used": app.points_used,
        "loyalty_discount_applied": app.loyalty_discount_applied,
        "total_discount_amount": app.total_discount_amount,
        "stacking_rule_applied": app.stacking_rule_applied,
    }


def get_promotion_details(env: Environment, args: GetPromotionDetailsInput) -> dict[str, Any]:
    """Exact-code lookup of a promotion valid at the frozen instant; expired and unknown codes read alike."""
    for promo in env.table(PROMOTIONS).where(promo_code=args.promo_code):
        if _aware(promo.valid_from) <= PROMOTION_NOW <= _aware(promo.valid_until):
            return {
                "promo_id": promo.id,
                "promo_code": promo.promo_code,
                "discount_type": _out(promo.discount_type),
                "discount_value": promo.discount_value,
                "stackable_with_points": promo.stackable_with_points,
                "stackable_with_loyalty": promo.stackable_with_loyalty,
                "valid_from": _out(promo.valid_from),
                "valid_until": _out(promo.valid_until),
            }
    raise ToolError(f"Promotion code not found or expired: {args.promo_code}")


def add_points_to_balance(env: Environment, args: AddPointsToBalanceInput) -> dict[str, Any]:
    """Credits (or, with a negative amount, debits) the first membership record of any status, uncapped."""
    table = env.table(MEMBERSHIPS)
    records = table.where(customer_id=args.customer_id)
    if not records:
        raise ToolError(
            f"No membership record found for customer {args.customer_id}. "
            "Customer must have a membership record to receive points."
        )
    record = records[0]
    old_balance = record.points_balance
    record.points_balance = old_balance + args.points_to_add
    table.save(record)
    return {
        "customer_id": args.customer_id,
        "old_balance": old_balance,
        "points_added": args.points_to_add,
        "new_balance": record.points_balance,
    }


def get_customer_profile(env: Environment, args: GetCustomerProfileInput) -> dict[str, Any]:
    """Looks up by customer_id when given, else by email (first match; emails are not unique)."""
    table = env.table(PROFILES)
    if args.customer_id:
        identifier = args.customer_id
        profile = table.get(args.customer_id)
    elif args.email:
        identifier = args.email
        matches = table.where(email=args.email)
        profile = matches[0] if matches else None
    else:
        raise ToolError("Either customer_id or email must be provided")
    if profile is None:
        raise ToolError(f"Customer not found with provided identifier: {identifier}")
    return {name: _out(value) for name, value in profile}


def get_membership_details(env: Environment, args: GetMembershipDetailsInput) -> dict[str, Any]:
    """Only an ``active`` record counts, whatever its end date says."""
    records = env.table(MEMBERSHIPS).where(customer_id=args.customer_id, status="active")
    if not records:
        raise ToolError(f"No active membership found for customer: {args.customer_id}")
    record = records[0]
    return {
        "membership_id": record.id,
        "customer_id": record.customer_id,
        "membership_type": record.membership_type,
        "start_date": _out(record.start_date),
        "end_date": _out(record.end_date),
        "status": _out(record.status),
        "points_balance": record.points_balance,
    }


def _new_membership_id(env: Environment) -> str:
    """``MEM-2{n:07d}`` with the first n from 1 that is not taken (docs/benchmark.md#new-ids)."""
    table = env.table(MEMBERSHIPS)
    n = 1
    while table.exists(f"MEM-2{n:07d}"):
        n += 1
    return f"MEM-2{n:07d}"


def update_membership_status(env: Environment, args: UpdateMembershipStatusInput) -> dict[str, Any]:
    """upgrade: always a new active one-year record and tier plus_member (no eligibility check);
    cancel: the customer's first record of any status is cancelled and the tier set to standard."""
    profiles = env.table(PROFILES)
    memberships = env.table(MEMBERSHIPS)
    customer = profiles.get(args.customer_id)
    if customer is None:
        raise ToolError(f"Customer not found: {args.customer_id}")
    if args.action == "upgrade":
        if not args.membership_type:
            raise ToolError("membership_type is required for upgrade action")
        start = WRITE_NOW.replace(hour=0, minute=0, second=0, microsecond=0)
        end = (start + dt.timedelta(days=365)).replace(hour=23, minute=59, second=59, microsecond=999999)
        record = memberships.record(
            {
                "id": _new_membership_id(env),
                "customer_id": args.customer_id,
                "membership_type": args.membership_type,
                "start_date": start,
                "end_date": end,
                "status": "active",
                "points_balance": 0,
            }
        )
        memberships.create(record)
        profiles.save(profiles.record({**customer.model_dump(), "customer_tier": "plus_member"}))
        return {
            "customer_id": args.customer_id,
            "membership_id": record.id,
            "new_tier": "plus_member",
            "action_completed": "upgraded",
            "start_date": start.isoformat(),
            "end_date": end.isoformat(),
        }
    records = memberships.where(customer_id=args.customer_id)
    if not records:
        raise ToolError(f"No membership record found for customer: {args.customer_id}")
    memberships.save(memberships.record({**records[0].model_dump(), "status": "cancelled"}))
    profiles.save(profiles.record({**customer.model_dump(), "customer_tier": "standard"}))
    return {"customer_id": args.customer_id, "new_tier": "standard", "action_completed": "cancelled"}


TOOLS: dict[str, ToolFn] = {
    "get_discount_application": get_discount_application,
    "get_promotion_details": get_promotion_details,
    "add_points_to_balance": add_points_to_balance,
    "get_customer_profile": get_customer_profile,
    "get_membership_details": get_membership_details,
    "update_membership_status": update_membership_status,
}

READ_ONLY: frozenset[str] = frozenset(
    {"get_discount_application", "get_promotion_details", "get_customer_profile", "get_membership_details"}
)
