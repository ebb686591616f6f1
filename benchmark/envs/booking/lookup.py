"""Lookup tools: find ids from names, emails and references.

Despite the ``lookup_*`` table copies in the state, the reference lookup tools read the live tables
(``booking_api_*``, ``hotel_partner_api_hotels``, ``corporate_api_corporate_accounts``); the vectors
confirm it (e.g. ``BKG-00000001``, a ``lookup_bookings`` reference, does not validate).
"""

from __future__ import annotations

import re
from typing import Any

from benchmark.envs.booking.common import BOOKINGS, CORPORATE_ACCOUNTS, GROUP_BOOKINGS, HOTELS, value
from benchmark.envs.booking.inputs import (
    LookupLookupCorporateAccountIdInput,
    LookupLookupGroupBookingIdInput,
    LookupLookupHotelIdInput,
    LookupValidateBookingReferenceInput,
)
from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.tools import ToolFn

_REFERENCE = re.compile(r"BKG-\d{8}")


def lookup_lookup_corporate_account_id(
    env: Environment, args: LookupLookupCorporateAccountIdInput
) -> dict[str, Any]:
    """First account whose name contains the query, else first whose contact email shares the domain."""
    if not args.company_name and not args.customer_email:
        raise ToolError("Invalid parameters: provide company_name or customer_email.")
    accounts = env.table(CORPORATE_ACCOUNTS).all()
    matches = []
    if args.company_name:
        query = args.company_name.lower()
        matches = [a for a in accounts if query in a.company_name.lower()]
    if args.customer_email:
        parts = args.customer_email.split("@", 1)
        if len(parts) < 2:
            raise ToolError("Invalid email format.")
        domain = parts[1].lower()
        matches += [
            a for a in accounts if a.contact_email and a.contact_email.split("@")[-1].lower() == domain
        ]
    if not matches:
        raise ToolError("No corporate account found matching criteria.")
    account = matches[0]
    return {
        "corporate_account_id": account.corporate_account_id,
        "company_name": account.company_name,
        "account_tier": value(account.account_tier),
    }


def lookup_lookup_group_booking_id(env: Environment, args: LookupLookupGroupBookingIdInput) -> dict[str, Any]:
    """The group of the referenced booking, else the first group coordinated from the email."""
    if not args.booking_reference and not args.coordinator_email:
        raise ToolError("Invalid parameters: provide booking_reference or coordinator_email.")
    groups = env.table(GROUP_BOOKINGS).all()
    found = None
    if args.booking_reference:
        bookings = env.table(BOOKINGS).where(booking_reference=args.booking_reference)
        if bookings and bookings[0].group_booking_id:
            found = next((g for g in groups if g.group_booking_id == bookings[0].group_booking_id), None)
    if found is None and args.coordinator_email:
        email = args.coordinator_email.lower()
        found = next((g for g in groups if g.coordinator_email.lower() == email), None)
    if found is None:
        raise ToolError("No group booking found matching criteria or booking is not part of a group.")
    return {
        "group_booking_id": found.group_booking_id,
        "total_rooms": found.total_rooms,
        "coordinator_contact": f"{found.coordinator_name} <{found.coordinator_email}>",
    }


def lookup_lookup_hotel_id(env: Environment, args: LookupLookupHotelIdInput) -> dict[str, Any]:
    """Every hotel whose name or location contains the respective query (case-insensitive)."""
    if not args.hotel_name and not args.location:
        raise ToolError("Invalid parameters: provide hotel_name or location.")
    name = args.hotel_name.lower() if args.hotel_name else None
    location = args.location.lower() if args.location else None
    results = [
        {"hotel_id": h.hotel_id, "hotel_name": h.hotel_name, "location": h.location}
        for h in env.table(HOTELS).all()
        if (name and name in h.hotel_name.lower()) or (location and location in h.location.lower())
    ]
    if not results:
        raise ToolError("No hotels found matching criteria.")
    return {"results": results}


def lookup_validate_booking_reference(
    env: Environment, args: LookupValidateBookingReferenceInput
) -> dict[str, Any]:
    """A well-formed reference is valid when a booking has it; the row id comes back."""
    if not _REFERENCE.fullmatch(args.booking_reference):
        raise ToolError("Invalid booking reference format.")
    matches = env.table(BOOKINGS).where(booking_reference=args.booking_reference)
    if not matches:
        return {"is_valid": False, "booking_id": None}
    return {"is_valid": True, "booking_id": matches[0].id}


TOOLS: dict[str, ToolFn] = {
    "lookup_lookup_corporate_account_id": lookup_lookup_corporate_account_id,
    "lookup_lookup_group_booking_id": lookup_lookup_group_booking_id,
    "lookup_lookup_hotel_id": lookup_lookup_hotel_id,
    "lookup_validate_booking_reference": lookup_validate_booking_reference,
}

READ_ONLY: frozenset[str] = frozenset(TOOLS)
