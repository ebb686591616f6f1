"""Bounds on a call's arguments, checked before any schema validation or forwarding.

A tool call's arguments are untrusted input of arbitrary shape. Before the guard spends work on them
(schema validation, digests, audit records, the upstream round trip) :func:`check_arguments` makes
sure they are small, shallow and valid Unicode:

* ``max_keys``: object members plus array items, counted over the whole value;
* ``max_depth``: nesting of objects and arrays (the arguments object itself is depth 1);
* ``max_bytes``: the size of the arguments as compact UTF-8 JSON;
* every string (keys included) must be valid Unicode: a lone surrogate (``"\\ud800"``, which JSON can
  spell but UTF-8 cannot encode) is refused, since nothing downstream (the audit log, an upstream,
  a database) can store it faithfully.

The walk is iterative (no recursion limit to hit) and stops at the first limit it passes, so its
work is bounded by the limits themselves, not by the size of what was sent. A refusal is
:class:`~guard.errors.InvalidArguments` naming the limit, its value and the config key that sets it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guard.errors import InvalidArguments
from guard.models import FieldProblem

RULE = "argument_limits"
"""The rule id of every refusal made here."""


@dataclass(frozen=True)
class ArgumentLimits:
    """The bounds (all positive). The defaults are far above what any tool in the benchmark sends."""

    max_bytes: int = 1024 * 1024
    max_keys: int = 4096
    max_depth: int = 32

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_keys", "max_depth"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


DEFAULT_LIMITS = ArgumentLimits()

CONFIG_KEYS = {
    "max_bytes": "limits.max_argument_bytes",
    "max_keys": "limits.max_argument_keys",
    "max_depth": "limits.max_argument_depth",
}


def _refusal(tool: str, field: str, problem: str, expected: str) -> InvalidArguments:
    return InvalidArguments(
        f"Invalid arguments for {tool}: {field or '(arguments)'}: {problem}",
        tool=tool,
        rule=RULE,
        source="validation",
        fields=[FieldProblem(field=field, problem=problem, expected=expected)],
    )


def _path(parts: tuple[str | int, ...]) -> str:
    """``a.b[2].c`` of the keys and indexes from the arguments down to a value."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path = f"{path}[{part}]"
        elif path:
            path = f"{path}.{part}"
        else:
            path = str(part)
    return path


def _unicode_ok(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(text: str, limit: int = 40) -> str:
    escaped = text.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
    return escaped if len(escaped) <= limit else escaped[: limit - 1] + "…"


def check_arguments(
    tool: str, arguments: Mapping[str, Any], limits: ArgumentLimits = DEFAULT_LIMITS
) -> InvalidArguments | None:
    """The refusal of ``arguments`` if they pass a limit or hold a string that is not valid Unicode.

    Work is bounded by ``limits.max_keys`` (the walk stops one past it) plus one C-level JSON
    encoding of at most what the transport already accepted.
    """
    keys = 0
    # A value's path is only spelled out for a refusal: the stack keeps its keys.
    stack: list[tuple[tuple[str | int, ...], Any, int]] = [((), arguments, 1)]
    while stack:
        parts, value, depth = stack.pop()
        if isinstance(value, str):
            if not _unicode_ok(value):
                return _refusal(
                    tool,
                    _path(parts),
                    f"{_shown(value)} is not valid Unicode (it holds a lone surrogate)",
                    "text that is valid Unicode",
                )
            continue
        if not isinstance(value, dict | list) and not isinstance(value, Mapping):
            continue  # a number, a boolean, null
        if depth > limits.max_depth:
            return _refusal(
                tool,
                _path(parts),
                f"nested deeper than {limits.max_depth} levels",
                f"at most {limits.max_depth} levels of objects and arrays "
                f"(the proxy's {CONFIG_KEYS['max_depth']})",
            )
        keys += len(value)
        if keys > limits.max_keys:
            return _refusal(
                tool,
                _path(parts),
                f"more than {limits.max_keys} keys and items in all",
                f"at most {limits.max_keys} object keys and array items in all "
                f"(the proxy's {CONFIG_KEYS['max_keys']})",
            )
        items = enumerate(value) if isinstance(value, list) else value.items()
        for key, item in items:
            if isinstance(key, str) and not _unicode_ok(key):
                return _refusal(
                    tool,
                    _path((*parts, _shown(key))),
                    "the key is not valid Unicode (it holds a lone surrogate)",
                    "text that is valid Unicode",
                )
            stack.append(((*parts, key), item, depth + 1))
    size = len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8"))
    if size > limits.max_bytes:
        return _refusal(
            tool,
            "",
            f"{size} bytes of JSON, over the limit of {limits.max_bytes}",
            f"at most {limits.max_bytes} bytes (the proxy's {CONFIG_KEYS['max_bytes']})",
        )
    return None


__all__ = ["DEFAULT_LIMITS", "RULE", "ArgumentLimits", "check_arguments"]
