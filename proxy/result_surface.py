"""A ``tools/call`` result against its protocol version's result schema, as the SDK checks and sieves it.

The SDK's ``mcp_types.methods.validate_server_result`` (the client's check of an upstream's result) and
``serialize_server_result`` (the server's sieve of an answer: validated, then dumped in the version's
shape) validate against the version's schema, which for 2026-07-28 is the union ``CallToolResult |
InputRequiredResult``. In pydantic's smart mode a union validates against every member, so the input
round's model is tried on every complete result too (a sixth of the sieve's cost, issue 18). Here the
union's ``CallToolResult`` member is tried first, where that cannot change the outcome:

* :func:`check` only asks whether the result fits: if the member accepts it the union does, and if not
  the union is asked, with its own errors.
* :func:`sieve` returns what the union would: a union in smart mode keeps the member with the most
  fields set (and the first of equals). ``InputRequiredResult`` has no field of a complete result but
  ``resultType`` and ``_meta``, which ``CallToolResult`` has too, with ``content`` besides, so unless
  the data names ``inputRequests`` or ``requestState`` the union keeps ``CallToolResult`` whenever it
  accepts the data; the member is asked only then. Otherwise, and when the member refuses the data,
  the union decides.

A version the SDK has no ``tools/call`` result schema for goes to the SDK's functions, which refuse it.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from mcp_types import methods as mcp_methods
from pydantic import TypeAdapter, ValidationError

_ROUND_KEYS = ("inputRequests", "requestState")
_COMPLETE = "CallToolResult"


@dataclass(frozen=True)
class _Surface:
    union: TypeAdapter[Any]
    """The version's schema as the SDK validates it (a model or a union of models)."""
    complete: TypeAdapter[Any] | None
    """Its ``CallToolResult`` member, when it is a union that has one."""


_SURFACES: dict[str, _Surface] = {}


def _surface(version: str) -> _Surface | None:
    known = _SURFACES.get(version)
    if known is None:
        shape: Any = mcp_methods.SERVER_RESULTS.get(("tools/call", version))
        if shape is None:
            return None
        members = [m for m in typing.get_args(shape) if getattr(m, "__name__", None) == _COMPLETE]
        complete = TypeAdapter(members[0]) if len(members) == 1 else None
        known = _SURFACES[version] = _Surface(TypeAdapter(shape), complete)
    return known


def check(version: str, raw: typing.Mapping[str, Any]) -> None:
    """``validate_server_result("tools/call", version, raw)``: pydantic's ``ValidationError`` if the
    result does not fit the version's schema (ValueError or KeyError for a version without one)."""
    surface = _surface(version)
    if surface is None:
        mcp_methods.validate_server_result("tools/call", version, raw)
        return
    if surface.complete is not None:
        try:
            surface.complete.validate_python(raw, by_name=False)
        except ValidationError:
            pass  # not as a complete result: the union decides (below), with its own errors
        else:
            return
    surface.union.validate_python(raw, by_name=False)


def sieve(version: str, data: typing.Mapping[str, Any]) -> dict[str, Any]:
    """``serialize_server_result("tools/call", version, data)``: the result in the version's shape
    (fields the version does not know dropped), or the same errors."""
    surface = _surface(version)
    if surface is None:
        return mcp_methods.serialize_server_result("tools/call", version, data)
    if surface.complete is not None and not any(key in data for key in _ROUND_KEYS):
        try:
            validated = surface.complete.validate_python(data, by_name=False)
        except ValidationError:
            pass  # not as a complete result: the union decides (below)
        else:
            return _dump(surface.complete, validated)
    return _dump(surface.union, surface.union.validate_python(data, by_name=False))


def _dump(adapter: TypeAdapter[Any], validated: Any) -> dict[str, Any]:
    """What ``serialize_server_result`` returns of a validated result."""
    dumped: dict[str, Any] = adapter.dump_python(validated, by_alias=True, mode="json", exclude_none=True)
    return dumped


__all__ = ["check", "sieve"]
