"""Token prices (``--prices FILE``): what an attempt's recorded agent tokens cost in USD.

The file is YAML or JSON (YAML is read, and JSON is YAML), a mapping from an agent or model name, or
``default``, to USD per million tokens::

    default: {input: 1.10, cached_input: 0.275, output: 4.40}
    "simulated:o4-mini": {input: 1.10, output: 4.40}     # cached_input defaults to input

A row is priced by the first of its ``metadata.agent``, ``metadata.model`` and ``default`` that the
table names. Tokens follow ThinkingBox's ``Usage`` (docs/benchmark.md#results-rows): ``input_tokens``
*includes* the ``input_tokens_details.cached_tokens`` (the OpenAI convention), so uncached input is
``max(input − cached, 0)``; reasoning tokens are part of ``output_tokens``. Only agent calls are
recorded, so user-simulator and judge calls are never in the cost.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from benchmark.campaign.results import DecodeResult, read_text

__all__ = ["PriceError", "PriceTable", "TokenPrice", "load_prices", "price_key", "row_cost"]

PER = 1_000_000


class PriceError(ValueError):
    """A price file that cannot be used; the message names the file and, where there is one, the field."""


class TokenPrice(BaseModel):
    """USD per million tokens for one agent or model."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    """Uncached input (prompt) tokens."""
    cached_input: float | None = Field(default=None, ge=0)
    """Cached input tokens; None: the same as ``input``."""
    output: float = Field(ge=0)
    """Output tokens, reasoning tokens included."""


class PriceTable(RootModel[dict[str, TokenPrice]]):
    """Name (agent, model or ``default``) → :class:`TokenPrice`."""

    def lookup(self, names: list[str]) -> tuple[str, TokenPrice] | None:
        """The first of ``names`` (then ``default``) the table prices, with its price; None if none."""
        for name in [*names, "default"]:
            price = self.root.get(name)
            if price is not None:
                return name, price
        return None


def load_prices(path: Path) -> PriceTable:
    """Read and validate a price file; any problem is a :class:`PriceError` naming file and field."""
    text = read_text(path, PriceError)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise PriceError(f"{path}{where}: not YAML or JSON: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise PriceError(f"{path}: must map agent/model names (or default) to prices, got {raw!r:.60}")
    try:
        return PriceTable.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise PriceError(f"{path}: field {where}: {first['msg']}{more}") from None


def price_key(row: DecodeResult) -> list[str]:
    """The names a row is priced by, in order: ``metadata.agent``, ``metadata.model`` (when strings)."""
    return [v for v in (row.metadata.get("agent"), row.metadata.get("model")) if isinstance(v, str) and v]


def row_cost(row: DecodeResult, prices: PriceTable) -> float | None:
    """USD of the row's agent tokens; 0.0 for a row with no usage (the oracle agent, a system error
    before any call); None when it has usage and no price applies."""
    if not row.usage:
        return 0.0
    found = prices.lookup(price_key(row))
    if found is None:
        return None
    price = found[1]
    cached_price = price.input if price.cached_input is None else price.cached_input
    total = 0.0
    for u in row.usage:
        cached = (u.input_tokens_details.cached_tokens or 0) if u.input_tokens_details else 0
        uncached = max(u.input_tokens - cached, 0)
        total += uncached * price.input + cached * cached_price + u.output_tokens * price.output
    return total / PER
