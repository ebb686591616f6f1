"""Customer CRM API tools.

Profiles are found by their ``customer_id`` field, not by the row id (tasks patch rows whose id differs).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from benchmark.envs.booking.inputs import (
    CrmApiCheckVipStatusInput,
    CrmApiGetCustomerPreferencesInput,
    CrmApiGetCustomerProfileInput,
    CrmApiUpdateCustomerInfoInput,
)
from benchmark.envs.booking.rows import CustomerProfile
from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import TableRef
from benchmark.envs.tools import ToolFn

PROFILES: TableRef[CustomerProfile] = TableRef("crm_api_customer_profiles")

# update_customer_info stamps this fixed instant (docs/benchmark.md#frozen-clocks).
UPDATE_NOW = dt.datetime(2025, 1, 1, 0, 0, 0, tzinfo=dt.UTC)

# The updatable fields in the input model's order, which is the order updated_fields reports.
UPDATABLE = (
    "email",
    "full_name",
    "preferences",
    "special_notes",
    "complaint_count",
    "loyalty_program_status",
    "last_booking_date",
)


def _checked_id(customer_id: str) -> str:
    if not customer_id.strip():
        raise ToolError("Invalid customer_id parameter.")
    return customer_id


def _profile(env: Environment, customer_id: str) -> CustomerProfile:
    found = env.table(PROFILES).where(customer_id=customer_id)
    if not found:
        raise ToolError("Customer not found.")
    return found[0]


def _profile_by_email(env: Environment, email: str) -> CustomerProfile:
    wanted = email.lower()
    for profile in env.table(PROFILES).all():
        if profile.email.lower() == wanted:
            return profile
    raise ToolError("Customer not found.")


def crm_api_check_vip_status(env: Environment, args: CrmApiCheckVipStatusInput) -> dict[str, Any]:
    profile = _profile(env, _checked_id(args.customer_id))
    return {"vip_tier": profile.vip_tier.value, "loyalty_program_status": profile.loyalty_program_status}


def crm_api_get_customer_preferences(
    env: Environment, args: CrmApiGetCustomerPreferencesInput
) -> dict[str, Any]:
    profile = _profile(env, _checked_id(args.customer_id))
    return {"preferences": profile.preferences, "special_notes": profile.special_notes}


def crm_api_get_customer_profile(env: Environment, args: CrmApiGetCustomerProfileInput) -> dict[str, Any]:
    """By customer_id when given (non-empty), else by email compared case-insensitively."""
    if args.customer_id:
        profile = _profile(env, args.customer_id)
    elif args.email:
        profile = _profile_by_email(env, args.email)
    else:
        raise ToolError("Invalid parameters: provide customer_id or email.")
    return {"customer_data": profile.model_dump(mode="json", exclude_none=True)}


def crm_api_update_customer_info(env: Environment, args: CrmApiUpdateCustomerInfoInput) -> dict[str, Any]:
    """Set every non-null field given; at least one is required. updated_at gets the frozen instant."""
    _checked_id(args.customer_id)
    updates = {name: getattr(args, name) for name in UPDATABLE if getattr(args, name) is not None}
    if not updates:
        raise ToolError("Invalid update_fields parameter.")
    profile = _profile(env, args.customer_id)
    changed = profile.model_copy(update={**updates, "updated_at": UPDATE_NOW})
    env.table(PROFILES).save(changed, key=profile.id)
    return {"success": True, "updated_fields": list(updates)}


TOOLS: dict[str, ToolFn] = {
    "crm_api_check_vip_status": crm_api_check_vip_status,
    "crm_api_get_customer_preferences": crm_api_get_customer_preferences,
    "crm_api_get_customer_profile": crm_api_get_customer_profile,
    "crm_api_update_customer_info": crm_api_update_customer_info,
}

READ_ONLY: frozenset[str] = frozenset(
    {"crm_api_check_vip_status", "crm_api_get_customer_preferences", "crm_api_get_customer_profile"}
)
