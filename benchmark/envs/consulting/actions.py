"""Helpers shared by the consulting multi-action tools (one ``action`` parameter, many operations).

The reference's multi-action tools validate per action at run time ("Missing required parameter"),
mint ids as ``<PFX>-2-{n:06d}`` with the first free ``n`` from 0, and render nested output models
with ``exclude_none``, so nested ``None`` fields disappear while empty lists stay.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar, overload

from benchmark.envs.environment import Environment, Table
from benchmark.envs.errors import ToolError
from benchmark.envs.records import EnumText, R, Record


class ActionInput(Record, Protocol):
    """The input of a multi-action tool: its ``action`` selects the handler."""

    action: EnumText


A = TypeVar("A", bound=ActionInput)
T = TypeVar("T")
Handler = Callable[[Environment, A], dict[str, Any]]


@overload
def value(item: str) -> str: ...
@overload
def value(item: None) -> None: ...
@overload
def value(item: str | None) -> str | None: ...
def value(item: str | None) -> str | None:
    """An enum member as its value (the reference's inputs use ``use_enum_values``)."""
    return item.value if isinstance(item, enum.Enum) else item


def require(args: Record, *names: str) -> None:
    """Refuse the call when a parameter the action needs is missing or empty, in the given order."""
    for name in names:
        if not getattr(args, name):
            raise ToolError(f"Missing required parameter: {name}")


def given(item: T | None) -> T:
    """A parameter the handler has passed to :func:`require`, typed as present from then on. ``None``
    here means the handler uses a parameter it did not require: refused as a missing parameter."""
    if item is None:
        raise ToolError("Missing required parameter")
    return item


def free_id(table: Table[R], prefix: str) -> str:
    """``{prefix}-{n:06d}`` for the first ``n`` from 0 that no row of ``table`` uses."""
    n = 0
    while table.exists(f"{prefix}-{n:06d}"):
        n += 1
    return f"{prefix}-{n:06d}"


def iso(moment: dt.datetime | None) -> str | None:
    """A stored datetime as the output models print it (``isoformat``: ``+00:00``, naive stays naive)."""
    return None if moment is None else moment.isoformat()


def compact(data: Mapping[str, Any]) -> dict[str, Any]:
    """A nested output object without its ``None`` fields, as ``exclude_none`` renders it."""
    return {k: v for k, v in data.items() if v is not None}


def dispatch(handlers: Mapping[str, Handler[A]], env: Environment, args: A) -> dict[str, Any]:
    """Run the handler of ``args.action`` (the schema's enum guarantees one exists)."""
    return handlers[value(args.action)](env, args)
