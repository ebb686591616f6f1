"""Shared pieces of the booking tools: table names, frozen clocks, money and date handling.

The reference booking tools keep dates as ISO strings and money as ``Decimal``; they parse dates with
``datetime.fromisoformat`` after turning ``Z`` into ``+00:00`` and round money half-up to cents.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import overload

from benchmark.envs.booking.rows import (
    Booking,
    CorporateAccount,
    CustomerProfile,
    GroupBooking,
    Hotel,
    HotelInventory,
    Ticket,
    Transaction,
)
from benchmark.envs.errors import ToolError
from benchmark.envs.records import TableRef

BOOKINGS: TableRef[Booking] = TableRef("booking_api_bookings")
GROUP_BOOKINGS: TableRef[GroupBooking] = TableRef("booking_api_group_bookings")
INVENTORY: TableRef[HotelInventory] = TableRef("booking_api_hotel_inventory")
HOTELS: TableRef[Hotel] = TableRef("hotel_partner_api_hotels")
CORPORATE_ACCOUNTS: TableRef[CorporateAccount] = TableRef("corporate_api_corporate_accounts")
CUSTOMER_PROFILES: TableRef[CustomerProfile] = TableRef("crm_api_customer_profiles")
TRANSACTIONS: TableRef[Transaction] = TableRef("payment_api_transactions")
TICKETS: TableRef[Ticket] = TableRef("zendesk_tickets")

MODIFY_TIME = "2025-11-25T10:00:00Z"
"""The clock of modify / charge / refund / invoice, as those tools write it
(docs/benchmark.md#frozen-clocks)."""

ESCALATE_TIME = "2025-11-30T10:00:00Z"
"""The clock of escalate_to_hotel / charge dispute (docs/benchmark.md#frozen-clocks)."""

CENTS = Decimal("0.01")


def money(amount: Decimal) -> Decimal:
    """Round to cents half-up, the reference's ``quantize(TWO_PLACES, ROUND_HALF_UP)``."""
    return amount.quantize(CENTS, rounding=ROUND_HALF_UP)


def cents(value: float | Decimal) -> Decimal:
    """A float argument as money: ``Decimal(str(x))`` rounded half-up to cents."""
    try:
        return money(Decimal(str(value)))
    except InvalidOperation as exc:
        raise ToolError(str(exc)) from exc


def finite(name: str, value: float) -> float:
    """Refuse inf/nan the way the reference's ``allow_inf_nan=False`` input fields do."""
    if not math.isfinite(value):
        raise ToolError(f"Input validation failed: {name}: Input should be a finite number")
    return value


def parse_iso(text: str) -> dt.datetime:
    """The reference's date parsing; raises ``ValueError`` with Python's own message."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@overload
def value(member: str) -> str: ...
@overload
def value(member: None) -> None: ...
@overload
def value(member: str | None) -> str | None: ...
def value(member: str | None) -> str | None:
    """An enum member's value (records and inputs hold str-Enum members of different classes)."""
    return getattr(member, "value", member)
