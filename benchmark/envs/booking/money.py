"""Money helpers shared by the booking payment tools.

Booking money fields are ``Decimal`` and render as strings that keep their scale (``"450.00"``). Amounts
the tools compute from a float argument go through ``Decimal(str(x))`` and are rounded half-up to cents,
as the reference does.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from benchmark.envs.errors import ToolError

TWO_PLACES = Decimal("0.01")


def finite(name: str, value: float) -> float:
    """Refuse inf/nan the way the reference's ``allow_inf_nan=False`` input fields do."""
    if not math.isfinite(value):
        raise ToolError(f"Input validation failed: {name}: Input should be a finite number")
    return value


def cents(value: float | Decimal) -> Decimal:
    """``value`` as a Decimal rounded half-up to 2 places; too large a value fails like the reference."""
    try:
        return Decimal(str(value)).quantize(TWO_PLACES, rounding=ROUND_HALF_UP)
    except InvalidOperation as exc:
        raise ToolError(str(exc)) from exc
